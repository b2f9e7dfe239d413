"""The FunctionalTensor storage-size memo (fastfake/tracing/functional.py): wrappers built
with it equal stock's in every field, over long random sequences in one ShapeEnv
(the memo is learned state), never under proxy tracing, within its bound, without
keeping a ShapeEnv alive, and gone after uninstall()."""
from __future__ import annotations

import gc
import logging
import random
import weakref

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode, unset_fake_temporarily
from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

import fastfake
from fastfake.common import compat as _compat
from fastfake.tracing import functional as _functional
from fastfake.core.selftest import functional_wrapper
from parity import clear_shape_env_lru_caches, error_outcome, shape_env_fields

pytestmark = pytest.mark.skipif(
    not _compat.functional_tensor_recomputes_storage(),
    reason="this torch's FunctionalTensor passes its inner tensor's storage size itself "
    "(2.15 on): nothing to memoise, and the memo is not installed",
)


def _sym(mode, *shape, dtype=torch.float32):
    ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * len(shape))
    with unset_fake_temporarily():
        real = torch.empty(*shape, dtype=dtype)
    return mode.from_tensor(real, symbolic_context=ctx)


def _describe(t: torch.Tensor, inputs) -> tuple:
    """Every field of a wrapper, SymInts by (input index | new, expression, hint)."""
    nodes = {}
    for x in inputs:
        for v in (*x.shape, *x.stride(), x.storage_offset(), x.untyped_storage().nbytes()):
            if isinstance(v, torch.SymInt):
                nodes.setdefault(id(v.node), len(nodes))

    def val(v):
        if isinstance(v, torch.SymInt):
            n = v.node
            return (nodes.get(id(n), "new"), str(n._expr), n._hint, n.pytype, n.constant,
                    n._optimized_summation)
        return v

    return (
        type(t).__name__,
        [val(v) for v in (*t.shape, *t.stride(), t.storage_offset(), t.untyped_storage().nbytes())],
        t.dtype, t.device, t.layout, t.requires_grad, t.is_conj(), t.is_neg(),
        str(torch._C._dispatch_keys(t)),
    )


# One step of a random program over functional wrappers of symbolic fakes.
def _step(rng: random.Random, pool: list):
    x = rng.choice(pool)
    n = x.dim()
    kind = rng.choice(["add", "mul_scalar", "t", "slice", "view", "unsqueeze", "sum", "mm",
                       "narrow_sym", "expand", "clone", "to_half", "transpose", "select"])
    if kind == "add":
        return kind, x + x
    if kind == "mul_scalar":
        return kind, x * 2
    if kind == "t" and n == 2:
        return kind, x.t()
    if kind == "transpose" and n >= 2:
        return kind, x.transpose(0, n - 1)
    if kind == "slice" and n >= 1:
        d = rng.randrange(n)
        start = rng.choice([0, 1])
        return kind, x.narrow(d, start, x.shape[d] - start) if start else x[..., :]
    if kind == "view":
        return kind, x.reshape(-1)
    if kind == "unsqueeze":
        return kind, x.unsqueeze(rng.randrange(n + 1))
    if kind == "sum" and n >= 1:
        return kind, x.sum(rng.randrange(n), keepdim=rng.random() < 0.5)
    if kind == "mm" and n == 2:
        return kind, torch.mm(x, x.t())
    if kind == "narrow_sym" and n >= 1 and x.shape[0] is not None:
        return kind, x[1:]
    if kind == "expand" and n >= 1:
        return kind, x.unsqueeze(0).expand(3, *x.shape)
    if kind == "clone":
        return kind, x.clone(memory_format=rng.choice([torch.contiguous_format, torch.preserve_format]))
    if kind == "to_half":
        return kind, x.to(torch.float16)
    if kind == "select" and n >= 2:
        return kind, x.select(0, 0)
    return "add", x + x


def _run_program(seed: int, steps: int):
    """(descriptions, ShapeEnv state) of a random program under functionalization."""
    rng = random.Random(seed)
    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    out = []
    with mode:
        bases = [_sym(mode, 6, 8), _sym(mode, 5, 7, 3), _sym(mode, 4, 9, dtype=torch.bfloat16)]
        with FunctionalTensorMode():
            pool = [FunctionalTensor.to_functional(b) for b in bases]
            for _ in range(steps):
                try:
                    kind, y = _step(rng, pool)
                except fastfake.CrosscheckError:
                    raise
                except Exception as e:  # noqa: BLE001 - compared with the other side
                    out.append(("error", error_outcome(e)))
                    continue
                out.append((kind, _describe(y, pool)))
                if y.dim() <= 4 and len(pool) < 40:
                    pool.append(y)
    return out, shape_env_fields(env)


def _stock_then_fast(program, *args):
    """``program(*args)`` under stock, then with fastfake installed: (stock result,
    fastfake result, fastfake's counters)."""
    fastfake.uninstall()
    stock = program(*args)
    fastfake.install()
    fastfake.reset_stats()
    try:
        fast = program(*args)
        counts = fastfake.stats()
    finally:
        fastfake.uninstall()
    return stock, fast, counts


@pytest.mark.parametrize("seed", range(4))
def test_long_random_programs_equal_stock(seed):
    """One ShapeEnv, 150 wrappers per program, keys repeating in orders no test
    chose: every wrapper and the ShapeEnv equal stock's, and the memo served."""
    stock, fast, counts = _stock_then_fast(_run_program, seed, 150)
    for (k1, a), (k2, b) in zip(stock[0], fast[0]):
        assert (k1, a) == (k2, b)
    assert len(stock[0]) == len(fast[0])
    assert stock[1] == fast[1]
    assert counts["functional.storage.hit"] > 50, counts
    assert counts["functional.storage.learned"] > 0, counts


def test_proxy_tracing_is_replayed_or_left_to_stock():
    """Under make_fx the tracer records stock's storage-size arithmetic: replayed
    from a tape where the release has ``_sym_register``, else left to stock."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x):
        return (x + x).t().reshape(-1)

    fastfake.install()
    fastfake.reset_stats()
    try:
        make_fx(f, tracing_mode="symbolic", pre_dispatch=False)(torch.randn(6, 8))
        from torch._functorch.aot_autograd import aot_function
        from functorch.compile import nop

        aot_function(f, fw_compiler=nop, dynamic=True)(torch.randn(6, 8))
        counts = fastfake.stats()
    finally:
        fastfake.uninstall()
    if _compat.proxy_sym_register() is None:
        assert counts["functional.storage.proxy_tracing"] > 0, counts
    else:
        assert counts["functional.storage.recorded"] > 0, counts


def test_uninstall_restores_tensor_class_exactly():
    before = dict(torch.Tensor.__dict__)
    fastfake.install()
    assert _functional.is_installed()
    assert torch.Tensor._make_wrapper_subclass is not torch._C.TensorBase._make_wrapper_subclass
    fastfake.uninstall()
    assert not _functional.is_installed()
    assert dict(torch.Tensor.__dict__) == before
    assert torch.Tensor._make_wrapper_subclass is torch._C.TensorBase._make_wrapper_subclass


def test_env_flag_turns_it_off(monkeypatch):
    monkeypatch.setenv("FASTFAKE_NO_FUNCTIONAL_MEMO", "1")
    fastfake.install()
    try:
        assert not _functional.is_installed()
    finally:
        fastfake.uninstall()


def test_other_classes_and_keyword_calls_pass_through():
    class W(torch.Tensor):
        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            raise NotImplementedError

    fastfake.install()
    fastfake.reset_stats()
    try:
        env = ShapeEnv()
        mode = FakeTensorMode(shape_env=env)
        x = _sym(mode, 6, 8)
        w = torch.Tensor._make_wrapper_subclass(W, x.shape, strides=x.stride(), dtype=x.dtype)
        assert type(w) is W and w.shape == x.shape
        counts = fastfake.stats()
    finally:
        fastfake.uninstall()
    assert not any(v for k, v in counts.items() if k.startswith("functional.")), counts


def test_bad_arguments_raise_stocks_error():
    fastfake.install()
    try:
        with pytest.raises(TypeError) as fast:
            torch.Tensor._make_wrapper_subclass(FunctionalTensor, "not sizes", *([None] * 12))
    finally:
        fastfake.uninstall()
    with pytest.raises(TypeError) as stock:
        torch.Tensor._make_wrapper_subclass(FunctionalTensor, "not sizes", *([None] * 12))
    assert str(fast.value) == str(stock.value)


def _holders(obj, depth=4, width=12) -> str:
    """What refers to ``obj``, a few levels up (the failure message of a leak)."""
    lines, frontier, seen = [], [(obj, type(obj).__name__)], {id(obj)}
    for _ in range(depth):
        nxt = []
        for o, path in frontier:
            for r in gc.get_referrers(o):
                if id(r) in seen or r is frontier or r is nxt or type(r).__name__ == "frame":
                    continue
                seen.add(id(r))
                label = type(r).__name__
                if isinstance(r, dict):
                    label += "{" + ", ".join(map(str, list(r)[:6])) + "}"
                nxt.append((r, f"{path} <- {label}"))
        frontier = nxt[:width]
        lines += [p[:300] for _, p in frontier]
    return "\n".join(lines)


def test_memo_is_bounded_and_keeps_no_shape_env_alive(monkeypatch):
    monkeypatch.setattr(_functional, "MAX_ENTRIES_PER_SHAPE_ENV", 4)
    # pytest's log capture would keep torch's structured-trace records, whose
    # deferred payloads reference the ShapeEnv.
    monkeypatch.setattr(logging.getLogger("torch.__trace"), "disabled", True)
    fastfake.install()
    fastfake.reset_stats()
    try:
        env = ShapeEnv()
        mode = FakeTensorMode(shape_env=env)
        with mode:
            x = _sym(mode, 6, 8, 5)
            with FunctionalTensorMode():
                xf = FunctionalTensor.to_functional(x)
                for d in range(3):
                    for start in (1, 2, 3):
                        xf.narrow(d, start, 1)
        counts = fastfake.stats()
        assert counts["functional.storage.reset"] > 0, counts
        assert 0 < len(_functional._State.memo[env]) <= 4
        ref = weakref.ref(env)
        del env, mode, x, xf
        clear_shape_env_lru_caches()
        # (a cycle inside torch that the last allocations left for the collector
        # holds nothing of fastfake's; what a collection does not free is a leak)
        gc.collect()
        assert ref() is None, _holders(ref())
    finally:
        fastfake.uninstall()


def test_cache_clear_forgets_the_memo():
    fastfake.install()
    try:
        env = ShapeEnv()
        mode = FakeTensorMode(shape_env=env)
        with mode:
            x = _sym(mode, 6, 8)
            with FunctionalTensorMode():
                FunctionalTensor.to_functional(x).t()
        assert len(_functional._State.memo.get(env, {})) > 0
        FakeTensorMode.cache_clear()
        assert len(_functional._State.memo) == 0
    finally:
        fastfake.uninstall()


def test_crosscheck_covers_the_memo(monkeypatch):
    """With crosscheck on every served wrapper is compared with stock's; a wrong
    memoised size raises CrosscheckError."""
    fastfake.install(crosscheck=True)
    fastfake.reset_stats()
    try:
        _run_program(1, 40)
        assert fastfake.stats()["functional.storage.crosschecked"] > 0
        real = _functional._State.sym_node
        monkeypatch.setattr(_functional._State, "sym_node",
                            lambda e, env, t, h, **kw: real(e + 1, env, t, h + 1, **kw))
        with pytest.raises(fastfake.CrosscheckError, match="storage size differs"):
            _run_program(1, 40)
    finally:
        fastfake.uninstall()


def _aot_program(seed: int, steps: int):
    """Graph code (forward and backward) of a random program traced by
    AOTAutograd with dynamic shapes; the op sequence depends only on ``seed``."""
    from functorch.compile import make_boxed_func
    from torch._functorch.aot_autograd import aot_function

    rng = random.Random(seed)
    plan = [rng.randrange(9) for _ in range(steps)]

    def f(x, w):
        h = x
        for p in plan:
            if p == 0:
                h = h + x
            elif p == 1:
                h = h.transpose(1, 2).transpose(1, 2)
            elif p == 2:
                h = h.reshape(h.shape[0] * h.shape[1], h.shape[2]).view(x.shape)
            elif p == 3:
                h = torch.cat([h[:, 1:], h[:, :1]], 1)
            elif p == 4:
                h = h @ w
            elif p == 5:
                h = torch.softmax(h, -1)
            elif p == 6:
                h = h * h.sum(-1, keepdim=True)
            elif p == 7:
                h = h.unsqueeze(0).expand(2, *h.shape)[0]
            else:
                h = torch.nn.functional.layer_norm(h, (h.shape[-1],))
        return h.sum()

    graphs = []

    def compiler(gm, example_inputs):
        graphs.append(gm.code)
        return make_boxed_func(gm.forward)

    g = aot_function(f, fw_compiler=compiler, bw_compiler=compiler, dynamic=True)
    x = torch.randn(3, 5, 4, requires_grad=True)
    w = torch.randn(4, 4, requires_grad=True)
    g(x, w).backward()
    return graphs


@pytest.mark.parametrize("seed", range(3))
def test_proxy_traced_wrappers_replay_stocks_record(seed):
    """Under AOTAutograd's proxy tracing, wrappers replay stock's recorded SymNode
    operations into the tracer: forward and backward graphs (code, node names and
    their numbering) are identical to stock's."""
    stock, fast, counts = _stock_then_fast(_aot_program, seed, 30)
    assert fast == stock
    if _compat.proxy_sym_register() is not None:
        assert counts["functional.storage.replayed"] > 0, counts


def test_replay_records_into_the_tracer_like_stock():
    """make_fx (symbolic) over wrappers built directly, where the tracer builds
    each recorded SymNode operation's FX node at once: the graph (node names and
    their numbering included) and storage sizes traced into it equal stock's.
    Skipping the replayed registrations changes this graph."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x):
        total = 0
        views = [x, x.transpose(0, 2), x[1:], x[:, 2:, :].transpose(1, 2), x.unsqueeze(1)]
        for i in range(12):
            w = functional_wrapper(views[i % len(views)])
            if i % 4 == 3:
                total = total + w.untyped_storage().nbytes()
        return x + total

    def trace():
        return make_fx(f, tracing_mode="symbolic")(torch.randn(5, 6, 7)).code

    fastfake.uninstall()
    stock = trace()
    fastfake.install()
    fastfake.reset_stats()
    try:
        fast = trace()
        counts = fastfake.stats()
        if _compat.proxy_sym_register() is not None:
            assert counts["functional.storage.replayed"] > 0, counts
            real = _functional._State.proxy_tensor_dict
            _functional._State.proxy_tensor_dict = {"_sym_register": lambda *a: None}
            try:
                skipped = trace()
            except Exception as e:  # noqa: BLE001 - untracked SymInts can also fail the trace
                skipped = repr(e)
            finally:
                _functional._State.proxy_tensor_dict = real
            assert skipped != stock
    finally:
        fastfake.uninstall()
    assert fast == stock
