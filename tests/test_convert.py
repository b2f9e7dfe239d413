"""Real tensors converted in C++ (csrc/convert/convert.cpp, fastfake/convert/converter.py):
``FakeTensorConverter.from_real_tensor`` gives stock's FakeTensor in every field
and ``__dict__``, leaves the converter in stock's state (describer ids, tensor and
storage memos, hit / miss / arg_cnt), answers from the memo exactly when stock's
memo answers (the same object for a live fake; a new one once it died), and hands
every other case to stock, errors included. The memo and id state is learned
across calls, so the same is checked over long random sequences in one process."""
from __future__ import annotations

import gc
import random
import weakref

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorConverter, FakeTensorMode, unset_fake_temporarily
from torch.utils._mode_utils import no_dispatch

import fastfake
from fastfake import _C
from fastfake.convert import converter as _convert
from parity import error_outcome, tensor_meta

STOCK = _convert.stock_from_real_tensor()


def converter_state(mode, ids: bool = True) -> tuple:
    """The converter's ids, memos and counters. Stock's dispatch also gives ids
    (``from_meta_and_device`` memoises each output of an op it runs uncached), so
    where ops run the ids depend on which calls stock's cache answered and
    ``ids=False`` keeps the counters only."""
    mc = mode.fake_tensor_converter.meta_converter
    d = mc.describer
    if not ids:
        return (mc.hit, mc.miss, mc.arg_cnt)
    return (
        d.next_tensor_id,
        d.next_storage_id,
        sorted(d.lookup_tensor.values()),
        sorted(d.lookup_storage.values()),
        sorted(mc.tensor_memo.keys()),
        sorted(mc.storage_memo.keys()),
        mc.hit,
        mc.miss,
        mc.arg_cnt,
    )


# Real tensors of every kind: (name, factory). Factories take a generator so that
# the stock and the fast world build equal tensors.
def _kinds():
    def param(shape=(4, 6), dtype=torch.float32):
        return lambda: torch.nn.Parameter(torch.zeros(shape, dtype=dtype))

    def with_grad():
        p = torch.nn.Parameter(torch.zeros(3, 4))
        p.grad = torch.zeros(3, 4)
        return p

    def buffer():
        b = torch.zeros(5)
        b._is_buffer = True
        return b

    def dynamic_indices():
        t = torch.zeros(2, 3)
        t._dynamo_dynamic_indices = {0}
        return t

    def non_leaf():
        return torch.zeros(3, requires_grad=True) * 2

    def inference():
        with torch.inference_mode():
            return torch.zeros(4)

    def offset():
        base = torch.zeros(10)
        return torch.empty(0).set_(base.untyped_storage(), 2, (4,), (1,))

    def bigger_storage():
        base = torch.zeros(10)
        return torch.empty(0).set_(base.untyped_storage(), 0, (4,), (1,))

    def extra_attr():
        p = torch.nn.Parameter(torch.zeros(2, 2))
        p._is_hf_initialized = True  # an attribute stock does not read
        return p

    return [
        ("parameter", param()),
        ("bfloat16 parameter", param((3, 5), torch.bfloat16)),
        ("frozen parameter", lambda: torch.nn.Parameter(torch.zeros(2, 3), requires_grad=False)),
        ("tensor", lambda: torch.zeros(2, 3, 4)),
        ("int64", lambda: torch.zeros(7, dtype=torch.int64)),
        ("bool", lambda: torch.zeros(3, dtype=torch.bool)),
        ("complex", lambda: torch.zeros(3, dtype=torch.complex64)),
        ("0-d", lambda: torch.tensor(1.5)),
        ("0-d int64", lambda: torch.tensor(3)),
        ("size-1 dims", lambda: torch.zeros(1, 4, 1)),
        ("channels_last", lambda: torch.zeros(2, 3, 4, 5).to(memory_format=torch.channels_last)),
        ("odd strides", lambda: torch.empty_strided((4, 6), (1, 4)).zero_()),
        ("clone of an expanded view", lambda: torch.zeros(3, 1).expand(3, 4).clone()),
        ("requires_grad leaf", lambda: torch.zeros(3, requires_grad=True)),
        ("zero-size", lambda: torch.zeros(0, 3)),
        ("storage larger than needed", bigger_storage),
        ("storage offset", offset),
        ("view", lambda: torch.zeros(4, 6)[1:]),
        ("transpose view", lambda: torch.zeros(4, 6).t()),
        ("non-leaf", non_leaf),
        ("with .grad", with_grad),
        ("inference", inference),
        ("conj", lambda: torch.zeros(3, dtype=torch.complex64).conj()),
        ("buffer attribute", buffer),
        ("dynamo dynamic indices", dynamic_indices),
        ("unread attribute", extra_attr),
        ("meta", lambda: torch.empty(3, device="meta")),
        ("sparse", lambda: torch.zeros(3, 3).to_sparse()),
        ("quantized", lambda: torch.quantize_per_tensor(torch.zeros(3), 0.1, 0, torch.quint8)),
    ]


KINDS = _kinds()
SERVED = {
    "parameter", "bfloat16 parameter", "frozen parameter", "tensor", "int64", "bool",
    "complex", "0-d", "size-1 dims", "channels_last", "odd strides",
    "clone of an expanded view", "requires_grad leaf", "unread attribute",
}


def _convert_outcome(mode, t):
    try:
        return ("ok", mode.from_tensor(t))
    except Exception as e:  # noqa: BLE001 - compared with the other side
        return ("raised", error_outcome(e))


def _describe(outcome, mode):
    kind, v = outcome
    if kind == "raised":
        return outcome
    with unset_fake_temporarily():
        return ("ok", tensor_meta(v, mode))


@pytest.mark.parametrize("name,make", KINDS, ids=[k for k, _ in KINDS])
def test_each_kind_as_stock(name, make):
    results = []
    for fast in (False, True):
        if fast:
            fastfake.install()
            fastfake.reset_stats()
        FakeTensorMode.cache_clear()  # stock rebuilds views with ops: alike in both
        mode = FakeTensorMode()
        t = make()
        first = _convert_outcome(mode, t)
        again = _convert_outcome(mode, t)
        same = first[0] == "ok" and again[0] == "ok" and first[1] is again[1]
        state = converter_state(mode)
        results.append((_describe(first, mode), _describe(again, mode), same, state))
        if fast:
            served = fastfake.stats()["convert.fast"]
            fastfake.uninstall()
    assert results[0] == results[1]
    assert served == (1 if name in SERVED else 0), name


def test_op_with_converted_fakes_matches():
    outs = []
    for fast in (False, True):
        if fast:
            fastfake.install()
        p = torch.nn.Parameter(torch.zeros(6, 4))
        mode = FakeTensorMode()
        w = mode.from_tensor(p)
        with mode:
            x = torch.empty(3, 6)
            y = torch.nn.functional.linear(x, w.t())
            y.sum().backward()
        with unset_fake_temporarily():
            outs.append((tensor_meta(y, mode), tensor_meta(w.grad, mode), tensor_meta(w, mode)))
        fastfake.uninstall()
    assert outs[0] == outs[1]


def test_shared_storage_goes_to_stock():
    fastfake.install()
    fastfake.reset_stats()
    mode = FakeTensorMode()
    p = torch.nn.Parameter(torch.zeros(4, 6))
    a = mode.from_tensor(p)
    b = mode.from_tensor(p.detach())  # same storage, not a view
    assert a.untyped_storage()._cdata == b.untyped_storage()._cdata
    s = fastfake.stats()
    assert s["convert.fast"] == 1 and s["convert.stock.shared_storage"] == 1


def test_memo_answers_as_stock_after_the_fake_dies():
    fastfake.install()
    mode = FakeTensorMode()
    p = torch.nn.Parameter(torch.zeros(4, 6))
    f = mode.from_tensor(p)
    assert mode.from_tensor(p) is f
    ref = weakref.ref(f)
    del f
    gc.collect()
    assert ref() is None
    g = mode.from_tensor(p)  # converted again: the describer keeps p's id
    assert mode.fake_tensor_converter.meta_converter.describer.lookup_tensor[p] == 0
    assert converter_state(mode)[4] == [0]
    assert g.requires_grad and g._is_param
    s = fastfake.stats()
    assert s["convert.fast"] == 2 and s["convert.memo"] == 1


def test_real_inputs_are_converted_in_cpp():
    fastfake.install()
    fastfake.reset_stats()
    lin = torch.nn.Linear(8, 4)
    with FakeTensorMode(allow_non_fake_inputs=True):
        y = lin(torch.empty(2, 8))
    assert tuple(y.shape) == (2, 4)
    s = fastfake.stats()
    assert s["real_inputs.converted"] >= 1 and s["convert.fast"] == 2


def test_arguments_stock_reads_go_to_stock():
    """A shape env, a source, a symbolic context or make_constant: stock's path."""
    from torch._dynamo.source import LocalSource
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    fastfake.install()
    fastfake.reset_stats()
    t = torch.zeros(3, 4)
    mode = FakeTensorMode(shape_env=ShapeEnv())
    f = mode.from_tensor(t)  # symbolic sizes: stock
    assert isinstance(f.shape[0], torch.SymInt)
    mode2 = FakeTensorMode()
    mode2.from_tensor(torch.zeros(2), source=LocalSource("x"))
    mode2.fake_tensor_converter.from_real_tensor(mode2, torch.zeros(2), make_constant=True)
    assert fastfake.stats()["convert.fast"] == 0


def test_errors_are_stocks():
    cases = [
        lambda conv, mode: conv.from_real_tensor(mode, 3),
        lambda conv, mode: conv.from_real_tensor(mode, "x"),
        lambda conv, mode: conv.from_real_tensor(mode, None),
        lambda conv, mode: conv.from_real_tensor(None, torch.zeros(2)),
        lambda conv, mode: conv.from_real_tensor(object(), torch.zeros(2)),
    ]

    def under_no_dispatch(conv, mode):
        with no_dispatch():
            return conv.from_real_tensor(mode, torch.zeros(2))

    cases.append(under_no_dispatch)
    for case in cases:
        got = []
        for fast in (False, True):
            if fast:
                fastfake.install()
            mode = FakeTensorMode()
            try:
                r = case(mode.fake_tensor_converter, mode)
                with unset_fake_temporarily():
                    got.append(("ok", tensor_meta(r)))
            except Exception as e:  # noqa: BLE001
                got.append(("raised", error_outcome(e)))
            fastfake.uninstall()
        assert got[0] == got[1]


def test_uninstall_restores_the_method():
    original = FakeTensorConverter.__dict__["from_real_tensor"]
    fastfake.install()
    assert FakeTensorConverter.__dict__["from_real_tensor"] is not original
    fastfake.install(crosscheck=True)
    fastfake.install()
    fastfake.uninstall()
    assert FakeTensorConverter.__dict__["from_real_tensor"] is original
    assert STOCK is original


def test_env_flag_turns_it_off(monkeypatch):
    monkeypatch.setenv("FASTFAKE_NO_FAST_CONVERT", "1")
    original = FakeTensorConverter.__dict__["from_real_tensor"]
    fastfake.install()
    assert FakeTensorConverter.__dict__["from_real_tensor"] is original
    FakeTensorMode().from_tensor(torch.zeros(2))
    assert fastfake.stats()["convert.fast"] == 0


def test_nothing_kept_alive():
    fastfake.install()
    mode = FakeTensorMode()
    p = torch.nn.Parameter(torch.zeros(4))
    f = mode.from_tensor(p)
    refs = [weakref.ref(mode), weakref.ref(f), weakref.ref(mode.fake_tensor_converter)]
    del mode, f
    gc.collect()
    assert all(r() is None for r in refs)


def test_crosscheck_catches_a_wrong_conversion():
    fastfake.install(crosscheck=True)
    mode = FakeTensorMode()
    mode.from_tensor(torch.nn.Parameter(torch.zeros(3)))  # verified, equal
    _C._inject_fault(1, "convert")
    with pytest.raises(fastfake.CrosscheckError, match="from_real_tensor differs from stock in requires_grad"):
        mode.from_tensor(torch.nn.Parameter(torch.zeros(3)))


# ---------------------------------------------------------------------------
# History: long random sequences in one process, a stock world and a fast world
# fed the same steps (two modes each; fakes kept and dropped; real tensors made,
# dropped, given a .grad, sharing storage), everything compared after each step.
# ---------------------------------------------------------------------------


class World:
    def __init__(self, fast: bool, ids: bool) -> None:
        self.fast = fast
        self.ids = ids
        self.modes = [FakeTensorMode(), FakeTensorMode(allow_non_fake_inputs=True)]
        self.reals: list[torch.Tensor] = []
        self.fakes: list[torch.Tensor] = []

    def step(self, op: tuple):
        kind = op[0]
        if kind == "new":
            _, which = op
            self.reals.append(KINDS[which][1]())
            return None
        if kind == "alias":  # a tensor sharing an existing one's storage (not a view)
            _, i = op
            if not self.reals:
                return None
            src = self.reals[i % len(self.reals)]
            if src.layout != torch.strided or src.device.type != "cpu" or src.is_quantized:
                return None
            with torch.no_grad():
                self.reals.append(torch.empty(0, dtype=src.dtype).set_(src.untyped_storage(), 0, (0,), (1,)))
            return None
        if kind == "drop_real":
            _, i = op
            if self.reals:
                del self.reals[i % len(self.reals)]
            return None
        if kind == "drop_fake":
            _, i = op
            if self.fakes:
                del self.fakes[i % len(self.fakes)]
            return None
        if kind == "gc":
            # automatic collection is off in both worlds; the young generation holds
            # everything made since (a full collection costs seconds in a long
            # test session)
            gc.collect(0)
            return None
        if kind == "convert":
            _, m, i = op
            if not self.reals:
                return None
            mode = self.modes[m]
            out = _convert_outcome(mode, self.reals[i % len(self.reals)])
            if out[0] == "ok":
                ident = next((j for j, f in enumerate(self.fakes) if f is out[1]), None)
                self.fakes.append(out[1])
                return (_describe(out, mode), ident, converter_state(mode, self.ids))
            return (out, None, converter_state(mode, self.ids))
        if kind == "op":  # a real-weight op under allow_non_fake_inputs
            _, i = op
            if not self.reals:
                return None
            t = self.reals[i % len(self.reals)]
            mode = self.modes[1]
            try:
                with mode:
                    r = torch.ops.aten.mul.Tensor(torch.empty(t.shape, dtype=t.dtype), t)
                d = _describe(("ok", r), mode)
            except Exception as e:  # noqa: BLE001
                d = ("raised", error_outcome(e))
            return (d, converter_state(mode, self.ids))
        raise AssertionError(kind)


def _random_program(rng: random.Random, n: int, ops_too: bool) -> list[tuple]:
    """Steps of a random program; with ``ops_too``, real-weight ops as well."""
    ops = []
    for _ in range(n):
        r = rng.random()
        if r < 0.25:
            ops.append(("new", rng.randrange(len(KINDS))))
        elif r < 0.55:
            ops.append(("convert", rng.randrange(2), rng.randrange(1 << 16)))
        elif r < 0.65:
            if ops_too:
                ops.append(("op", rng.randrange(1 << 16)))
        elif r < 0.72:
            ops.append(("alias", rng.randrange(1 << 16)))
        elif r < 0.82:
            ops.append(("drop_fake", rng.randrange(1 << 16)))
        elif r < 0.97:
            ops.append(("drop_real", rng.randrange(1 << 16)))
        else:
            ops.append(("gc",))
    return ops


def _run_program(ops: list[tuple], fast: bool, inject: int = 0) -> list:
    if fast:
        fastfake.install()
        fastfake.reset_stats()
        _C._inject_fault(inject, "convert")
    FakeTensorMode.cache_clear()
    world = World(fast, ids=not any(op[0] == "op" for op in ops))
    trace = []
    with torch.no_grad():
        for op in ops:
            trace.append(world.step(op))
    served = fastfake.stats()["convert.fast"] if fast else 0
    fastfake.uninstall()
    return trace, served


@pytest.mark.parametrize("seed,ops_too", [(0, False), (1, False), (2, True), (3, True)])
def test_random_sequences_match_stock(seed, ops_too):
    ops = _random_program(random.Random(seed), 600, ops_too)
    enabled = gc.isenabled()
    gc.disable()  # collections only where the program says, in both worlds alike
    try:
        stock, _ = _run_program(ops, fast=False)
        fast, served = _run_program(ops, fast=True)
    finally:
        if enabled:
            gc.enable()
    for k, (s, f) in enumerate(zip(stock, fast)):
        assert s == f, f"step {k} {ops[k]}:\nstock {s}\nfast  {f}\nprogram so far: {ops[: k + 1]}"
    assert served > 20


def test_comparison_catches_an_injected_fault():
    """The random-sequence comparison is able to fail."""
    ops = _random_program(random.Random(7), 200, ops_too=False)
    ops.insert(0, ("new", 0))
    ops.insert(1, ("convert", 0, 0))
    stock, _ = _run_program(ops, fast=False)
    fast, _ = _run_program(ops, fast=True, inject=1)
    assert stock != fast
