"""The install-time self-test: prove fastfake on the torch it was installed into.

fastfake replaces private torch internals whose names and behaviour move between
releases; a wrong guess there (say, the attribute a FakeTensor keeps its device
in) gives silently wrong results rather than an error. So ``install()`` does not
trust names: once per process it runs a handful of programs under stock
``FakeTensorMode`` and again under each fastfake feature, and compares every
field of every result -- sizes, strides, storage offset and size, dtype, device
(the stored attribute and what ``.device`` answers), layout, requires_grad,
conj/neg bits, dispatch keys, ``__dict__``, storage sharing with the inputs,
which SymNodes are the inputs' own, and the ShapeEnv's guards, ranges,
replacements and deferred runtime asserts.

A feature whose programs differ in anything is turned off (``install()`` warns,
naming the program and the field; ``stats()`` counts ``selftest.failed.<feature>``)
and the others stay on; if nothing asked for survives, ``install()`` raises.
Each feature must also have served at least one of its programs itself, so a
fast path that silently stopped running is seen too (``selftest.idle.<feature>``).

The programs leave nothing behind: fastfake's learned signatures, cache entries
and counters, and stock's own dispatch-cache entries and counters are restored.
"""
from __future__ import annotations

import contextlib
import gc
import re
import sys
import time
from collections.abc import Callable

import optree
import torch

from fastfake import _C
from fastfake.common import compat as _compat
from fastfake.core import accelerations as _accelerations
from fastfake.core import counters as _counters
from fastfake.core.selftest_store import Report
from fastfake.stock.cache import stock_state_preserved
from fastfake.tracing import functional as _functional
from fastfake.symbolic import symnode_memo as _symnode

#: fastfake features and the counters that show each one served a result (from the
#: one table of accelerations, fastfake/core/accelerations.py).
FEATURES = _accelerations.selftest_features()
#: Features that pass only where their programs were served (the table's
#: ``selftest_must_serve``).
MUST_SERVE = frozenset(a.name for a in _accelerations.ACCELERATIONS if a.selftest_must_serve)


def _served(counts: dict, feature: str) -> int:
    return sum(counts.get(n, 0) for n in FEATURES[feature])


# ---------------------------------------------------------------------------
# The programs. Each takes a FakeTensorMode (entered) and a device and returns
# (name, inputs, outputs) triples; every op is called twice so that the second
# call is served from what the first one taught fastfake.
# ---------------------------------------------------------------------------

Program = Callable[[object, str], list]


def _elementwise_program(mode, dev: str) -> list:
    a = torch.empty(4, 1, 3, device=dev)
    b = torch.empty(5, 1, device=dev)
    i = torch.empty(4, 3, dtype=torch.int32, device=dev)
    s = torch.empty_strided((16, 1), (1, 1), dtype=torch.bfloat16, device=dev)
    out = []
    for _ in range(2):
        out.append(("add broadcast", (a, b), a + b))
        out.append(("mul python scalar", (a,), a * 2.5))
        out.append(("int + float promotion", (i, a), i + a))
        out.append(("where", (a, b), torch.where(a > 0, a, b)))
        out.append(("size-1 strides", (s,), torch.lerp(s, torch.ones(1, dtype=torch.bfloat16, device=dev), 0.3)))
        c = torch.empty(5, 3, device=dev)
        out.append(("add_ in place", (c, b), c.add_(b)))
    return out


def _cache_program(mode, dev: str) -> list:
    x = torch.empty(6, 8, device=dev)
    w = torch.empty(8, 4, device=dev)
    out = []
    for _ in range(2):
        out.append(("mm", (x, w), torch.mm(x, w)))
        out.append(("view", (x,), x.view(12, 4)))
        out.append(("_unsafe_view", (x,), torch.ops.aten._unsafe_view.default(x, [48])))
        out.append(("transpose", (x,), x.t()))
        out.append(("softmax", (x,), torch.softmax(x, -1)))
        out.append(("layer_norm", (x,), torch.nn.functional.layer_norm(x, (8,))))
        out.append(("sum", (x,), x.sum(0)))
        out.append(("cat", (x,), torch.cat([x, x], 1)))
        out.append(("add_ in place", (x,), x.add_(x)))
    return out


def _symbolic_input(mode, dev: str, *shape: int) -> torch.Tensor:
    """A fake tensor of ``shape`` with every dimension a new symbol."""
    from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext

    from torch._subclasses.fake_tensor import unset_fake_temporarily

    ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * len(shape))
    with unset_fake_temporarily():  # the real tensor is made outside the fake mode
        real = torch.empty(*shape, device=dev)
    return mode.from_tensor(real, symbolic_context=ctx)


def _symbolic_program(mode, dev: str) -> list:
    x = _symbolic_input(mode, dev, 6, 8)
    w = _symbolic_input(mode, dev, 8, 4)
    out = []
    for _ in range(2):
        out.append(("mm", (x, w), torch.mm(x, w)))
        out.append(("transpose", (x,), x.t()))
        out.append(("softmax", (x,), torch.softmax(x, -1)))
        out.append(("add", (x,), x + x))
        out.append(("sum", (x,), x.sum(0)))
        out.append(("_unsafe_view", (x,), torch.ops.aten._unsafe_view.default(x, [x.shape[0] * x.shape[1]])))
        out.append(("view", (x,), x.view(x.shape[0] * x.shape[1])))
    return out


def _portable_program(mode, dev: str) -> list:
    """The symbolic program in a ShapeEnv of its own first (its symbols get the
    same names), then the compared one in ``mode``: its first calls may be served
    from entries learned in the other ShapeEnv."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    with FakeTensorMode(shape_env=ShapeEnv()) as other:
        _symbolic_program(other, dev)
    return _portable_calls(mode, dev)


def _portable_calls(mode, dev: str) -> list:
    """The compared calls of the portable programs: each first call may be served
    from a record learned in another ShapeEnv."""
    with mode:
        x = _symbolic_input(mode, dev, 6, 8)
        w = _symbolic_input(mode, dev, 8, 4)
        out = []
        for _ in range(2):
            out.append(("mm", (x, w), torch.mm(x, w)))
            out.append(("softmax", (x,), torch.softmax(x, -1)))
            out.append(("add", (x,), x + x))
            out.append(("sum", (x,), x.sum(0)))
            out.append(("view", (x,), x.view(x.shape[0] * x.shape[1])))
        return out


def _store_symbolic_program(mode, dev: str) -> list:
    """The portable program, with the records learned in the other ShapeEnv taken
    through the store's file form (JSON text, in memory) and read back into an
    emptied table before the compared calls run in ``mode``."""
    import json

    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    from fastfake.cache import learn as _learn
    from fastfake.store import symbolic as _symbolic

    with _symbolic.isolated():
        with FakeTensorMode(shape_env=ShapeEnv()) as other:
            _symbolic_program(other, dev)
        values = _learn.interned_values()
        parts: dict = {}
        kept = [r for r in (_symbolic._describe(i, values, parts) for i in _C.portable_export()) if r is not None]
        text = json.dumps([kept, parts])
        _C.cache_clear()
        try:
            kept, parts = json.loads(text)
            with _symbolic.shared_parts(parts):
                _C.portable_import([_symbolic._decode(rec) for _, rec in kept])
            return _portable_calls(mode, dev)
        finally:
            _C.cache_clear()  # (the records read back serve no later program)


def _store_calls(dev: str) -> list:
    """Each call once (a repeat would be served by the result cache, not the store;
    so would a decomposition's repeated nested call, which the result cache counts
    in stock's counters by its own rule, fastfake/stock/cache.py)."""
    x = torch.empty(6, 8, device=dev)
    w = torch.empty(8, 4, device=dev)
    return [
        ("mm", (x, w), torch.mm(x, w)),
        ("view", (x,), x.view(12, 4)),
        ("transpose", (x,), x.t()),
        ("softmax", (x,), torch.softmax(x, -1)),
        ("layer_norm", (x,), torch.nn.functional.layer_norm(x, (8,))),
        ("var_mean", (x,), torch.var_mean(x, 1)),
        ("sum", (x,), x.sum(0)),
        ("cat", (x,), torch.cat([x, x], 1)),
        ("bmm", (x, w), torch.bmm(x.unsqueeze(0), w.unsqueeze(0))),
        ("add_ in place", (x,), x.add_(x)),
    ]


def _store_program(mode, dev: str) -> list:
    """The calls in a mode of their own first (stock's misses: recorded where the
    store is on, in memory only), stock's cache (and fastfake's result cache) then
    cleared of what they added, then the same calls in ``mode``: each may be served
    from a record. Stock's cache counters and call counts are compared too."""
    from torch._subclasses.fake_tensor import FakeTensorMode as M
    from torch.utils import _stats

    from fastfake.stock import cache as _stock_cache
    from fastfake.store import records as _records

    with _records.isolated():
        before = set(M.cache)
        with M():
            _store_calls(dev)
        for k in [k for k in M.cache if k not in before]:
            del M.cache[k]
        _C.stock_cache_cleared()
        _C.cache_clear()
        _stock_cache.flush()
        counts = (M.cache_hits, M.cache_misses, dict(M.cache_bypasses), dict(_stats.simple_call_counter))
        with mode:
            out = _store_calls(dev)
        _stock_cache.flush()
        calls = {k: v - counts[3].get(k, 0) for k, v in _stats.simple_call_counter.items()}
        bypasses = {k: v - counts[2].get(k, 0) for k, v in M.cache_bypasses.items()}
        added = [str(k.key[0]) for k in M.cache if k not in before]
        out.append(("stock's cache", (), (M.cache_hits - counts[0], M.cache_misses - counts[1],
                                         sorted(bypasses.items()), list(calls.items()), added)))
        # (the other side of the comparison starts from the same cache)
        for k in [k for k in M.cache if k not in before]:
            del M.cache[k]
        _C.stock_cache_cleared()
        _C.cache_clear()
    return out


def _rerun_program(mode, dev: str) -> list:
    """Repeats of a call stock never caches (``_unsafe_view``), each on a new input
    tensor with the same metadata, and what its kernel memoised on that input."""
    x = _symbolic_input(mode, dev, 6, 8)
    out = []
    for i in range(4):
        t = x.clone() if i % 2 == 0 else x * 2
        y = torch.ops.aten._unsafe_view.default(t, [x.shape[0] * x.shape[1]])
        out.append(("_unsafe_view", (t,), y))
        out.append(("input memo", (), _C.synth_recipe(t, True)))
        out.append(("output memo", (), _C.synth_recipe(y, True)))
        z = torch.ops.aten._unsafe_view.default(y, [x.shape[1], x.shape[0]])
        out.append(("_unsafe_view back", (y,), z))
    return out


def _rerun_scalar_program(mode, dev: str) -> list:
    """Repeats of pointwise calls with a SymFloat (stock never caches them): a
    SymFloat of a size (backed, hinted) and one of ``.item()`` (unbacked), each op
    several times on new inputs with the same metadata, a guard on the SymFloat in
    between, and what the kernel memoised on the inputs."""
    x = _symbolic_input(mode, dev, 6, 8)
    out = []
    floats = [torch.sym_float(x.shape[0]), torch.empty((), dtype=torch.float64, device=dev).item()]
    for k, f in enumerate(floats):
        for i in range(3):
            t = x.clone() if i % 2 == 0 else x.t()
            for name, op in (("add", torch.ops.aten.add.Tensor), ("mul", torch.ops.aten.mul.Tensor)):
                y = op(t, f)
                out.append((f"{name} symfloat {k}", (t,), y))
                out.append(("input memo", (), _C.synth_recipe(t, True)))
                out.append(("output memo", (), _C.synth_recipe(y, True)))
            if i == 1:
                torch._check(f > -1.0)
                out.append(("guard", (), repr(sorted(map(str, mode.shape_env.var_to_range.items())))))
    return out


def _item_memo_program(mode, dev: str) -> list:
    """``.item()`` of 0-d tensors again and again (the repeats answered from the
    tensor's memo), after an in-place update (the memo is stale: a new unbacked
    symbol), and in a new epoch of the mode."""
    out = []
    for dtype in (torch.float64, torch.int64, torch.bool):
        x = torch.empty((), dtype=dtype, device=dev)
        first = x.item()
        for _ in range(3):
            r = x.item()
            out.append((f"item {dtype}", (x,), (r, r.node is first.node)))
        if dtype is not torch.bool:
            x.add_(1)
            again = x.item()
            out.append((f"item after add_ {dtype}", (x,), (again, again.node is first.node)))
            out.append((f"item repeat after add_ {dtype}", (x,), x.item().node is again.node))
        mode.epoch += 1
        new_epoch = x.item()
        out.append((f"item in a new epoch {dtype}", (x,), (new_epoch, new_epoch.node is first.node)))
        out.append((f"item repeat in the new epoch {dtype}", (x,), x.item().node is new_epoch.node))
    out.append(("unbacked symbols", (), repr(sorted(map(str, mode.shape_env.var_to_range)))))
    return out


def _symnode_program(mode, dev: str) -> list:
    """SymInt arithmetic on a symbolic tensor's sizes, every operation twice (the
    repeat is served from the SymNode memo): products, optimized summations,
    differences, divisions, relations (SymBools left unevaluated), max, and / or,
    powers, and the tensor queries that compute numel and contiguity."""
    x = _symbolic_input(mode, dev, 6, 8, 4)
    a, b, c = x.shape
    out = []
    for _ in range(2):
        out.append(("mul", (x,), a * b))
        out.append(("mul by a constant", (x,), a * 4))
        out.append(("add", (x,), a + b))
        out.append(("add a summation", (x,), (a + b) + c))
        out.append(("sub", (x,), a - c))
        out.append(("floordiv", (x,), (a * b) // c))
        out.append(("truediv", (x,), a / b))
        out.append(("eq", (x,), a == b))
        out.append(("lt", (x,), a < b * c))
        out.append(("ne", (x,), a != 6))
        out.append(("sym_max", (x,), torch.sym_max(a, b)))
        out.append(("and", (x,), (a < b) & (b < c)))
        out.append(("pow", (x,), a**2))
        out.append(("numel", (x,), x.numel()))
        out.append(("view", (x,), x.view(a * b, c)))
    return out


def functional_wrapper(t: torch.Tensor) -> torch.Tensor:
    """A ``FunctionalTensor`` wrapper of ``t`` built as up-to-2.14
    ``FunctionalTensor.__new__`` builds one (13 positional arguments, the storage
    size left to ``_make_wrapper_subclass``), without functionalization around it."""
    from torch._subclasses.functional_tensor import FunctionalTensor

    keys = FunctionalTensor._extra_dispatch_keys & torch._C._dispatch_keys(t)
    return torch.Tensor._make_wrapper_subclass(
        FunctionalTensor, t.shape, t.stride(), t.storage_offset(), None, t.dtype, t.layout,
        t.device, False, False, None, False, False, keys,
    )


def _functional_program(mode, dev: str) -> list:
    """FunctionalTensor wrappers (AOTAutograd's functionalization) over symbolic
    fakes: their storage sizes, views with an offset, an op that guards."""
    from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode

    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.fx.experimental.proxy_tensor import make_fx

    x = _symbolic_input(mode, dev, 6, 8)
    out = []
    with FunctionalTensorMode():
        xf = FunctionalTensor.to_functional(x)
        for _ in range(2):
            out.append(("add", (xf,), xf + xf))
            out.append(("transpose", (xf,), xf.t()))
            out.append(("slice", (xf,), xf[:, 1:]))
            out.append(("view", (xf,), xf.view(xf.shape[0] * xf.shape[1])))
            out.append(("mm", (xf,), torch.mm(xf, xf.t())))

    # Under proxy tracing (replayed into the tracer): the graph make_fx builds
    # when the storage sizes are traced into it, node names and numbering included.
    def f(t):
        total = 0
        for v in (t, t.t(), t[1:], t, t.t(), t[1:]):
            total = total + functional_wrapper(v).untyped_storage().nbytes()
        return t + total

    with unset_fake_temporarily():
        code = make_fx(f, tracing_mode="symbolic")(torch.empty(6, 8, device=dev)).code
    out.append(("make_fx graph", (), code))
    return out


def _detach_program(mode, dev: str) -> list:
    """The snapshots make_fx and FakeTensorProp take (``snapshot_fake``): of
    leaves, views, other dtypes, symbolic sizes, an inference tensor, also under
    the Python dispatcher with functionalization on (as in AOTAutograd); then the
    version counter they share with their input (after an in-place op on it); and
    the node metadata of a make_fx graph and of FakeTensorProp over it."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.fx.experimental.proxy_tensor import make_fx, snapshot_fake
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    # First, as in the other programs: on 2.15 a symbol's name depends on what the
    # process created before it, and only a fresh mode's first input is named alike.
    s = _symbolic_input(mode, "cpu", 6, 8)  # made from a real tensor
    # (a view of a requires_grad fake cuda tensor aborts a CPU-only torch build)
    x = torch.empty(4, 6, device=dev, requires_grad=dev == "cpu")
    b = torch.empty(3, 5, dtype=torch.bfloat16, device=dev)
    with torch.inference_mode():
        inf = torch.empty(5, device=dev)
    out = []
    sources = [("leaf", x), ("transpose", x.t()), ("bfloat16", b),
               ("symbolic", s), ("symbolic view", s[1:]), ("inference", inf)]
    if dev == "cpu":  # (slicing a fake cuda tensor needs CUDA in the torch build)
        sources.append(("slice", x[1:]))
    snaps = [(name, t, snapshot_fake(t)) for name, t in sources]
    # As AOTAutograd snapshots: the Python dispatcher on and functionalization's
    # key in the thread-local include set.
    from torch._dispatch.python import enable_python_dispatcher

    with enable_python_dispatcher():
        torch._enable_functionalization(reapply_views=True)
        try:
            snaps += [(f"{name} (functionalizing)", t, snapshot_fake(t)) for name, t in sources]
        finally:
            torch._disable_functionalization()
    b.add_(1)
    s.mul_(2)
    for name, t, snap in snaps:
        version = "no version counter" if snap.is_inference() else snap._version
        out.append((f"snapshot {name}", (t,), (snap, snap.is_leaf, snap._is_view(), snap.is_inference(), version)))

    def f(a, w):
        return torch.relu(a @ w).t().sum(0) + 1

    with unset_fake_temporarily():
        gm = make_fx(f, tracing_mode="fake")(torch.empty(4, 6), torch.empty(6, 3))
    meta = [(n.name, str(n.meta.get("val"))) for n in gm.graph.nodes]
    out.append(("make_fx node metadata", (), meta))
    FakeTensorProp(gm, mode).propagate_dont_convert_inputs(torch.empty(4, 6), torch.empty(6, 3))
    out.append(("FakeTensorProp vals", (), [n.meta.get("val") for n in gm.graph.nodes]))
    return out


def _convert_program(mode, dev: str) -> list:
    """Real tensors fakified by the mode's converter (``from_tensor``): parameters,
    dtypes, layouts, a leaf requiring grad (served in C++), a tensor sharing a
    converted storage (stock's); the memo answering for a live fake; the
    converter's ids, memos and counters afterwards; an op on converted fakes. (No
    view: stock rebuilds one with an op, whose dispatch gives the converter ids
    or not depending on stock's own dispatch cache.)"""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        p = torch.nn.Parameter(torch.zeros(4, 6))
        sources = [
            ("parameter", p),
            ("bfloat16", torch.zeros(3, 5, dtype=torch.bfloat16)),
            ("int64", torch.zeros(7, dtype=torch.int64)),
            ("channels_last", torch.zeros(2, 3, 4, 5).to(memory_format=torch.channels_last)),
            ("odd strides", torch.empty_strided((4, 6), (1, 4)).zero_()),
            ("requires_grad", torch.zeros(3, requires_grad=True)),
            ("0-d float32", torch.tensor(1.5)),
            ("0-d int64", torch.tensor(3)),
            ("storage larger than needed",
             torch.empty(0).set_(torch.zeros(10).untyped_storage(), 0, (4,), (1,))),
            ("shared storage", p.detach()),
        ]
    out = []
    fakes = [mode.from_tensor(t) for _, t in sources]
    for (name, _), f in zip(sources, fakes):
        out.append((f"convert {name}", (), (f, f._is_view(), f.is_leaf)))
    out.append(("memo", (), mode.from_tensor(p) is fakes[0]))
    mc = mode.fake_tensor_converter.meta_converter
    d = mc.describer
    out.append((
        "converter state",
        (),
        (d.next_tensor_id, d.next_storage_id, sorted(mc.tensor_memo.keys()),
         sorted(mc.storage_memo.keys()), mc.hit, mc.miss, mc.arg_cnt),
    ))
    out.append(("op on converted", (fakes[0],), fakes[0] * 2))
    return out


def _symnode_expr_program(mode, dev: str) -> list:
    """``SymNode.expr`` of symbols, products, sums, floor divisions, relations,
    constants (an integer, a number that is not a sympy Number, a boolean atom),
    each read twice before any replacement, after one (two symbols made equal) and
    after another (a symbol specialised to a constant): the expression returned and
    the node's replacement cache (``_expr_cache``, ``_expr_ver``) afterwards."""
    import sympy
    from torch.fx.experimental.sym_node import SymNode

    x = _symbolic_input(mode, dev, 6, 6, 4)
    a, b, c = x.shape
    env = mode.shape_env
    nodes = [a.node, b.node, c.node, (a * b).node, (a + b * c).node, ((a * b) // c).node,
             (a < b * c).node, SymNode(sympy.Integer(5), env, int, 5),
             SymNode(sympy.Integer(3) + sympy.sqrt(2), env, float, 3 + 2**0.5),
             SymNode(sympy.true, env, bool, True)]

    def read(when: str) -> tuple:
        return (when, [
            (sympy.srepr(n.expr), repr(n._expr_ver), sympy.srepr(n._expr_cache)) for n in nodes
        ])

    out = []
    for when in ("before replacements", "again"):
        out.append((when, (), read(when)))
    torch._check(a == b)
    for when in ("after a replacement", "again"):
        out.append((when, (), read(when)))
    torch._check(c == 4)
    for when in ("after a specialisation", "again"):
        out.append((when, (), read(when)))
    return out


def _symnode_int_program(mode, dev: str) -> list:
    """``SymNode.maybe_as_int`` of symbols, products, sums, floor divisions, float
    and boolean nodes and constants (integer, float, a number that is not a sympy
    Number), before and after a replacement and a specialisation, each asked twice;
    plus the int sizes of a tensor built from those SymInts (what C++ asks)."""
    import sympy
    from torch.fx.experimental.sym_node import SymNode

    x = _symbolic_input(mode, dev, 6, 6, 4)
    a, b, c = x.shape
    env = mode.shape_env
    nodes = [a.node, b.node, c.node, (a * b).node, (a + b * c).node, ((a * b) // c).node,
             (a < b * c).node, (a / c).node, SymNode(sympy.Integer(5), env, int, 5),
             SymNode(sympy.Float(2.5), env, float, 2.5),
             SymNode(sympy.Integer(3) + sympy.sqrt(2), env, float, 3 + 2**0.5)]

    def ask(when: str) -> tuple:
        return (when, [repr(n.maybe_as_int()) for n in nodes])

    out = []
    for when in ("before replacements", "again"):
        out.append((when, (), ask(when)))
    torch._check(a == b)
    out.append(("after a replacement", (), ask("after a replacement")))
    torch._check(c == 4)
    for when in ("after a specialisation", "again"):
        out.append((when, (), ask(when)))
    y = x.new_empty(a * b, c)
    out.append(("sizes through C++", (x,), (y, [repr(s) for s in y.shape])))
    return out


def _frame_stack_program(mode, dev: str) -> list:
    """Fake ops at the bottom of recursions that go down across frame-stack chunk
    boundaries and back, eight times (each descent past 16 KiB of frames): kept
    chunks are handed back from the second descent on; the ops' results are
    stock's."""

    def descend(n: int, x: torch.Tensor) -> torch.Tensor:
        return descend(n - 1, x) if n else torch.mul(x, 2) + 1

    x = torch.empty(3, 4, device=dev)
    return [(f"descent {i}", (x,), descend(400, x)) for i in range(8)]


_FUNCNAMES_SOURCE = """\
# -*- coding: utf-8 -*-
import os


def top(a):
    return a


class Outer:
    x = 1

    def method(self):
        def inner():
            return "\u00e9t\u00e9"
        return inner

    class Nested:
        async def deep(self):
            s = \"\"\"
def not_a_def():
\"\"\"
            return s


def after(
    a,
    b,
):
    return [a,
            b]
"""


def _funcnames_program(mode, dev: str) -> list:
    """Dynamo's function-name table of a small source file (nested classes and
    functions, a multi-line string, continuation lines, a non-ASCII literal), asked
    three times with the table dropped in between: the first ask learns from stock's
    code (fastfake/store/funcnames.py), the others are served from the record; and
    of a file that cannot be read. Nothing is kept on disk."""
    import os
    import tempfile

    from torch._dynamo import funcname_cache

    from fastfake.store import funcnames as _funcnames

    out = []
    with _funcnames.isolated(), tempfile.TemporaryDirectory(prefix="fastfake-selftest-") as d:
        src = os.path.join(d, "program.py")
        with open(src, "w", encoding="utf-8") as f:
            f.write(_FUNCNAMES_SOURCE)
        missing = os.path.join(d, "missing.py")
        for i in range(3):
            for p in (src, missing):
                funcname_cache.cache.pop(p, None)
                names = [funcname_cache.get_funcname(p, n) for n in range(1, 40)]
                table = funcname_cache.cache.pop(p, None)
                key = "missing file" if p is missing else "file"
                out.append((f"{key} {i}", (), repr((names, None if table is None else list(table.items())))))
    return out


_CONFIG_SOURCE = """\
from torch.utils._config_module import Config

flag = True
number = 3
ratio = 0.5
name = "n"
pair = (1, 2)
nothing = None
items = [1, 2]
table = {"k": 1}
env_flag: bool = Config(default=False, env_name_default="FASTFAKE_SELFTEST_ENV_DEFAULT")
forced: bool = Config(default=False, env_name_force="FASTFAKE_SELFTEST_ENV_FORCE")
knob: bool = Config(default=True, justknob="fastfake_selftest_knob")
old = Config(default=7, deprecated=True, deprecation_message="use number")
aliased = Config(alias="math.pi")


class sub:
    inner = 4
    mutable = [3]
"""


def _config_attr_program(mode, dev: str) -> list:
    """Reads of a configuration module of its own (torch's ``install_config_module`` over
    a temporary file): plain entries of every immutable type, mutable defaults (stock
    copies them), environment values (default and forced), a justknob, a deprecated
    entry (its warning), an alias, a sub-config, overrides by assignment, by ``patch``
    and in another context, a deleted (hidden) entry and a missing name -- each read
    twice, the values and their identities compared."""
    import contextvars
    import importlib.util
    import os
    import tempfile
    import warnings

    from torch.utils._config_module import install_config_module

    out = []
    keys = ("flag", "number", "ratio", "name", "pair", "nothing", "items", "table", "env_flag", "forced", "knob",
            "old", "aliased", "sub", "missing")

    def read(tag: str, mod) -> None:
        for k in keys:
            for i in range(2):
                try:
                    v = getattr(mod, k)
                    r = (type(v).__name__, repr(v) if k != "sub" else repr(v.inner),
                         v is mod._config[k].default if k in mod._config else None)
                except AttributeError as e:
                    r = ("AttributeError", str(e))
                out.append((f"{tag} {k} {i}", (), r))

    saved = {k: os.environ.get(k) for k in ("FASTFAKE_SELFTEST_ENV_DEFAULT", "FASTFAKE_SELFTEST_ENV_FORCE")}
    with tempfile.TemporaryDirectory(prefix="fastfake-selftest-") as d, warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        os.environ["FASTFAKE_SELFTEST_ENV_DEFAULT"] = "1"
        os.environ["FASTFAKE_SELFTEST_ENV_FORCE"] = "1"
        try:
            path = os.path.join(d, "fastfake_selftest_config.py")
            with open(path, "w", encoding="utf-8") as f:
                f.write(_CONFIG_SOURCE)
            spec = importlib.util.spec_from_file_location("fastfake_selftest_config", path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            install_config_module(mod)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        read("defaults", mod)
        mod.flag, mod.number, mod.pair = False, 5, (3,)
        read("assigned", mod)
        with mod.patch(flag=True, name="p", nothing=1):
            read("patched", mod)
        read("after patch", mod)
        del mod.number
        read("deleted", mod)
        mod.number = 6
        read("set again", mod)
        ctx = contextvars.copy_context()

        def in_context():
            mod.ratio = 2.5
            read("in another context", mod)

        ctx.run(in_context)
        read("outside that context", mod)
        out.append(("warnings", (), [str(x.message) for x in w]))
    return out


def _summary(v) -> str:
    """A value of another mode's ShapeEnv, as text (the describer knows one mode)."""
    if isinstance(v, torch.Tensor):
        return f"{type(v).__name__}{tuple(v.shape)} {v.stride()} {v.storage_offset()} {v.dtype} {v.device}"
    return repr(v)


def _fake_prop_program(mode, dev: str) -> list:
    """FakeTensorProp over make_fx graphs (fastfake/tracing/fake_prop.py serves its nodes):
    a static graph with tuple and list outputs, keyword arguments and a scalar; a
    symbolic one (SymInt nodes, views sized by them) propagated on symbolic inputs;
    one with data-dependent sizes (unbacked symbols: their bindings recorded in
    the node metadata, then re-bound by a second propagation). Every node's
    ``meta["val"]`` and ``meta["unbacked_bindings"]`` are compared."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    def static(a, w):
        m = torch.relu(a @ w)
        var, mean = torch.var_mean(m, 0, keepdim=True)
        parts = torch.split(m, 2)
        return (m - mean) / var.add(1e-5, alpha=2), parts[0].t(), parts[1]

    def symbolic(x, w):
        y = (x @ w).view(x.shape[0] * w.shape[1])
        return y.sum(0) + x.shape[0], torch.cat([y, y]).unsqueeze(1)

    def unbacked(x):
        idx = torch.nonzero(x)
        return idx.sum(0), idx.shape[0] * 2

    def meta(gm) -> list:
        return [
            (n.name, n.meta.get("val"), str(n.meta.get("unbacked_bindings")))
            for n in gm.graph.nodes
        ]

    out = []
    with unset_fake_temporarily():
        gm_static = make_fx(static, tracing_mode="fake")(torch.empty(4, 6), torch.empty(6, 3))
        gm_sym = make_fx(symbolic, tracing_mode="symbolic")(torch.empty(4, 6), torch.empty(6, 3))
        gm_unbacked = make_fx(unbacked, tracing_mode="symbolic")(torch.ones(5, 2))
    for _ in range(2):
        FakeTensorProp(gm_static, mode).propagate_dont_convert_inputs(
            torch.empty(4, 6, device=dev), torch.empty(6, 3, device=dev))
        out.append(("static graph", (), meta(gm_static)))
    x = _symbolic_input(mode, dev, 4, 6)
    w = _symbolic_input(mode, dev, 6, 3)
    for _ in range(2):
        FakeTensorProp(gm_sym, mode).propagate_dont_convert_inputs(x, w)
        out.append(("symbolic graph", (x, w), meta(gm_sym)))
    # Data-dependent sizes: propagated again in the ShapeEnv make_fx traced in
    # (as Inductor re-propagates), so the new unbacked symbols are re-bound to the
    # graph's (rebind_unbacked); a new input each time (nonzero is memoised on it).
    trace_mode = next(iter(gm_unbacked.graph.nodes)).meta["val"].fake_mode
    for _ in range(2):
        with trace_mode:
            u = _symbolic_input(trace_mode, dev, 5, 2)
            FakeTensorProp(gm_unbacked, trace_mode).propagate_dont_convert_inputs(u)
        out.append(("unbacked graph", (), [
            (name, optree.tree_map(_summary, val, none_is_leaf=True), bindings)
            for name, val, bindings in meta(gm_unbacked)
        ]))
        out.append(("unbacked ShapeEnv", (), repr(_shape_env_state(trace_mode.shape_env))))
    return out


def _pytree_program(mode, dev: str) -> list:
    """The pytree maps the tracing modules call (``functional_tensor.pytree``: stock's
    module, or fastfake's view of it), over plain trees (nested tuples, lists and
    dicts with int and str keys, empty ones, None, scalars, strings, fake tensors,
    SymInts) and trees the C path hands to stock (a namedtuple, an OrderedDict, a
    deque, a torch.Size; FX's immutable_list / immutable_dict, whose leaves the C path
    takes): the results, which containers are fresh, the order of the
    calls, an error raised at the second leaf; then a whole AOTAutograd trace
    (forward and backward graph code) through every call site."""
    import collections

    import torch.fx.graph as fx_graph
    from torch._subclasses import functional_tensor as ft
    from torch.fx.immutable_collections import immutable_dict, immutable_list
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    p = ft.pytree
    x = _symbolic_input(mode, dev, 3, 4)
    y = torch.empty(2, device=dev)
    s = x.shape[0]
    point = collections.namedtuple("point", "a b")
    trees = [x, None, 5, "k", (), [], {}, (x,), [x, (None, 2.5)], {"b": x, "a": [s, "k", y]},
             ((x, [y, {}]), {"z": (None,)}), [[], [[]], ()], {1: x, "1": y, (2, 3): s},
             point(x, 2), collections.OrderedDict(a=x), collections.deque([x, y]), torch.Size([2, 3]),
             [x, point(y, s)], (immutable_list([x, s]), immutable_dict(b=y, a=immutable_list([None, x])))]

    def fresh(tree, result):
        # which containers of the result are the input's own objects
        if type(tree) in (tuple, list):
            return [result is tree, [fresh(a, b) for a, b in zip(tree, result)]]
        if type(tree) is dict:
            return [result is tree, list(result), [fresh(tree[k], result[k]) for k in tree]]
        return None

    out = []
    for i, tree in enumerate(trees):
        log: list = []

        def f(v):
            log.append(type(v).__name__)
            return v.t() if isinstance(v, torch.Tensor) and v.dim() == 2 else v

        r1 = p.tree_map_only(torch.Tensor, f, tree)
        r2 = p.tree_map_only((torch.SymInt, str), lambda v: ("seen", v), tree)
        r3 = p.tree_map(lambda v: v, tree)
        r4 = p.tree_leaves(tree)
        r5 = p.tree_map_only(torch.Tensor, f, tree, None)
        r6 = [type(v).__name__ for v in fx_graph.pytree.tree_iter(tree)]
        calls = []

        def second_fails(v):
            calls.append(type(v).__name__)
            if len(calls) == 2:
                raise ValueError("second leaf")
            return v

        try:
            p.tree_map(second_fails, tree)
            err = None
        except ValueError as e:
            err = str(e)
        desc = repr([type(r).__name__ for r in (r1, r2, r3, r4, r5)]) + repr(r6) + repr(
            [fresh(tree, r) for r in (r1, r3)]) + repr(log) + repr((calls, err))
        out.append((f"tree {i}", (x, y), (r1, r2, r3, r4, r5, desc)))

    def fn(a, b):
        parts = torch.split(a * 2, 2)
        m, v = torch.var_mean(b, 0, keepdim=True)
        return {"p": parts[0].sum() + parts[-1].sum(), "q": [m, v.add(1)]}, (a.t(),)

    from functorch.compile import aot_function, make_boxed_func

    codes: list = []

    def boxed(gm, example_inputs):
        codes.append(gm.code)
        return make_boxed_func(gm)

    with unset_fake_temporarily():
        a = torch.randn(4, 3, requires_grad=True)
        b = torch.randn(5, 3, requires_grad=True)
        res = aot_function(fn, fw_compiler=boxed, bw_compiler=boxed)(a, b)
        loss = res[0]["p"] + res[0]["q"][0].sum() + res[0]["q"][1].sum() + res[1][0].sum()
        loss.backward()
        shapes = [tuple(t.shape) for t in (res[0]["q"][0], res[0]["q"][1], res[1][0])]
    out.append(("AOTAutograd trace", (), repr((codes, shapes, type(res).__name__, sorted(res[0])))))
    return out


def _graph_description(gm) -> list:
    """Every node of an FX graph as comparable values: op, name, target, arguments,
    its meta keys and the fields of its ``val`` / ``tensor_meta``."""
    def val(v):
        if isinstance(v, torch.Tensor):
            return ("tensor", type(v).__name__, tuple(map(str, v.shape)), tuple(map(str, v.stride())),
                    str(v.storage_offset()), v.dtype, str(v.device), v.requires_grad)
        if isinstance(v, (list, tuple)):
            return [val(a) for a in v]
        return repr(v)

    out = []
    for n in gm.graph.nodes:
        meta = {k: (val(v) if k in ("val", "tensor_meta") else v if k == "seq_nr" else
                    bool(v) if k == "stack_trace" else repr(v))
                for k, v in n.meta.items()}
        out.append((n.op, n.name, str(n.target), repr(n.args), repr(n.kwargs), sorted(meta.items())))
    return out


def _relative_seq_nr(graphs: list) -> list:
    """The graphs' node descriptions with autograd sequence numbers counted from the
    first one they hold (the counter is the process's)."""
    nrs = [v for g in graphs for node in g for k, v in node[5] if k == "seq_nr" and isinstance(v, int)]
    base = min(nrs, default=0)
    return [[(*node[:5], [(k, v - base if k == "seq_nr" and isinstance(v, int) else v) for k, v in node[5]])
             for node in g] for g in graphs]


def _functional_dispatch_program(mode, dev: str) -> list:
    """Whole AOTAutograd traces through the functional mode (forward and backward
    graphs: code and every node's meta), static and with symbolic sizes (no copy
    into a view of an input that requires grad: stock's own cache hit of that
    ``aten.copy`` answers another storage offset than its miss, so such a graph
    depends on what the process traced before): views and
    their copies, in-place ops on a view and on a clone then read through the base
    (the view replay stock syncs), multi-output and list-output ops, keyword and
    scalar arguments, a mutation of an input, an op with a CompositeImplicitAutograd
    decomposition, integer ops without grad; then calls made in the mode directly
    (the wrapper's fields, which are the inner tensor's)."""
    from functorch.compile import aot_function, make_boxed_func
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode

    def fn(x, y, idx, buf):
        a = x.view(-1, 4).t()
        b = a.contiguous() * 2
        c = torch.split(b, 2)
        d = y.unsqueeze(0).repeat(3, 1)
        d[1:].mul_(y.sum())  # (a view mutated, then the base read)
        v = d[:2]
        d.add_(1)
        v = v * 3  # (the base mutated, then its view read: stock syncs it, annotated)
        e = d.sum(dim=0, keepdim=True) + torch.cat([c[0], c[1]], dim=1).mean() + x
        m, i = torch.max(x, 1)
        z = torch.nn.functional.layer_norm(x, (4,), eps=1e-5).relu()
        w = torch.zeros(3, device=x.device).index_put_((idx,), torch.ones(2, device=x.device))
        buf.add_(1)  # an input mutated
        q = torch.nn.functional.dropout(z, p=0.0, training=False)
        return e + 1, m, i, q, d.unsqueeze(0).expand(2, 3, 4), w, torch.where(x > 0, x, 0.5), idx * 2, x.clone().mul_(2), v

    codes: list = []

    def boxed(gm, example_inputs):
        codes.append((gm.code, _graph_description(gm)))
        return make_boxed_func(gm)

    out = []
    with unset_fake_temporarily():
        for dynamic in (False, True):
            codes.clear()
            x = torch.randn(3, 4, requires_grad=True, device=dev)
            y = torch.randn(4, device=dev)
            idx = torch.tensor([0, 2], device=dev)
            buf = torch.zeros(5, device=dev)
            res = aot_function(fn, fw_compiler=boxed, bw_compiler=boxed, dynamic=dynamic)(x, y, idx, buf)
            (res[0].sum() + res[3].sum() + res[6].sum() + res[8].sum()).backward()
            graphs = _relative_seq_nr([g for _, g in codes])
            out.append((f"AOTAutograd trace (dynamic={dynamic})", (),
                        repr(([c for c, _ in codes], graphs, [tuple(r.shape) for r in res]))))
    x = _symbolic_input(mode, dev, 6, 8)
    with FunctionalTensorMode():
        xf = FunctionalTensor.to_functional(x)
        for _ in range(2):
            out.append(("add", (xf,), xf + xf))
            out.append(("transpose", (xf,), xf.t()))
            out.append(("split", (xf,), list(torch.split(xf, 3))))
            out.append(("max", (xf,), tuple(torch.max(xf, 1))))
            out.append(("mm", (xf,), torch.mm(xf, xf.t())))
    return out


def _sym_register_program(mode, dev: str) -> list:
    """make_fx symbolic traces whose SymNode operations are recorded at once (not
    thunkified): SymInt arithmetic of every kind the trace meets (multiplication,
    addition, subtraction, floor division, sym_max, a comparison that guards, one
    multiplied by one, a result that is a constant), sizes made from it,
    ``torch.sym_sum`` (one list: stock's), and a functionalized function whose
    wrappers' storage sizes are traced; the graphs (code and every node's meta, the
    unused SymInt nodes too) and the guards."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.fx.experimental.proxy_tensor import make_fx

    def arith(x, y):
        n = x.shape[0] * x.shape[1]
        m = n + y.shape[0] - 1
        h = x.reshape(n).repeat(2)[:m]
        k = (x.shape[0] + 2) // 2
        u = torch.sym_max(x.shape[0], y.shape[0])
        z = torch.zeros(k, u, device=x.device)
        s = torch.sym_sum([x.shape[0], x.shape[1], y.shape[0]])
        w = x.new_zeros(s) if x.shape[1] * 1 > 2 else x.new_ones(s)
        _unused = (x.shape[0] - 1) * (y.shape[0] + 3)
        return h * 2, z + 1, w, n - n + 2

    def views(x, y):
        a = x.view(-1).narrow(0, 1, x.shape[0] * 2)
        a.add_(y[: a.shape[0]].sum())
        b = x.t().reshape(x.shape[1], x.shape[0] // 2, 2)
        return x + 1, b.sum(), a

    out = []
    with unset_fake_temporarily():
        for name, fn in (("SymInt arithmetic", arith), ("functionalized views", torch.func.functionalize(views))):
            gm = make_fx(fn, tracing_mode="symbolic")(torch.randn(4, 6, device=dev), torch.randn(9, device=dev))
            env = next(n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder").shape[0].node.shape_env
            out.append((f"make_fx symbolic: {name}", (),
                        repr((gm.code, _graph_description(gm), [str(g.expr) for g in env.guards]))))
    return out


def _fx_node_program(mode, dev: str) -> list:
    """make_fx's nodes with every meta stock's tracer gives them: the traces of the
    SymInt program (SymInt arithmetic, builtin-named targets like ``abs`` and
    ``max`` whose names the namespace must suffix, ops, ``getitem``), plain and
    under preserved node meta from a current node (stack trace with and without
    the gradient-accumulation marker, module stack, source function, custom
    fields, sequence numbers counted from the first, a replayed node, a backward
    node's ``grad_fn_seq_nr``); the graphs before dead-code elimination (the
    nodes it removes too) and after."""
    from torch.fx import traceback as fx_traceback
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.fx.experimental.proxy_tensor import make_fx

    def arith(x, y):
        n = x.shape[0] * x.shape[1]
        a = abs(y.shape[0] - 20) + max(x.shape[0], 3)
        h = x.reshape(n).repeat(2)[: n + 1]
        z = torch.zeros(a, device=x.device)
        parts = torch.split(h, [n - 1, 2])
        _unused = (x.shape[0] - 1) * (y.shape[0] + 3)
        return parts[0] * 2, z + 1, parts[1].sum(), n // 2

    seen: list = []
    stock_dce = torch.fx.Graph.eliminate_dead_code

    def dce(graph, *args, **kwargs):  # (the graph before: every node made)
        seen.append(_graph_description(type("G", (), {"graph": graph})))
        return stock_dce(graph, *args, **kwargs)

    def current(extra: dict):
        g = torch.fx.Graph()
        node = g.create_node("call_function", torch.add, (), {}, name="current")
        node.meta.update({"nn_module_stack": {"m": ("mod", "torch.nn.Module")}, "custom": {"k": 1},
                          "source_fn_stack": [("add", torch.add)], "seq_nr": 7, **extra})
        return node

    out = []
    with unset_fake_temporarily():
        inputs = (torch.randn(4, 6, device=dev), torch.randn(9, device=dev))
        special = fx_traceback.GRADIENT_ACC_SPECIAL_STACK
        settings = [
            ("plain", None, None),
            ("preserved meta", {"stack_trace": "File x.py, line 1"}, None),
            ("gradient accumulation", {"stack_trace": f"a {special} b", "autograd_backward": False}, None),
            ("backward node", {"in_grad_fn": 1, "grad_fn_seq_nr": [3, 5], "autograd_backward": True}, None),
            ("replayed node", {}, {"seq_nr": 11, "custom": {"r": 2}, "stack_trace": "replayed"}),
        ]
        torch.fx.Graph.eliminate_dead_code = dce
        try:
            for name, meta, replay in settings:
                seen.clear()
                if meta is None:
                    gm = make_fx(arith, tracing_mode="symbolic")(*inputs)
                else:
                    replay_node = current({}) if replay is not None else None
                    if replay_node is not None:
                        replay_node.meta.clear()
                        replay_node.meta.update(replay)
                    with fx_traceback.preserve_node_meta(), fx_traceback.set_current_meta(current(meta)), \
                            fx_traceback.set_current_replay_node(replay_node):
                        gm = make_fx(arith, tracing_mode="symbolic")(*inputs)
                graphs = _relative_seq_nr([*seen, _graph_description(gm)])
                # (the current node's graph is the program's own: its id left out)
                text = re.sub(r"graph_id=\d+", "graph_id=...", repr((gm.code, graphs)))
                out.append((f"make_fx nodes: {name}", (), text))
        finally:
            torch.fx.Graph.eliminate_dead_code = stock_dce
    return out


# (feature, program, needs a ShapeEnv, devices it runs on)
def _groups() -> list[tuple[str, Program, bool, tuple[str, ...]]]:
    accel = ["cuda"]
    if "torch_xla" in sys.modules:
        accel.append("xla")
    private = _compat.privateuse1_device()  # fakes on it proven like cuda / xla ones
    if private:
        accel.append(private)
    return [
        ("elementwise", _elementwise_program, False, ("cpu", *accel)),
        ("cache", _cache_program, False, ("cpu", *accel)),
        ("cache_symbolic", _symbolic_program, True, ("cpu",)),
        ("cache_portable", _portable_program, True, ("cpu",)),
        ("store", _store_program, False, ("cpu",)),
        ("store_symbolic", _store_symbolic_program, True, ("cpu",)),
        ("cache_rerun", _rerun_program, True, ("cpu",)),
        ("cache_rerun_scalar", _rerun_scalar_program, True, ("cpu",)),
        ("cache_item_memo", _item_memo_program, True, ("cpu",)),
        ("functional_storage", _functional_program, True, ("cpu",)),
        ("detach", _detach_program, True, ("cpu", *accel)),
        ("convert", _convert_program, False, ("cpu",)),
        ("symnode_memo", _symnode_program, True, ("cpu",)),
        ("fake_prop", _fake_prop_program, True, ("cpu",)),
        ("symnode_expr", _symnode_expr_program, True, ("cpu",)),
        ("symnode_int", _symnode_int_program, True, ("cpu",)),
        ("pytree", _pytree_program, True, ("cpu",)),
        ("frame_stack", _frame_stack_program, False, ("cpu",)),
        ("funcnames", _funcnames_program, False, ("cpu",)),
        ("config_attr", _config_attr_program, False, ("cpu",)),
        ("functional_dispatch", _functional_dispatch_program, True, ("cpu",)),
        ("proxy_dispatch", _functional_dispatch_program, True, ("cpu",)),
        ("sym_register", _sym_register_program, True, ("cpu",)),
        ("sym_dispatch", _sym_register_program, True, ("cpu",)),
        ("fx_node", _fx_node_program, True, ("cpu",)),
        ("dce_pred", _sym_register_program, True, ("cpu",)),
        # (records learned in the other ShapeEnv are stored, and untracked, by the
        # tables; the results are stock's whether or not: it must serve)
        ("untrack", _portable_program, True, ("cpu",)),
    ]


# ---------------------------------------------------------------------------
# Describing results: every field, as plain comparable values.
# ---------------------------------------------------------------------------


class _Describer:
    def __init__(self, mode, stock_device: property) -> None:
        self.mode = mode
        self.stock_device = stock_device

    def _int_like(self, v, nodes: dict[int, int]):
        if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            k = nodes.get(id(v.node))
            if k is not None:
                return ("input SymNode", k)
            return ("new SymNode", *_symnode.describe(v.node))
        return v

    def _tensor(self, t: torch.Tensor, inputs: tuple, nodes: dict[int, int]) -> dict:
        def ints(x):
            return [*x.shape, *x.stride(), x.storage_offset(), x.untyped_storage().nbytes()]

        d = {
            "type": type(t).__qualname__,
            "sizes, strides, offset, nbytes": [self._int_like(v, nodes) for v in ints(t)],
            "dtype": t.dtype,
            "device (stock property)": (
                self.stock_device.__get__(t, type(t)) if hasattr(t, "fake_mode") else t.device
            ),
            "device (as served)": t.device,
            "layout": t.layout,
            "requires_grad": t.requires_grad,
            "conj/neg": (t.is_conj(), t.is_neg()),
            "version": None if t.is_inference() else t._version,
            "dispatch keys": str(torch._C._dispatch_keys(t)),
            "__dict__": [
                (k, "mode" if v is self.mode else repr(v)) for k, v in vars(t).items()
            ],
            "is input": [j for j, x in enumerate(inputs) if x is t],
            "shares storage with input": [
                j
                for j, x in enumerate(inputs)
                if isinstance(x, torch.Tensor)
                and x.untyped_storage()._cdata == t.untyped_storage()._cdata
            ],
        }
        return d

    def describe(self, name: str, inputs: tuple, value) -> dict:
        nodes: dict[int, int] = {}
        for x in inputs:
            if isinstance(x, torch.Tensor):
                for v in (*x.shape, *x.stride(), x.storage_offset(), x.untyped_storage().nbytes()):
                    if isinstance(v, torch.SymInt):
                        nodes.setdefault(id(v.node), len(nodes))
        leaves, spec = optree.tree_flatten(value, none_is_leaf=True)
        return {
            "structure": str(spec),
            "outputs": [
                self._tensor(v, inputs, nodes)
                if isinstance(v, torch.Tensor)
                else self._int_like(v, nodes)
                if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool))
                else repr(v)
                for v in leaves
            ],
        }


def _shape_env_state(env) -> dict:
    if env is None:
        return {}
    return {
        "guards": [str(g.expr) for g in env.guards],
        "var_to_range": {str(k): str(v) for k, v in env.var_to_range.items()},
        "replacements": {str(k): str(v) for k, v in env.replacements.items()},
        "deferred runtime asserts": {
            str(k): [str(r.expr) for r in v] for k, v in env.deferred_runtime_asserts.items()
        },
    }


def _run(program: Program, dev: str, symbolic: bool, stock_device: property):
    """(per-call descriptions, ShapeEnv state) or the exception raised."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    mode = FakeTensorMode(shape_env=ShapeEnv() if symbolic else None)
    try:
        with mode:
            calls = program(mode, dev)
            d = _Describer(mode, stock_device)
            described = [(name, d.describe(name, ins, val)) for name, ins, val in calls]
    except Exception as e:  # noqa: BLE001 - compared with the other side
        return e
    return described, _shape_env_state(mode.shape_env)


def _first_difference(stock, fast) -> tuple[str, str] | None:
    """(field, message) of the first difference, None if identical."""
    if isinstance(stock, Exception) or isinstance(fast, Exception):
        if type(stock) is type(fast) and str(stock) == str(fast):
            return None

        def outcome(x) -> str:
            return f"raised {x!r:.300}" if isinstance(x, Exception) else "returned results"

        return "outcome", f"stock {outcome(stock)}; fastfake {outcome(fast)}"
    (s_calls, s_env), (f_calls, f_env) = stock, fast
    for (name, s), (_, f) in zip(s_calls, f_calls):
        if s["structure"] != f["structure"]:
            return "structure", f"{name}: stock {s['structure']}, fastfake {f['structure']}"
        for j, (so, fo) in enumerate(zip(s["outputs"], f["outputs"])):
            if so == fo:
                continue
            if not isinstance(so, dict) or not isinstance(fo, dict):
                return "value", f"{name} output {j}: stock {so!r}, fastfake {fo!r}"
            for k in so:
                if so[k] != fo.get(k):
                    return k, f"{name} output {j}: {k}: stock {so[k]!r}, fastfake {fo.get(k)!r}"
    for k in s_env:
        if s_env[k] != f_env.get(k):
            return k, f"ShapeEnv {k}: stock {s_env[k]!r}, fastfake {f_env.get(k)!r}"
    return None


def _dispatch_tls() -> tuple:
    """The thread-local dispatch state a fast path must leave as it found it."""
    return (
        str(torch._C._dispatch_tls_local_include_set()),
        str(torch._C._dispatch_tls_local_exclude_set()),
        torch._C._meta_in_tls_dispatch_include(),
    )


def run(
    fast: Callable[[str], contextlib.AbstractContextManager],
    stock_device: property,
    features: list[str],
) -> Report:
    """Run the programs of ``features`` under stock and under ``fast(feature)`` (a
    context in which only that feature -- plus the device descriptor -- is
    installed). The device descriptor is judged on every program's outputs."""
    report = Report(torch_version=torch.__version__, built_for=_C.built_for())
    t0 = time.perf_counter()
    counters_before = [v for _, v in _C.counters()]
    python_before = _counters.saved()
    device_ok = True
    device_msg = ""
    device_served = 0
    # (stock's answers to a program several features share are computed once: each
    # run makes its own mode and ShapeEnv, and the descriptions compare values)
    stock_answers: dict = {}
    try:
        with stock_state_preserved():
            for feature, program, symbolic, devices in _groups():
                if feature not in features:
                    continue
                ok, msg, served = True, "", 0
                for dev in devices:
                    key = (program, dev, symbolic)
                    if key not in stock_answers:
                        stock_answers[key] = _run(program, dev, symbolic, stock_device)
                    stock = stock_answers[key]
                    if isinstance(stock, Exception):
                        report.skipped.append(f"{feature} on {dev}: stock raised {type(stock).__name__}")
                        continue
                    _C.reset_counters()
                    _counters.reset()
                    tls = _dispatch_tls()
                    with torch._C._PreserveDispatchKeyGuard():
                        with fast(feature):
                            got = _run(program, dev, symbolic, stock_device)
                        tls_after = _dispatch_tls()
                    if tls_after != tls and not isinstance(got, Exception):
                        got = RuntimeError(f"thread-local dispatch keys changed: {tls} -> {tls_after}")
                    counts = dict(_C.counters())
                    counts.update(_counters.counters())
                    served += _served(counts, feature)
                    device_served += _served(counts, "device")
                    diff = _first_difference(stock, got)
                    if diff is None:
                        continue
                    fld, text = diff
                    if fld == "device (as served)":
                        device_ok, device_msg = False, f"{feature} program on {dev}: {text}"
                        continue
                    ok, msg = False, f"program on {dev}: {text}"
                    break
                if ok and feature in MUST_SERVE and not served:
                    ok, msg = False, "its program was not served (nothing to show it works)"
                report.passed[feature] = ok
                report.served[feature] = served
                if not ok:
                    report.failures[feature] = msg
    finally:
        _C.cache_clear()
        _C.forget_signatures()
        _C.set_counters(counters_before)
        _functional.clear()
        _C.symnode_memo_clear()
        _C.symnode_expr_clear()
        _counters.restore(python_before)
    report.passed["device"] = device_ok
    report.served["device"] = device_served
    if not device_ok:
        report.failures["device"] = device_msg
    # The programs' modes, ShapeEnvs and tensors form reference cycles: collect
    # them now, so that the cyclic collector does not meet them later in the
    # user's first compile (measured: +0.2-0.3 s in the next gen-2 collection of a
    # warm-cache Inductor start, landing in its compiled-code loading).
    gc.collect()
    report.seconds = time.perf_counter() - t0
    return report
