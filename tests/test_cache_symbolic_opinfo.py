"""OpInfo sweep of the result cache with symbolic shapes.

For every OpInfo in torch's ``op_db`` (CPU, float32, the first samples), the
sample's tensors are made fake with every dimension dynamic (one ShapeEnv per
run) and the op is called twice in the same mode -- the first call fills
fastfake's per-ShapeEnv cache, the second is served from it -- once under stock
and once under fastfake. Outcomes must be identical (tests/parity.py
``assert_symbolic_parity``: every tensor field with sizes / strides / offsets /
nbytes as expressions, errors, aliasing, raw SymNode values and which outputs are
input SymNodes, and the ShapeEnv's guards, ranges, replacements and deferred
asserts). The share of second calls served by the symbolic cache is printed.
"""
from __future__ import annotations

import collections
import itertools
import time

import pytest
import torch
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._python_dispatch import _disable_current_modes

import fastfake
import parity

pytestmark = parity.requires_symbolic_cache
from test_elementwise_opinfo import _op_id

SAMPLES = 2

# Known fastfake bugs: {op id: reason}; xfail(strict=True) so a fix is noticed.
KNOWN_BUGS: dict[str, str] = {}


class _Totals:
    def __init__(self) -> None:
        self.ops = self.cases = self.unconvertible = 0
        self.sym_calls = 0  # cases whose first call went through the symbolic cache
        self.served = 0  # ... whose second call was a symbolic hit
        self.counters: collections.Counter[str] = collections.Counter()
        self.seconds = 0.0


TOTALS = _Totals()


def _make_inputs_factory(sample):
    def make_inputs(mode):
        def conv(x):
            if not isinstance(x, torch.Tensor):
                return x
            ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * x.dim())
            return mode.from_tensor(x, symbolic_context=ctx)

        with _disable_current_modes():  # from_tensor inside the mode would not symbolize
            return pytree.tree_map(conv, (sample.input, tuple(sample.args), dict(sample.kwargs)))

    return make_inputs


def _twice(op):
    def fn(inp, args, kwargs):
        return op(inp, *args, **kwargs), op(inp, *args, **kwargs)

    return fn


def _mode():
    return FakeTensorMode(shape_env=ShapeEnv())


def _convertible(make_inputs) -> bool:
    fastfake.uninstall()
    try:
        make_inputs(_mode())
        return True
    except Exception:  # noqa: BLE001
        return False


def _params():
    for op in op_db:
        oid = _op_id(op)
        marks = ()
        if oid in KNOWN_BUGS:
            marks = (pytest.mark.xfail(reason=KNOWN_BUGS[oid], strict=True),)
        yield pytest.param(op, id=oid, marks=marks)


@pytest.mark.parametrize("op", list(_params()))
def test_symbolic_cache_opinfo_parity(op):
    if torch.float32 not in op.supported_dtypes("cpu"):
        pytest.skip("no float32")
    t0 = time.perf_counter()
    TOTALS.ops += 1
    failures = []
    torch.manual_seed(0)
    samples = list(itertools.islice(op.sample_inputs("cpu", torch.float32, requires_grad=False), SAMPLES))
    for i, sample in enumerate(samples):
        make_inputs = _make_inputs_factory(sample)
        if not _convertible(make_inputs):
            TOTALS.unconvertible += 1
            continue
        TOTALS.cases += 1
        fastfake.cache_clear()
        FakeTensorMode.cache_clear()
        both = parity.run_both(_twice(op.op), make_inputs, mode_factory=_mode, fast_runs=1)
        try:
            parity.assert_symbolic_parity(both, f"{_op_id(op)} sample {i}")
        except AssertionError as e:
            failures.append(str(e))
            continue
        stats = both.fast[0].stats
        if stats["cache.symbolic.miss"]:
            TOTALS.sym_calls += 1
            TOTALS.served += bool(stats["cache.symbolic.hit"])
        for k, v in parity.counters_with_prefix(stats, "cache.").items():
            TOTALS.counters[k] += v
    TOTALS.seconds += time.perf_counter() - t0
    assert not failures, f"{len(failures)} mismatches:\n" + "\n".join(failures[:5])


def teardown_module(module):
    t = TOTALS
    share = t.served / t.sym_calls if t.sym_calls else 0.0
    print(
        f"\n[symbolic cache opinfo] {t.ops} OpInfos, {t.cases} cases "
        f"({t.unconvertible} samples not convertible), {t.seconds:.1f}s; "
        f"second call served from the symbolic cache in {t.served}/{t.sym_calls} = {share:.1%} "
        f"of the cases that reached it"
    )
    for k, v in t.counters.most_common():
        print(f"    {k}: {v}")
