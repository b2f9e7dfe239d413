"""pytest plugin: stock's fake-tensor cache crosscheck off after collection.

PyTorch's ``test_fake_tensor.py`` and ``test_proxy_tensor.py`` turn
``torch._dynamo.config.fake_tensor_cache_crosscheck_enabled`` on when imported, and
with it on fastfake's result cache leaves every call to stock (stock crosschecks its
own hits). To run those suites through the result cache too, load this plugin on
both sides of a comparison (``scripts/pytorch_suites DIR files -- -p
fastfake.testing_no_stock_crosscheck``): once every test module is imported it
turns the setting off, for the stock run and the fastfake run alike.
"""
from __future__ import annotations


def pytest_collection_finish(session) -> None:
    import torch._dynamo.config

    torch._dynamo.config.fake_tensor_cache_crosscheck_enabled = False
