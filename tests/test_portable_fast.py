"""Portable records admitted and committed in C++ (csrc/cache/portable_fast.cpp).

Every decision the extension makes is checked, as it is made, against
fastfake.cache.portable.admit on the same call in the same state (the reference the
C++ admission must equal) and against stock's own key builder: an admitted
call's key must equal and hash as the key stock builds for it, its SymInt stubs
holding the very argument SymNodes stock's do, and its nested calls' keys must
equal the ones fastfake.cache.portable binds. The programs are the long random
sequences of tests/test_portable.py (stock and fastfake side by side, every
step compared), so the records' learned state is exercised over many
ShapeEnvs; a fault that skips the signature comparison must be caught.
"""
from __future__ import annotations

import random

import pytest
import torch
from torch._subclasses._fake_tensor_utils import _DeconstructedSymType, _PySymInputStub
from torch.fx.experimental.sym_node import SymNode

import fastfake
import parity
from fastfake import _C
from fastfake.common import compat as _compat
from fastfake.cache import portable as _portable
from fastfake.stock import key as _stock_key
from test_cache_symbolic import _inputs, _mode
from test_portable import _EpochTwin, _guarded_program, _program, random_epochs
from test_symbolic_views_random import view_steps

pytestmark = [
    parity.requires_symbolic_cache,
    pytest.mark.skipif(not _compat.portable_entries_known(), reason="no portable entries on this release"),
]


class Verifier:
    """The C++ admission's decisions compared with fastfake.cache.portable's."""

    def __init__(self) -> None:
        self.admitted = 0
        self.declined = 0
        self.replaced = 0  # admitted over a symbol the ShapeEnv replaced
        self.nested = 0  # admitted with nested calls' keys
        self.made = 0  # new SymNodes in those keys (not the arguments')
        self.failures: list[str] = []

    def __call__(self, mode, func, args, kwargs, record, admitted, keys) -> None:
        saved = _portable.saved_counters(), _stock_key.saved_counters()
        try:
            ref = _portable.admit(mode, func, args, kwargs if kwargs is not None else {}, record)
            stock_key, _ = _stock_key.key_only(mode, func, args, kwargs)
        finally:
            _portable.restore_counters(saved[0])
            _stock_key.restore_counters(saved[1])
        try:
            self._check(func, ref, admitted, keys, stock_key, record, mode.shape_env)
            self._check_made(args, kwargs, keys, ref)
        except AssertionError as e:
            self.failures.append(f"{func}: {e}")

    def _check(self, func, ref, admitted, keys, stock_key, record, env) -> None:
        assert (ref is not None) == admitted, f"C++ admitted={admitted}, fastfake.cache.portable {ref is not None}"
        if not admitted:
            self.declined += 1
            return
        self.admitted += 1
        if any(env.replacements.get(s) is not None for s in record[0]):
            self.replaced += 1
        own = keys[-1]
        ref_key, ref_nested = ref[1]
        for theirs in (stock_key, ref_key):
            assert own == theirs and hash(own) == hash(theirs) == own.hashvalue, (own, theirs)
        for a, b in zip(own.key, stock_key.key, strict=True):
            if type(b) is _PySymInputStub and isinstance(b.value, torch.SymInt):
                # stock stores its lookup key, stripped: the stub then holds the
                # argument's own SymNode
                assert type(a) is _PySymInputStub and a.value.node is b.value.node, (a, b)
                assert a.value.ty is type(b.value)
            else:
                assert type(a) is type(b) and a == b, (a, b)
        stored = ref_nested[0] if ref_nested else ()
        assert len(keys) == len(stored) + 1, (keys, stored)
        for k, (bound, _entry) in zip(keys, stored):
            assert k == bound and hash(k) == hash(bound), (k, bound)
        if stored:
            self.nested += 1

    def _check_made(self, args, kwargs, keys, ref) -> None:
        """Each new SymNode in the nested keys (made in C++ where
        ``_DeconstructedSymNode.extract`` is proven, else by it) is the node
        ``extract`` builds in this ShapeEnv: the same instance dict, but for the
        value-id memo C++ sets where the value is interned."""
        if ref is None:
            return
        ours = _arg_nodes((args, kwargs))
        stored = ref[1][1][0] if ref[1][1] else ()
        for k, (bound, _entry) in zip(keys, stored):
            for a, b in zip(k.key, bound.key, strict=True):
                if type(a) is not _PySymInputStub or type(a.value) is not _DeconstructedSymType:
                    continue
                node, want = a.value.node, b.value.node
                if not isinstance(node, SymNode) or id(node) in ours:
                    continue
                self.made += 1
                got = {n: v for n, v in vars(node).items() if n != "_fastfake_vid"}
                expected = {n: v for n, v in vars(want).items() if n != "_fastfake_vid"}
                assert got.keys() == expected.keys(), (sorted(got), sorted(expected))
                for n in got:
                    assert got[n] is expected[n] or (type(got[n]) is type(expected[n]) and got[n] == expected[n]), (
                        n, got[n], expected[n])


def _arg_nodes(v, out: set | None = None) -> set:
    """ids of the SymNodes a call's arguments hold (sizes, strides, offsets,
    storage sizes, SymInts)."""
    out = set() if out is None else out
    if isinstance(v, torch.Tensor):
        vals = [*v.shape, *v.stride(), v.storage_offset(), v.untyped_storage().nbytes()]
        for x in vals:
            if isinstance(x, torch.SymInt):
                out.add(id(x.node))
    elif isinstance(v, torch.types.py_sym_types):
        out.add(id(v.node))
    elif isinstance(v, (tuple, list)):
        for x in v:
            _arg_nodes(x, out)
    elif isinstance(v, dict):
        for x in v.values():
            _arg_nodes(x, out)
    return out


@pytest.fixture
def verifier():
    fastfake.install()  # (the hooks are set up once per process, at the first install)
    fastfake.uninstall()
    v = Verifier()
    _C.portable_fast_verifier(v)
    try:
        yield v
    finally:
        _C.portable_fast_verifier(None)


@pytest.mark.parametrize("seed", range(3))
def test_admission_equals_python_over_random_sequences(verifier, seed):
    """Learned state over many ShapeEnvs in one process (tests/test_portable.py's
    random_epochs): epochs of seeded random programs, each in new modes and
    ShapeEnvs (stock and fastfake side by side, every step compared), programs
    recurring across epochs so first calls are served from other epochs' records;
    some epochs guard a symbol first (another range and axiom), some use other
    shapes. Every C++ decision equals fastfake.cache.portable.admit's and every
    admitted key equals stock's."""
    random_epochs(seed)
    assert not verifier.failures, verifier.failures[:5]
    assert verifier.admitted > 30 and verifier.nested > 0 and verifier.made > 0, vars(verifier)
    s = fastfake.stats()
    assert s["cache.symbolic.portable.admitted_python"] < verifier.admitted, s
    assert s.get("cache.symbolic.portable.served", 0) > 30, parity.counters_with_prefix(s, "cache.symbolic")


@pytest.mark.parametrize("seed", range(2))
def test_admission_equals_python_with_replaced_symbols(verifier, seed):
    """The symbolic-views programs that check two sizes equal in between (the
    ShapeEnv replaces one symbol by the other): the closure signature decided in
    C++ equals fastfake.cache.portable's, records over replaced symbols included
    and served in the later ShapeEnvs as stock's miss there (seed 2 runs in
    tests/test_portable.py with the Python admission)."""
    fastfake.cache_clear()
    fastfake.reset_stats()
    master = random.Random(seed)
    for _ in range(6):
        program = master.randrange(2)
        view_steps(_EpochTwin(random.Random(master.random())), random.Random(2277 + 10 * seed + program),
                   200, repeat=0.2, equate=0.06)
    assert not verifier.failures, verifier.failures[:5]
    assert verifier.admitted >= 10 and verifier.replaced > 0, vars(verifier)
    s = fastfake.stats()
    assert s.get("cache.symbolic.portable.served", 0) >= 10, parity.counters_with_prefix(s, "cache.symbolic")


def test_a_skipped_signature_is_caught(verifier):
    """The check can fail: admissions that skip the signature comparison admit
    where fastfake.cache.portable declines (a ShapeEnv that guarded a size first)."""
    fastfake.cache_clear()
    make = _inputs([torch.randn(6, 8), torch.randn(8, 10), torch.randn(10)])
    parity.run_both(_program, make, mode_factory=_mode, stock_runs=0, fast_runs=1)  # learns
    _C._inject_fault(1000, "portable_admit")
    try:
        parity.run_both(_guarded_program, make, mode_factory=_mode, stock_runs=0, fast_runs=1)
    finally:
        _C._inject_fault(0, "portable_admit")
    assert any("C++ admitted=True" in f for f in verifier.failures), vars(verifier)


def test_stub_nodes_made_in_cpp(verifier):
    """The new SymNodes of the nested keys a served first call stores are made in
    C++ where ``_DeconstructedSymNode.extract`` is proven (``gelu``'s kernel makes
    several), and compared with ``extract``'s by the verifier; a node with the
    other optimized-summation flag is caught, and with the proof withdrawn ``extract`` is
    called again."""
    from torch._subclasses import _fake_tensor_utils as utils

    assert _compat.stub_extract() is not None
    fastfake.cache_clear()
    make = _inputs([torch.randn(6, 8)])

    def gelu(x):
        return torch.nn.functional.gelu(x * 2)

    calls = []
    original = utils._DeconstructedSymNode.extract

    def counting(self, env):
        calls.append(self)
        return original(self, env)

    parity.run_both(gelu, make, mode_factory=_mode, stock_runs=0, fast_runs=1)  # learns
    both = parity.run_both(gelu, make, mode_factory=_mode, stock_runs=1, fast_runs=1)
    parity.assert_symbolic_parity(both, "gelu")
    assert not verifier.failures and verifier.made > 0, vars(verifier)
    made = verifier.made
    _C._inject_fault(1, "stub_node")
    try:
        parity.run_both(gelu, make, mode_factory=_mode, stock_runs=0, fast_runs=1)
    finally:
        _C._inject_fault(0, "stub_node")
    assert verifier.failures, vars(verifier)
    verifier.failures.clear()
    # the method patched: C++ calls it (and the verifier's reference does too)
    utils._DeconstructedSymNode.extract = counting
    try:
        before = verifier.made
        parity.run_both(gelu, make, mode_factory=_mode, stock_runs=0, fast_runs=1)
        assert verifier.made > before and len(calls) >= 2 * (verifier.made - before), (len(calls), vars(verifier))
    finally:
        utils._DeconstructedSymNode.extract = original
    assert not verifier.failures, verifier.failures[:3]
    assert made > 0


def test_stub_extract_proof_refuses_other_code():
    from torch._subclasses import _fake_tensor_utils as utils

    original = vars(utils._DeconstructedSymNode)["extract"]
    fn = original.__code__

    def swapped(self, shape_env):
        return SymNode(self._expr, shape_env, self.pytype, self.constant, self._hint, self.fx_node)

    try:
        utils._DeconstructedSymNode.extract = swapped
        assert _compat.stub_extract() is None
    finally:
        utils._DeconstructedSymNode.extract = original
    assert _compat.stub_extract() is original and original.__code__ is fn


def test_counted_as_the_python_admission_counts():
    """Served first calls count under the same names whichever side admitted
    them, and as many as fastfake.cache.portable serves (the C++ side switched off)."""
    make = _inputs([torch.randn(6, 8), torch.randn(8, 10), torch.randn(10)])
    counts = {}
    for fast in (True, False):
        was = _C.set_portable_fast(fast)
        try:
            fastfake.cache_clear()
            parity.run_both(_program, make, mode_factory=_mode, stock_runs=0, fast_runs=1)
            both = parity.run_both(_program, make, mode_factory=_mode, stock_runs=1, fast_runs=1)
            parity.assert_symbolic_parity(both, f"fast={fast}")
            s = both.fast[0].stats
        finally:
            _C.set_portable_fast(was)
        counts[fast] = parity.counters_with_prefix(s, "cache.symbolic.portable.")
    python = counts[False].pop("cache.symbolic.portable.admitted_python", 0)
    fast = counts[True].pop("cache.symbolic.portable.admitted_python", 0)
    assert counts[True] == counts[False] and counts[True]["cache.symbolic.portable.served"] > 0, {k: (counts[True].get(k), counts[False].get(k)) for k in set(counts[True]) | set(counts[False]) if counts[True].get(k) != counts[False].get(k)}
    assert fast == 0 and python == 0, (fast, python)
