"""bench.determinism: the one place where stock itself answers differently in two
processes (torch 2.9 walks a set of memory formats for ``meta["tensor_meta"]``; the
order follows object addresses and decides a guard). Both compared worlds pin it.
"""
from __future__ import annotations

import inspect
import re
import textwrap

import pytest
import torch
from torch.fx.experimental import proxy_tensor
from torch.fx.passes import shape_prop

import wholetrace
from bench import determinism

_ORIG = shape_prop._extract_tensor_metadata
_HAS_SET = re.search(r"memory_formats = \{", inspect.getsource(_ORIG)) is not None
# the trace that showed it on torch 2.9 (one guard in one stock process, two in the next)
_ITEM = wholetrace.make_plan(11, 45)[22]


@pytest.fixture(autouse=True)
def _restore():
    yield
    determinism.unpin()
    assert shape_prop._extract_tensor_metadata is _ORIG
    assert proxy_tensor._extract_tensor_metadata is _ORIG


def _variant(order: list[str]):
    src = textwrap.dedent(inspect.getsource(_ORIG))
    src, n = re.subn(r"memory_formats = [\{\(][^{}()]*[\}\)]", f"memory_formats = ({', '.join(order)},)", src)
    assert n == 1, "stock's _extract_tensor_metadata no longer names memory_formats"
    ns: dict = {}
    exec(src, shape_prop.__dict__, ns)
    return ns[_ORIG.__name__]


def test_the_set_becomes_the_later_releases_tuple():
    src = ("def f(r):\n    memory_formats = {\n        torch.contiguous_format,\n        torch.channels_last,\n"
           "        torch.channels_last_3d,\n    }\n    for q in memory_formats:\n        pass\n")
    new = determinism.pinned_source(src)
    assert new is not None and "memory_formats = (\n        torch.contiguous_format,\n        torch.channels_last," in new
    assert new == src.replace("memory_formats = {", "memory_formats = (").replace("    }\n", "    )\n")
    assert determinism.pinned_source(new) is None  # a tuple is left alone
    assert determinism.pinned_source("def f():\n    return {}\n") is None


def test_pin_rebinds_only_where_stock_walks_a_set():
    assert determinism.pin() is _HAS_SET
    fn = shape_prop._extract_tensor_metadata
    if not _HAS_SET:
        assert fn is _ORIG and proxy_tensor._extract_tensor_metadata is _ORIG
        return
    assert fn is not _ORIG and proxy_tensor._extract_tensor_metadata is fn
    assert determinism.pin() is True and shape_prop._extract_tensor_metadata is fn  # idempotent
    # the same metadata as the contiguous-first order, on tensors where the order decides it
    ref = _variant(["torch.contiguous_format", "torch.channels_last", "torch.channels_last_3d"])
    for t in (torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last),
              torch.randn(2, 1, 1, 1), torch.randn(1, 3, 1, 1, 2), torch.randn(3, 1)):
        assert fn(t) == ref(t)


def _guards(fn) -> list[str]:
    old = proxy_tensor._extract_tensor_metadata
    proxy_tensor._extract_tensor_metadata = fn
    try:
        out = wholetrace.run_trace(_ITEM)
    finally:
        proxy_tensor._extract_tensor_metadata = old
    assert "error" not in out, out
    return out["shape_env"]["guards"]


@pytest.mark.filterwarnings("ignore")
def test_the_order_decides_a_guard_where_stock_walks_a_set():
    """Where stock walks a set, the guards of one program follow the walk's order (so
    two stock processes can differ); pinned, they are the contiguous-first order's."""
    contiguous_first = _guards(_variant(["torch.contiguous_format", "torch.channels_last", "torch.channels_last_3d"]))
    channels_last_first = _guards(_variant(["torch.channels_last", "torch.contiguous_format", "torch.channels_last_3d"]))
    determinism.pin()
    pinned = _guards(proxy_tensor._extract_tensor_metadata)
    assert pinned == contiguous_first
    if _HAS_SET:
        assert channels_last_first != contiguous_first  # torch 2.9: Ne(s49 - 1, 1) or not
