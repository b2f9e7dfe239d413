"""fastfake.stats() / reset_stats() / elementwise_report(), and stock's STATS counter parity."""
from __future__ import annotations

import re

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext
from torch.utils._stats import simple_call_counter

import fastfake
import parity

STOCK_KEY = "FakeTensorMode.__torch_dispatch__"


def _delta(before: dict[str, int]) -> dict[str, int]:
    after = fastfake.stats()
    return {k: after[k] - before[k] for k in after if after[k] != before[k]}


REQUIRED = [
    "dispatch.total",
    "dispatch.stock",
    "elementwise.hit",
    "elementwise.admit",
    "elementwise.fallback.symbolic_shape",
    "elementwise.fallback.disabled",
    "crosscheck.checked",
    "crosscheck.mismatch",
    "device.fast",
    "device.stock",
]


def test_stats_is_a_flat_dict_of_dotted_int_counters():
    s = fastfake.stats()
    assert type(s) is dict
    for name in REQUIRED:
        assert name in s, name
    assert any(k.startswith("elementwise.fallback.") for k in s)
    for k, v in s.items():
        assert type(k) is str and re.fullmatch(r"[a-z_]+(\.[a-z_]+)+", k), k
        assert type(v) is int, (k, type(v))
        assert v == 0, (k, v)  # the fixture reset them
    # a fresh dict each call, not a live view
    s["dispatch.total"] = 12345
    assert fastfake.stats()["dispatch.total"] == 0


def test_admission_then_fast_hit():
    fastfake.install()
    # A signature no other test uses (op, dtype, rank), so the first call is an admission.
    op = torch.ops.aten.atan2.default
    with FakeTensorMode():
        a = torch.empty(1, 2, 1, 2, 1, 2, 1, dtype=torch.bfloat16)
        b = torch.empty(1, 2, 1, 2, 1, 2, 1, dtype=torch.bfloat16)
        s0 = fastfake.stats()
        r1 = op(a, b)
        d1 = _delta(s0)
        s1 = fastfake.stats()
        r2 = op(a, b)
        d2 = _delta(s1)
    assert d1.get("elementwise.admit") == 1, d1
    assert "elementwise.hit" not in d1, d1
    assert d1.get("dispatch.total") == 1 and d1.get("dispatch.stock") == 1, d1
    assert d2.get("elementwise.hit") == 1, d2
    assert "elementwise.admit" not in d2 and "dispatch.stock" not in d2, d2
    assert d2.get("dispatch.total") == 1, d2
    assert (r1.shape, r1.stride(), r1.dtype) == (r2.shape, r2.stride(), r2.dtype)


@parity.requires_symbolic_cache
def _symbolic_fake(shape_env: ShapeEnv):
    mode = FakeTensorMode(shape_env=shape_env)
    x = mode.from_tensor(
        torch.randn(3, 4),
        symbolic_context=StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * 2),
    )
    return mode, x


def test_symbolic_shape_elementwise_falls_back_then_symbolic_cache():
    fastfake.install()
    # A process's first symbolic pointwise op dispatches a call of its own, once (stock's too):
    # made here, in another mode, so that the counts below do not depend on which
    # tests ran before in this process.
    other, y = _symbolic_fake(ShapeEnv())
    with other:
        y * y  # (not add: a portable record of it would serve the add below)
    mode, x = _symbolic_fake(ShapeEnv())
    assert isinstance(x.shape[0], torch.SymInt)
    s0 = fastfake.stats()
    with mode:
        y = x + x
        y = x + x
    d = _delta(s0)
    assert d.get("elementwise.fallback.symbolic_shape") == 2, d
    # the elementwise path leaves symbolic shapes to the result cache: miss, then hit
    assert d.get("dispatch.stock") == 1 and d.get("dispatch.total") == 2, d
    assert d.get("cache.symbolic.miss") == 1 and d.get("cache.symbolic.hit") == 1, d
    assert "elementwise.hit" not in d and "elementwise.admit" not in d, d
    assert isinstance(y.shape[0], torch.SymInt)


def test_non_pointwise_op_miss_then_cache_hit():
    fastfake.install()
    with FakeTensorMode():
        a = torch.empty(2, 3)
        b = torch.empty(3, 4)
        s0 = fastfake.stats()
        c = torch.mm(a, b)
        c = torch.mm(a, b)
        d = _delta(s0)
    assert c.shape == (2, 4)
    assert d.get("dispatch.total") == 2 and d.get("dispatch.stock") == 1, d
    assert d.get("cache.miss") == 1 and d.get("cache.hit") == 1, d
    assert not any(k.startswith("elementwise.") for k in d), d


def test_non_pointwise_op_goes_to_stock_without_cache():
    fastfake.install(cache=False)
    with FakeTensorMode():
        a = torch.empty(2, 3)
        b = torch.empty(3, 4)
        s0 = fastfake.stats()
        c = torch.mm(a, b)
        c = torch.mm(a, b)
        d = _delta(s0)
    assert c.shape == (2, 4)
    assert d.get("dispatch.total") == 2 and d.get("dispatch.stock") == 2, d
    assert not any(k.startswith("elementwise.") for k in d), d


def test_counters_do_not_move_when_not_installed():
    with FakeTensorMode():
        a = torch.empty(2, 3)
        (a + a).device
        (a + a).device
    assert not any(fastfake.stats().values()), {k: v for k, v in fastfake.stats().items() if v}


def test_reset_stats_zeroes_everything():
    fastfake.install()
    with FakeTensorMode():
        a = torch.empty(2, 3)
        a + a
        a + a
        a.device
    before = fastfake.stats()
    assert before["dispatch.total"] >= 3 and before["elementwise.hit"] >= 1 and before["device.fast"] >= 1
    fastfake.reset_stats()
    after = fastfake.stats()
    assert set(after) == set(before)
    assert all(v == 0 for v in after.values()), after


def _program():
    with FakeTensorMode():
        a = torch.empty(3, 5)
        b = torch.empty(5)
        c = a + b  # pointwise
        c = c * 2  # pointwise with a Python scalar
        c = torch.sigmoid(c)
        c.add_(a)  # in-place pointwise
        m = torch.mm(a, a.t())  # not pointwise
        s = c.sum()  # reduction
        v = c.view(15)  # view
        return tuple(x.shape for x in (c, m, s, v))


def _stock_counter_delta(fn):
    before = simple_call_counter.get(STOCK_KEY, 0)
    out = fn()
    return simple_call_counter.get(STOCK_KEY, 0) - before, out


def test_simple_call_counter_parity():
    _program()  # torch's first run of a program makes a few one-time extra calls
    stock_n, stock_out = _stock_counter_delta(_program)
    assert stock_n > 0
    fastfake.install()
    cold_n, cold_out = _stock_counter_delta(_program)  # admissions
    fastfake.reset_stats()
    warm_n, warm_out = _stock_counter_delta(_program)  # fast hits
    assert fastfake.stats()["elementwise.hit"] >= 3, "parity would be trivial without fast hits"
    assert fastfake.stats()["dispatch.total"] == warm_n
    assert cold_n == stock_n
    assert warm_n == stock_n
    assert cold_out == warm_out == stock_out


def test_elementwise_report_has_per_op_entries():
    fastfake.install()
    rep0 = fastfake.elementwise_report()
    assert isinstance(rep0, dict) and len(rep0) > 100
    assert "aten.add.Tensor" in rep0 and "aten.mul.Tensor" in rep0
    assert "aten.mm.default" not in rep0  # not pointwise
    entry = rep0["aten.add.Tensor"]
    assert {"admitted", "rejected", "hits", "last_mismatch", "inplace"} <= set(entry)
    assert entry["inplace"] is False
    assert rep0["aten.add_.Tensor"]["inplace"] is True
    with FakeTensorMode():
        a = torch.empty(6, 1, 7, dtype=torch.float64)
        torch.add(a, a)
        torch.add(a, a)
        torch.add(a, a)
    rep1 = fastfake.elementwise_report()
    assert rep1["aten.add.Tensor"]["hits"] - entry["hits"] >= 2
    assert rep1["aten.add.Tensor"]["admitted"] >= 1
    # other ops' entries untouched
    assert rep1["aten.mul.Tensor"]["hits"] == rep0["aten.mul.Tensor"]["hits"]
