"""The incrementally filtered axioms and divisibility facts (fastfake/cache/facts.py)
that ``fastfake.cache.portable.signature`` compares on every symbolic miss: equal
to filtering the live collections afresh, over long random sequences of every
change a ShapeEnv's collections can see (growth, an axiom removed as
``patch_source_specialization`` does on exit, a value overwritten, an axiom
removed and re-added at the end, ``divisible`` replaced by a new set as
``_update_divisible`` does, removals and additions that keep the size), in one
process and for many closures at once; weakly keyed, bounded, cleared."""
from __future__ import annotations

import gc
import random
import weakref

import pytest
import sympy
from torch.fx.experimental.symbolic_shapes import ShapeEnv

import fastfake
from fastfake.cache import facts as _facts


class _Env:
    """What the filter reads of a ShapeEnv."""

    def __init__(self) -> None:
        self.axioms: dict = {}
        self.divisible: set = set()


def _naive_axioms(env, symbols):
    involved = set(symbols)
    return frozenset(
        (k, v) for k, v in env.axioms.items() if k.free_symbols and k.free_symbols <= involved
    )


def _naive_divisible(env, symbols):
    involved = set(symbols)
    return frozenset(d for d in env.divisible if d.free_symbols <= involved)


SYMS = [sympy.Symbol(f"s{i}", integer=True, positive=True) for i in range(5)]


def _random_expr(rng):
    k = rng.randrange(4)
    if k == 0:
        return sympy.Integer(rng.randrange(1, 4))  # no free symbols
    chosen = rng.sample(SYMS, rng.randrange(1, 3))
    e = sympy.Integer(rng.randrange(0, 3))
    for s in chosen:
        e = e + rng.randrange(1, 4) * s
    return e


def _random_axiom(rng):
    e = _random_expr(rng)
    return rng.choice([sympy.Lt, sympy.Le, sympy.Eq, sympy.Ne])(e, rng.randrange(0, 9))


def _step(rng, env):
    """One random change of the kind a ShapeEnv's collections see; returns its name."""
    kind = rng.randrange(10)
    if kind <= 3:  # growth (the common case), sometimes several at once
        for _ in range(rng.randrange(1, 4)):
            a = _random_axiom(rng)
            if a not in (sympy.true, sympy.false):
                env.axioms[a] = rng.choice([sympy.true, sympy.false])
        return "grow"
    if kind == 4 and env.axioms:  # removal (patch_source_specialization's exit)
        for k in rng.sample(list(env.axioms), rng.randrange(1, min(3, len(env.axioms)) + 1)):
            env.axioms.pop(k)
        return "remove"
    if kind == 5 and env.axioms:  # a value overwritten in place
        k = rng.choice(list(env.axioms))
        env.axioms[k] = sympy.false if env.axioms[k] is sympy.true else sympy.true
        return "overwrite"
    if kind == 6 and env.axioms:  # removed and re-added at the end, plus one new: same size + 1
        k = rng.choice(list(env.axioms))
        v = env.axioms.pop(k)
        env.axioms[_random_axiom(rng)] = sympy.true
        env.axioms[k] = v
        return "reorder"
    if kind == 7 and env.axioms:  # one out, one in: the same size
        env.axioms.pop(rng.choice(list(env.axioms)))
        env.axioms[_random_axiom(rng)] = sympy.true
        return "swap"
    if kind == 8:
        env.divisible.add(sympy.Mod(_random_expr(rng), rng.randrange(2, 5)))
        return "divisible_add"
    if kind == 9 and env.divisible:  # _update_divisible (a new, smaller set), then new facts
        keep = rng.sample(list(env.divisible), rng.randrange(0, len(env.divisible)))
        env.divisible = set(keep)
        for _ in range(rng.randrange(0, 4)):
            env.divisible.add(sympy.Mod(_random_expr(rng), rng.randrange(2, 5)))
        return "divisible_replace"
    return "none"


@pytest.mark.parametrize("seed", range(6))
def test_equals_fresh_filter_over_random_changes(seed):
    rng = random.Random(seed)
    envs = [_Env() for _ in range(3)]
    seen: set = set()
    checks = 0
    for _ in range(600):
        env = rng.choice(envs)
        for _ in range(rng.choice([1, 1, 2, 3])):  # (several changes between lookups too)
            seen.add(_step(rng, env))
        for _ in range(rng.randrange(1, 4)):
            symbols = tuple(sorted(rng.sample(SYMS, rng.randrange(0, len(SYMS) + 1)), key=str))
            assert _facts.axioms(env, symbols) == _naive_axioms(env, symbols)
            assert _facts.divisible(env, symbols) == _naive_divisible(env, symbols)
            checks += 1
    # every kind of change happened, and the filters were not trivially empty
    assert seen >= {"grow", "remove", "overwrite", "reorder", "swap", "divisible_add", "divisible_replace"}
    assert any(_naive_axioms(e, tuple(SYMS)) for e in envs)
    assert checks > 1000


def test_unchanged_returns_the_same_object():
    """An unchanged collection gives back the frozenset a signature took earlier
    (comparing signatures is then an identity check); a change gives a new one."""
    env = _Env()
    env.axioms[sympy.Lt(SYMS[0], 4)] = sympy.true
    symbols = (SYMS[0],)
    first = _facts.axioms(env, symbols)
    assert _facts.axioms(env, symbols) is first
    env.axioms[sympy.Lt(SYMS[0], 7)] = sympy.true
    grown = _facts.axioms(env, symbols)
    assert grown is not first and len(grown) == 2
    env.axioms[sympy.Lt(SYMS[1], 7)] = sympy.true  # outside the closure
    assert _facts.axioms(env, symbols) == grown


def test_weakly_keyed_and_cleared():
    env = ShapeEnv()
    ref = weakref.ref(env)
    _facts.axioms(env, ())
    _facts.divisible(env, ())
    assert _facts.size() >= 1
    del env
    gc.collect()
    assert ref() is None
    _facts.axioms(_Env(), ())
    fastfake.cache_clear()
    assert _facts.size() == 0


def test_closures_per_env_are_bounded(monkeypatch):
    monkeypatch.setattr(_facts, "MAX_CLOSURES", 4)
    env = _Env()
    for i, s in enumerate(SYMS):
        env.axioms[sympy.Lt(s, i + 2)] = sympy.true
    for r in range(1, len(SYMS) + 1):
        for i in range(len(SYMS) - r + 1):
            symbols = tuple(SYMS[i:i + r])
            assert _facts.axioms(env, symbols) == _naive_axioms(env, symbols)
            assert len(_facts._TABLE[env].axioms.results) <= 4


def _copy(e):
    """An equal expression that is another object (sympy's cache would otherwise
    hand back the same one)."""
    if not e.args:
        return e
    return e.func(*[_copy(a) for a in e.args], evaluate=False)


def test_two_shape_envs_equal_facts_are_one_object_and_match():
    """What the C++ admission of portable records asks (``match``): the facts of two
    ShapeEnvs built from equal but distinct expressions are interned to the same
    objects, so the recorded set and the other ShapeEnv's compare without sympy;
    a fact more or less, or another value, and they do not match."""
    a, b = _Env(), _Env()
    rng = random.Random(7)
    for _ in range(40):
        k = _random_axiom(rng)
        if k in (sympy.true, sympy.false):
            continue
        a.axioms[k] = sympy.true
        b.axioms[_copy(k)] = sympy.true
    d = sympy.Mod(SYMS[0] + SYMS[1], 2)
    a.divisible.add(d)
    b.divisible.add(_copy(d))
    assert any(ka is not kb and ka == kb for ka, kb in zip(a.axioms, b.axioms))
    symbols = tuple(SYMS)
    got_a, got_b = _facts.axioms(a, symbols), _facts.axioms(b, symbols)
    assert got_a == got_b == _naive_axioms(b, symbols)
    by_value = {k: k for k, _ in got_a}
    assert all(by_value[k] is k for k, _ in got_b)  # interned: the same objects
    assert _facts.match(b, symbols, got_a, _facts.divisible(a, symbols))
    b.axioms[sympy.Lt(SYMS[0], 1000)] = sympy.true
    assert not _facts.match(b, symbols, got_a, _facts.divisible(a, symbols))
    del b.axioms[sympy.Lt(SYMS[0], 1000)]
    assert _facts.match(b, symbols, got_a, _facts.divisible(a, symbols))
    k0 = next(iter(b.axioms))
    b.axioms[k0] = sympy.false
    assert not _facts.match(b, symbols, got_a, _facts.divisible(a, symbols))


@pytest.mark.parametrize("seed", range(3))
def test_match_equals_comparing_fresh_filters(seed, monkeypatch):
    """``match`` against another ShapeEnv's recorded sets is the comparison of the
    two fresh filters, over random changes to both, also when the interned facts
    are emptied between (a tiny bound): interning only makes it faster."""
    monkeypatch.setattr(_facts, "MAX_CANON", 16)
    rng = random.Random(100 + seed)
    a, b = _Env(), _Env()
    agree = disagree = 0
    for _ in range(300):
        target = rng.choice([a, b, b])
        _step(rng, target)
        if rng.random() < 0.3:  # b catches up with a (equal facts, other objects)
            b.axioms = {_copy(k): v for k, v in a.axioms.items()}
            b.divisible = {_copy(d) for d in a.divisible}
        symbols = tuple(sorted(rng.sample(SYMS, rng.randrange(0, len(SYMS) + 1)), key=str))
        recorded = (_facts.axioms(a, symbols), _facts.divisible(a, symbols))
        want = (_naive_axioms(a, symbols) == _naive_axioms(b, symbols)
                and _naive_divisible(a, symbols) == _naive_divisible(b, symbols))
        assert _facts.match(b, symbols, *recorded) == want
        agree += want
        disagree += not want
    assert agree > 30 and disagree > 30
