"""The memoised free symbols (fastfake/cache/free_symbols.py) the symbolic hooks use for
their signatures: equal to sympy's over long random guard sequences in one
process, keyed by identity, ordered as ``str`` orders them, bounded, cleared."""
from __future__ import annotations

import random

import pytest
import sympy
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

import fastfake
from fastfake.common import compat as _compat
from fastfake.cache import free_symbols as _free_symbols
from fastfake.cache import portable as _portable
from test_cache_symbolic import _sym


def _reference_signature(env, symbols):
    """``_portable.signature`` without the memo: sympy's own ``free_symbols`` and
    ``sorted(key=str)`` on every call."""
    out, todo = set(), list(symbols)
    while todo:
        s = todo.pop()
        if s not in out:
            out.add(s)
            r = env.replacements.get(s)
            if r is not None:
                todo.extend(r.free_symbols)
    symbols = tuple(sorted(out, key=str))
    hints = _compat.backed_hints(env)
    per_symbol = []
    for s in symbols:
        r = env.var_to_range.get(s)
        if s not in hints or r is None:
            return None
        rep = env.replacements.get(s)
        if rep is not None and not rep.free_symbols:
            return None
        per_symbol.append((s, hints[s], r.lower, r.upper, s in env.size_like, rep))
    involved = set(symbols)
    axioms = frozenset(
        (k, v) for k, v in env.axioms.items() if k.free_symbols and k.free_symbols <= involved
    )
    divisible = frozenset(d for d in env.divisible if d.free_symbols <= involved)
    return (tuple(per_symbol), axioms, divisible)


def _random_guard(rng, a, b):
    """One guard stock would add while tracing: a comparison, an equality, a
    divisibility check, or none."""
    kind = rng.randrange(6)
    if kind == 0:
        return bool(a.shape[0] * 2 > b.shape[-1])
    if kind == 1:
        return bool(a.shape[-1] + b.shape[0] >= 3)
    if kind == 2:
        return bool((a.shape[0] * a.shape[-1]) % 2 == 0)
    if kind == 3 and a.shape[-1] == b.shape[-1]:  # an equality: a replacement
        return True
    if kind == 4:
        return bool(a.shape[0] // 2 < b.shape[0] + 1)
    return None


@pytest.mark.parametrize("seed", range(4))
def test_signature_equals_sympy_over_random_guards(seed):
    """After each of 200 random guards, in ShapeEnvs that come and go with
    structurally equal expressions (the memo keeps the first ShapeEnv's objects),
    the memoised signature and symbol order equal sympy's, for every subset of
    symbols the step's tensors involve."""
    rng = random.Random(seed)
    checked = 0
    for _ in range(4):  # ShapeEnvs in turn: the same sizes, so equal expressions
        mode = FakeTensorMode(shape_env=ShapeEnv())
        env = mode.shape_env
        reals = [torch.empty(rng.choice([2, 4, 6]), rng.choice([3, 4, 8])) for _ in range(4)]
        with mode:
            fakes = [_sym(mode, r) for r in reals]
            for _ in range(50):
                a, b = rng.choice(fakes), rng.choice(fakes)
                _random_guard(rng, a, b)
                found: set = set()
                items = [a, b, a.reshape(-1), b.t()]
                from fastfake.cache import learn as _cache

                _cache._collect_symbols(items, found)
                reference: set = set()
                for t in items:
                    for v in (*t.shape, *t.stride(), t.storage_offset(), t.untyped_storage().nbytes()):
                        if isinstance(v, torch.SymInt):
                            reference |= v.node._expr.free_symbols
                assert found == reference
                ordered = _free_symbols.ordered(found)
                assert ordered == tuple(sorted(reference, key=str))
                for k in range(len(ordered) + 1):
                    subset = tuple(sorted(rng.sample(ordered, k), key=str))
                    got = _portable.signature(env, subset)
                    assert got == _reference_signature(env, subset), subset
                    checked += 1
    assert checked > 200


def test_memo_is_keyed_by_identity():
    """Two equal expressions from two ShapeEnvs are two entries: a lookup never runs
    sympy's ``__eq__``, and each returns its own expression's symbols."""
    fastfake.cache_clear()
    first = sympy.Symbol("s0", positive=True, integer=True) * 3 + 1
    rebuilt = sympy.Add(*first.args, evaluate=False)
    assert first == rebuilt and first is not rebuilt
    assert _free_symbols.of(first) == frozenset(first.free_symbols)
    assert _free_symbols.of(rebuilt) == frozenset(rebuilt.free_symbols)
    assert _free_symbols.size() == 2


def test_memo_is_bounded_and_cleared(monkeypatch):
    monkeypatch.setattr(_free_symbols, "_MAX", 8)
    _free_symbols.clear()
    exprs = [sympy.Symbol(f"s{i}") + i for i in range(20)]
    for e in exprs:
        assert _free_symbols.of(e) == frozenset(e.free_symbols)
        assert _free_symbols.size() <= 8
    fastfake.cache_clear()
    assert _free_symbols.size() == 0


def test_ordered_is_str_order_for_every_symbol_kind():
    """Backed sizes, unbacked ints and floats: ordering by name is ``str``'s order."""
    names = ["s0", "s10", "s2", "u0", "u11", "zf3", "zuf0", "s100", "u2"]
    symbols = [sympy.Symbol(n, integer=True) for n in names]
    random.Random(0).shuffle(symbols)
    assert _free_symbols.ordered(symbols) == tuple(sorted(symbols, key=str))
