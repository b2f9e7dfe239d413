"""install(crosscheck=True): every fast result is recomputed by stock and compared."""
from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import fastfake
from fastfake import _C


def _meta(t):
    return (type(t), tuple(t.shape), t.stride(), t.dtype, str(t.device), t.storage_offset())


def _program():
    with FakeTensorMode():
        a = torch.empty(4, 6)
        b = torch.empty(6)
        c = torch.empty(4, 6, dtype=torch.float64)
        outs = []
        for _ in range(3):
            outs.append(a + b)
            outs.append(a * 3)
            outs.append(torch.where(a > 0, a, b))
            outs.append(a + c)  # type promotion
            outs.append(a.t() + a.t())  # non-contiguous
        return [_meta(o) for o in outs]


def test_crosscheck_normal_program_runs_and_checks():
    stock = _program()
    fastfake.install(crosscheck=True)
    assert _C.get_config()[1] is True
    fast = _program()
    s = fastfake.stats()
    assert fast == stock
    assert s["elementwise.hit"] >= 5
    assert s["crosscheck.checked"] == s["elementwise.hit"] + s["cache.hit"]
    assert s["crosscheck.mismatch"] == 0


def _warm(a, b):
    a + b  # admission (served by stock) so the next call is a fast hit
    a + b


def test_injected_fault_is_caught_by_crosscheck():
    fastfake.install(crosscheck=True)
    with FakeTensorMode():
        a = torch.empty(2, 3)
        b = torch.empty(2, 3)
        _warm(a, b)
        fastfake.reset_stats()
        _C._inject_fault(1)
        with pytest.raises(fastfake.CrosscheckError) as ei:
            a + b
        # the fault was consumed: the next call is fine again
        ok = a + b
    assert ok.dtype == torch.float32
    msg = str(ei.value)
    assert "aten.add.Tensor" in msg
    assert "dtype" in msg
    assert "Double" in msg and "Float" in msg  # fast vs stock value
    # the inputs' metadata
    assert msg.count("FakeTensor(size=(2, 3), stride=(3, 1), dtype=torch.float32, device=cpu)") == 2
    assert isinstance(ei.value, AssertionError)
    s = fastfake.stats()
    assert s["crosscheck.mismatch"] == 1
    assert s["crosscheck.checked"] == 2


def test_crosscheck_error_names_kwargs():
    fastfake.install(crosscheck=True)
    with FakeTensorMode():
        a = torch.empty(5, dtype=torch.float16)
        torch.add(a, a, alpha=2)
        torch.add(a, a, alpha=2)
        _C._inject_fault(1)
        with pytest.raises(fastfake.CrosscheckError) as ei:
            torch.add(a, a, alpha=2)
    msg = str(ei.value)
    assert "aten.add.Tensor" in msg and "dtype" in msg
    assert "alpha" in msg
    assert "dtype=torch.float16" in msg


def test_injected_fault_is_silent_without_crosscheck():
    # Proves the crosscheck test above can fail: the fault really corrupts results.
    fastfake.install()
    assert _C.get_config()[1] is False
    with FakeTensorMode():
        a = torch.empty(2, 3)
        b = torch.empty(2, 3)
        _warm(a, b)
        _C._inject_fault(1)
        bad = a + b
        good = a + b
    assert bad.dtype == torch.float64  # wrong: stock gives float32
    assert good.dtype == torch.float32
    assert fastfake.stats()["crosscheck.checked"] == 0
