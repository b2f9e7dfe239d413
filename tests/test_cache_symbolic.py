"""The result cache with symbolic shapes (csrc/cache/cache.cpp, fastfake/cache/learn.py).

Every case runs its op three times in one FakeTensorMode with a ShapeEnv (miss,
then hits), under stock and under fastfake, with inputs made symbolic by the
same recipe. Compared (tests/parity.py): every output / input field, aliasing,
the raw SymNode values and which outputs *are* input SymNodes
(``sym_structure``), and the ShapeEnv's guards, ranges, replacements and
deferred asserts.
"""
from __future__ import annotations

import weakref

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

import fastfake
import parity

pytestmark = parity.requires_symbolic_cache


def _mode():
    return FakeTensorMode(shape_env=ShapeEnv())


def _sym(mode, real, dynamic=True):
    ctx = StatelessSymbolicContext(
        dynamic_sizes=[DimDynamic.DYNAMIC if dynamic else DimDynamic.STATIC] * real.dim()
    )
    return mode.from_tensor(real, symbolic_context=ctx)


def _inputs(reals):
    def make(mode):
        return tuple(_sym(mode, r) if isinstance(r, torch.Tensor) else r for r in reals)

    return make


def _thrice(fn):
    def run(*args):
        return tuple(fn(*args) for _ in range(3))

    return run


def _check(fn, reals, *, expect_hits=True, repeat=_thrice):
    fastfake.cache_clear()
    both = parity.run_both(repeat(fn), _inputs(reals), mode_factory=_mode, fast_runs=1)
    parity.assert_symbolic_parity(both, "symbolic cache")
    stats = both.fast[0].stats
    if expect_hits:
        assert stats["cache.symbolic.hit"] >= 2, parity.counters_with_prefix(stats, "cache.")
    return both


A = torch.randn(6, 8)
B = torch.randn(8, 5)
C = torch.randn(2, 3, 4, 5)
T = torch.randn(4, 6, 8)
IDX = torch.randint(0, 10, (4, 6))
EMB = torch.randn(10, 8)

CASES = {
    "mm": (torch.mm, [A, B]),
    "addmm": (lambda b, x, w: torch.addmm(b, x, w), [torch.randn(5), A, B]),
    "bmm": (lambda x, y: torch.bmm(x, y.transpose(1, 2)), [T, T]),
    "view_flat": (lambda x: x.view(-1), [A]),
    "view_symint": (lambda x: x.view(x.shape[0] * x.shape[1]), [A]),
    "reshape_split_dim": (lambda x: x.reshape(x.shape[0], 2, -1), [A]),
    "expand": (lambda x: x[:, None].expand(-1, 3, -1), [A]),
    "slice": (lambda x: x[1:4], [A]),
    "select": (lambda x: x[2], [T]),
    "transpose": (lambda x: x.transpose(0, 1), [T]),
    "permute": (lambda x: x.permute(2, 0, 1), [T]),
    "unsqueeze": (lambda x: x.unsqueeze(0), [A]),
    "as_strided": (lambda x: x.as_strided((2, 2), (1, 2), 1), [A]),
    "clone": (lambda x: x.clone(), [T]),
    "contiguous_of_transpose": (lambda x: x.transpose(0, 1).contiguous(), [T]),
    "softmax": (lambda x: torch.softmax(x, -1), [T]),
    "log_softmax": (lambda x: torch.log_softmax(x, 1), [T]),
    "layer_norm": (lambda x: F.layer_norm(x, (8,)), [T]),
    "layer_norm_affine": (lambda x, w, b: F.layer_norm(x, (8,), w, b), [T, torch.randn(8), torch.randn(8)]),
    "sum_dim": (lambda x: x.sum(1), [T]),
    "mean_keepdim": (lambda x: x.mean(-1, keepdim=True), [T]),
    "amax": (lambda x: x.amax(0), [T]),
    "max_dim_tuple": (lambda x: torch.max(x, 1), [T]),
    "split_tuple": (lambda x: x.split(2, dim=1), [A]),
    "unbind": (lambda x: x.unbind(0), [A]),
    "cat": (lambda x, y: torch.cat([x, y], 0), [A, A]),
    "stack": (lambda x, y: torch.stack([x, y], 1), [A, A]),
    "embedding": (lambda w, i: F.embedding(i, w), [EMB, IDX]),
    "conv2d": (lambda x, w: F.conv2d(x, w, padding=1), [C, torch.randn(4, 3, 3, 3)]),
    "gelu": (F.gelu, [T]),
    "add_same_shape": (lambda x, y: x + y, [T, T]),
    "mul_scalar": (lambda x: x * 0.5, [T]),
    "where": (lambda c, x: torch.where(c, x, 0.0), [torch.rand(4, 6) > 0.5, torch.randn(4, 6)]),
    "to_dtype": (lambda x: x.to(torch.float16), [T]),
    "empty_like": (lambda x: torch.empty_like(x), [T]),
    "new_zeros": (lambda x: x.new_zeros(x.shape[0], 3), [A]),
    "inplace_add": (lambda x: x.add_(1), [A]),
    "sdpa": (
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
        [torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 8)],
    ),
}

# Stock does not cache these calls (its bypass rules); fastfake must not either.
NOT_CACHED = {"where"}  # 0-dim / mixed inputs take the elementwise fallback + stock bypass


@pytest.mark.parametrize("name", sorted(CASES))
def test_symbolic_cache_parity(name):
    fn, reals = CASES[name]
    _check(fn, reals, expect_hits=name not in NOT_CACHED)


def test_output_dims_are_the_current_inputs_symnodes():
    """Output sizes that stock takes from an input are that input's SymNode objects
    (on every hit, the current call's: FX graph building tracks SymNodes by identity)."""
    fastfake.install()
    mode = _mode()
    x1, w = _sym(mode, A), _sym(mode, B)
    assert isinstance(x1.shape[0], torch.SymInt)
    with mode:
        x2 = x1 * 2  # another tensor with x1's SymNodes
        for x in (x1, x2, x1):
            torch.mm(x, w)
            fastfake.reset_stats()
            out = torch.mm(x, w)
            st = fastfake.stats()
            assert st["cache.symbolic.hit"] == 1, {k: v for k, v in st.items() if v}
            assert out.shape[0].node is x.shape[0].node
            assert out.shape[1].node is w.shape[1].node


def test_entries_are_scoped_to_their_shape_env():
    fastfake.install()
    for _ in range(2):
        mode = _mode()
        x = _sym(mode, T)
        with mode:
            fastfake.reset_stats()
            torch.softmax(x, -1)
            first = fastfake.stats()
            torch.softmax(x, -1)
            second = fastfake.stats()
        # a new ShapeEnv never sees the previous one's entries
        assert first["cache.symbolic.miss"] == 1 and first["cache.symbolic.hit"] == 0, first
        assert second["cache.symbolic.hit"] == 1, second


def test_dead_shape_env_is_not_kept_alive():
    """Entries hold no reference to their ShapeEnv, its SymNodes or the mode."""
    fastfake.install()

    def run():
        mode = _mode()
        real = torch.randn(4, 6, 8)
        x = _sym(mode, real)
        with mode:
            for _ in range(2):
                F.layer_norm(x, (8,))
                x.view(-1)
        assert fastfake.stats()["cache.symbolic.hit"] >= 2
        return weakref.ref(mode.shape_env), weakref.ref(mode)

    env, mode = run()
    assert fastfake._C.cache_size() > 0
    parity.clear_shape_env_lru_caches()
    assert env() is None and mode() is None


def _replacement_program(x, y):
    # x: [s0, s1], y: [s2, s3]. The clone entries are learned while all symbols are
    # distinct; the mm adds the replacement s2 -> s1, after which stock's cache hit
    # builds y's clone with a storage size in s1 (its SymNode arithmetic reads the
    # replaced expressions), so the learned entry must not be reused as is.
    a = (x.clone(), y.clone())
    torch.mm(x, y)
    b = (x.clone(), y.clone())
    c = (x.clone(), y.clone())
    return a, b, c


def test_replacements_recheck_entries():
    fastfake.cache_clear()
    both = parity.run_both(
        _replacement_program, _inputs([torch.randn(3, 4), torch.randn(4, 2)]),
        mode_factory=_mode, fast_runs=1,
    )
    parity.assert_symbolic_parity(both, "replacement")
    stats = both.fast[0].stats
    assert stats["cache.symbolic.rechecked"] + stats["cache.symbolic.stale"] >= 1, stats


def test_symbolic_float_scalar_bypasses_like_stock():
    def f(x):
        return torch.ops.aten.mul.Tensor(x, x.shape[0] / 2)

    both = _check(f, [T], expect_hits=False)
    assert both.fast[0].stats["cache.bypass.symbolic_scalar"] >= 1


def test_symbolic_cache_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("FASTFAKE_NO_SYMBOLIC_CACHE", "1")
    both = _check(torch.mm, [A, B], expect_hits=False)
    stats = both.fast[0].stats
    assert stats["cache.symbolic.hit"] == 0 and stats["cache.bypass.symbolic_shape"] >= 3, stats


def _trace_symbolic(fn, args, **install):
    """make_fx(tracing_mode="symbolic") under stock and under fastfake: (graph code,
    node vals, ShapeEnv guards) of each, and fastfake's counters."""

    def trace():
        gm = make_fx(fn, tracing_mode="symbolic")(*args)
        env = next(n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder").shape[0].node.shape_env
        return gm.code, [str(n.meta.get("val")) for n in gm.graph.nodes], [str(g.expr) for g in env.guards]

    fastfake.uninstall()
    FakeTensorMode.cache_clear()
    stock = trace()
    fastfake.install(**install)
    fastfake.reset_stats()
    try:
        fast = trace()
        stats = fastfake.stats()
    finally:
        fastfake.uninstall()
    return stock, fast, stats


def _mlp(x, w1, w2):
    h = F.gelu(x @ w1)
    h = h.transpose(0, 1).contiguous().transpose(0, 1)
    return F.layer_norm(h @ w2, (w2.shape[1],)).sum(-1)


@pytest.mark.parametrize("crosscheck", [False, True])
def test_make_fx_symbolic_identical_graph_and_guards(crosscheck):
    args = (torch.randn(4, 6, 8), torch.randn(8, 16), torch.randn(16, 8))
    stock, fast, stats = _trace_symbolic(lambda *a: (_mlp(*a), _mlp(*a)), args, crosscheck=crosscheck)
    assert fast == stock
    assert stats["cache.symbolic.hit"] > 0, parity.counters_with_prefix(stats, "cache.")
    if crosscheck:
        assert stats["crosscheck.checked"] > 0 and stats["crosscheck.mismatch"] == 0


def test_erroring_symbolic_call_leaves_no_capture_frame():
    from fastfake.cache import learn as _cache

    def f(x, y):
        return torch.mm(x, y)  # [s0, s1] @ [s2, s3] with hints 4 vs 5: stock raises

    both = _check(f, [torch.randn(3, 4), torch.randn(5, 2)], expect_hits=False)
    assert not both.stock[0].ok
    assert both.fast[0].stats["cache.symbolic.miss"] >= 1
    assert _cache._CAPTURES == []


def _same_layout_outputs(x):
    # different ops whose outputs have the same sizes / strides: after the first,
    # stock's validation tensor for each new entry is built from the recorded recipe
    fresh = (torch.softmax(x, -1), torch.log_softmax(x, -1), torch.tanh(x).clone())
    views = (x.transpose(0, 1), x.permute(1, 0, 2), x.swapaxes(0, 1))
    # repeats are cache hits, rebuilt from what was learned from those tensors;
    # .contiguous() on them reads the contiguity the learned recipe seeded
    again = (x.transpose(0, 1), x.permute(1, 0, 2), torch.softmax(x, -1))
    return fresh, views, again, tuple(t.contiguous() * 2 for t in again)


def test_synthesised_outputs_are_reused_exactly():
    both = _check(_same_layout_outputs, [T], repeat=lambda f: f)
    stats = both.fast[0].stats
    assert stats["cache.symbolic.synth_reused"] >= 2, parity.counters_with_prefix(stats, "cache.")


def test_synthesised_outputs_reused_under_make_fx():
    stock, fast, stats = _trace_symbolic(_same_layout_outputs, (torch.randn(4, 6, 8),))
    assert fast == stock
    assert stats["cache.symbolic.synth_reused"] >= 2, parity.counters_with_prefix(stats, "cache.")
