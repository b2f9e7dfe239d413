"""A mode that refuses meta FakeTensors (``torch._functorch.config.fake_tensor_allow_meta
= False``, ``FakeTensorMode.allow_meta``): stock's ``FakeTensor.__new__`` raises for
a meta output, so fastfake serves nothing in such a mode, whatever it learned in
another one (found by PyTorch's ``test_fake_tensor.py::test_allow_meta`` with
stock's cache crosscheck off)."""
from __future__ import annotations

from unittest.mock import patch

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import fastfake
from parity import error_outcome


def _program():
    out = []
    for allow in (True, False, True):
        with patch.object(torch._functorch.config, "fake_tensor_allow_meta", allow):
            for _ in range(2):
                try:
                    with FakeTensorMode():
                        x = torch.rand([4], device="meta")
                        y = torch.empty(4, device="meta")
                        out.append(("ok", tuple((x + x).shape), str((y * 2).device)))
                except Exception as e:  # noqa: BLE001 - compared with the other side
                    out.append(("raised", error_outcome(e)))
    return out


def test_meta_outputs_refused_as_stock():
    FakeTensorMode.cache_clear()
    stock = _program()
    fastfake.install()
    FakeTensorMode.cache_clear()
    fast = _program()
    served = fastfake.stats()
    assert fast == stock
    assert stock[2][0] == "raised" and stock[0][0] == "ok"
    # the modes that allow meta were served
    assert served["elementwise.hit"] + served["cache.hit"] > 0
