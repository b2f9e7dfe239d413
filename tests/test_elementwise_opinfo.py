"""OpInfo-driven differential test of the elementwise fast path.

For every OpInfo in torch's ``op_db`` that reaches a pointwise ATen overload
(ufunc OpInfos plus every entry whose ATen packet has an overload tagged
``torch.Tag.pointwise``), every CPU dtype it supports and the first few samples,
the sample is converted to fake tensors inside the mode and run once under stock
FakeTensorMode and twice under fastfake (miss, then hit). All three outcomes must
be identical (tests/parity.py). The in-place variant is run the same way for the
first samples.

At the end, the share of top-level pointwise dispatches that stock completes
without error and that fastfake served from the C++ fast path on the second run
is printed and asserted (>= 90 %), with every fallback / reject reason.
"""
from __future__ import annotations

import collections
import io
import itertools
import time

import pytest
import torch
import torch.utils._pytree as pytree
from torch.testing._internal.common_methods_invocations import (
    binary_ufuncs,
    op_db,
    unary_ufuncs,
)

import fastfake
import parity

SAMPLES_PER_DTYPE = 6
INPLACE_SAMPLES_PER_DTYPE = 2
TARGET_SHARE = 0.90


def _has_pointwise_overload(op) -> bool:
    names = {op.aten_name, op.name.replace(".", "_"), op.name.split(".")[0]}
    for n in names:
        packet = getattr(torch.ops.aten, n, None)
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        for ov in packet.overloads():
            if torch.Tag.pointwise in getattr(packet, ov).tags:
                return True
    return False


def _pointwise_opinfos():
    ufuncs = {id(o) for o in itertools.chain(unary_ufuncs, binary_ufuncs)}
    return [o for o in op_db if id(o) in ufuncs or _has_pointwise_overload(o)]


def _op_id(op) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


OPS = _pointwise_opinfos()

# Known fastfake bugs: {op id: reason}. Each is xfail(strict=True) so it is
# noticed as soon as it is fixed.
KNOWN_BUGS: dict[str, str] = {}


def _params():
    for op in OPS:
        oid = _op_id(op)
        marks = ()
        if oid in KNOWN_BUGS:
            marks = (pytest.mark.xfail(reason=KNOWN_BUGS[oid], strict=True),)
        yield pytest.param(op, id=oid, marks=marks)


class _Totals:
    def __init__(self) -> None:
        self.ops = 0
        self.cases = 0
        self.eligible = 0  # top-level pointwise dispatches stock completed without error
        self.served = 0  # ... of which fastfake's 2nd run served via the fast path
        self.per_op_missed: collections.Counter[str] = collections.Counter()
        self.reasons: collections.Counter[str] = collections.Counter()  # 2nd-run counters
        self.first_run: collections.Counter[str] = collections.Counter()  # 1st-run counters
        self.seconds = 0.0


TOTALS = _Totals()


def _make_inputs_factory(sample):
    def make_inputs(mode):
        return pytree.tree_map(
            lambda x: mode.from_tensor(x) if isinstance(x, torch.Tensor) else x,
            (sample.input, tuple(sample.args), dict(sample.kwargs)),
        )

    return make_inputs


def _variant_fn(variant):
    def fn(inp, args, kwargs):
        return variant(inp, *args, **kwargs)

    return fn


def _account(both: parity.Both, label: str) -> None:
    stock_calls = both.stock[0].calls
    fast_calls = both.fast[-1].calls
    # the program issues the same top-level ops with and without fastfake
    assert [c[0] for c in stock_calls] == [c[0] for c in fast_calls], (
        f"{label}: top-level dispatch sequence differs: "
        f"{[str(c[0]) for c in stock_calls]} vs {[str(c[0]) for c in fast_calls]}"
    )
    for (func, ok, _), (_, _, hit) in zip(stock_calls, fast_calls):
        if not ok or not isinstance(func, torch._ops.OpOverload):
            continue
        if torch.Tag.pointwise not in func.tags:
            continue
        TOTALS.eligible += 1
        if hit:
            TOTALS.served += 1
        else:
            TOTALS.per_op_missed[str(func)] += 1
    for k, v in parity.fast_path_counters(both.fast[-1].stats).items():
        if k != "elementwise.hit":
            TOTALS.reasons[k] += v
    for k, v in parity.fast_path_counters(both.fast[0].stats).items():
        TOTALS.first_run[k] += v


@pytest.mark.parametrize("op", list(_params()))
def test_opinfo_parity(op):
    t0 = time.perf_counter()
    failures = []
    TOTALS.ops += 1
    for dtype in sorted(op.supported_dtypes("cpu"), key=str):
        torch.manual_seed(0)
        try:
            samples = list(
                itertools.islice(op.sample_inputs("cpu", dtype, requires_grad=False), SAMPLES_PER_DTYPE)
            )
        except Exception as e:  # pragma: no cover - OpInfo sample generation itself failing
            failures.append(f"{dtype}: sample generation failed: {e!r}")
            continue
        for i, sample in enumerate(samples):
            variants = [("op", op.op)]
            if op.inplace_variant is not None and i < INPLACE_SAMPLES_PER_DTYPE:
                variants.append(("inplace", op.inplace_variant))
            for vname, variant in variants:
                label = f"{_op_id(op)} {vname} {dtype} sample {i}: {sample.summary() if hasattr(sample, 'summary') else sample}"
                TOTALS.cases += 1
                both = parity.run_both(
                    _variant_fn(variant), _make_inputs_factory(sample), record=True
                )
                try:
                    parity.assert_parity(both, label)
                    _account(both, label)
                except AssertionError as e:
                    failures.append(str(e))
    TOTALS.seconds += time.perf_counter() - t0
    assert not failures, f"{len(failures)} mismatches:\n" + "\n".join(failures[:10])


def _report() -> tuple[float, str]:
    share = TOTALS.served / TOTALS.eligible if TOTALS.eligible else 0.0
    lines = [
        "",
        f"[opinfo parity] {TOTALS.ops} OpInfos, {TOTALS.cases} cases, {TOTALS.seconds:.1f}s",
        f"[opinfo parity] fast-path share on 2nd run: {TOTALS.served}/{TOTALS.eligible} = {share:.1%} "
        f"of top-level pointwise dispatches that stock completes without error",
        "[opinfo parity] 1st-run counters: "
        + ", ".join(f"{k}={v}" for k, v in sorted(TOTALS.first_run.items())),
        "[opinfo parity] 2nd-run fallback / reject reasons:",
    ]
    for k, v in TOTALS.reasons.most_common():
        lines.append(f"    {k}: {v}")
    lines.append("[opinfo parity] pointwise overloads most often not served on the 2nd run:")
    for k, v in TOTALS.per_op_missed.most_common(25):
        lines.append(f"    {k}: {v}")
    report = fastfake.elementwise_report()
    mism = {k: v for k, v in report.items() if v["last_mismatch"]}
    lines.append(f"[opinfo parity] overloads with a rule mismatch ({len(mism)}):")
    for k, v in sorted(mism.items()):
        lines.append(
            f"    {k}: admitted={v['admitted']} rejected={v['rejected']} hits={v['hits']} "
            f"last_mismatch={v['last_mismatch']!r}"
        )
    return share, "\n".join(lines)


def _measured_share() -> float:
    return TOTALS.served / TOTALS.eligible if TOTALS.eligible else 0.0


def test_opinfo_fast_path_share(capsys):
    if TOTALS.eligible == 0:
        pytest.skip("run together with test_opinfo_parity (it collects the numbers)")
    share, text = _report()
    with capsys.disabled():
        print(text)
    assert share >= TARGET_SHARE, f"fast-path share {share:.1%} < {TARGET_SHARE:.0%}\n{text}"


def test_the_opinfo_bookkeeping_finds_what_torch_s_finds():
    """The OpInfo sweeps run with conftest's ``extract_test_fn`` (a frame walk that
    skips ``inspect.stack()``'s source reads): it must find what torch's finds,
    None in a pytest function, the running test inside a ``unittest.TestCase``, so
    that the samples and their seeds are torch's."""
    import unittest

    import conftest
    from torch.testing._internal import common_utils
    from torch.testing._internal.opinfo import core

    stock = conftest.STOCK_EXTRACT_TEST_FN["torch.testing._internal.common_utils"]
    assert common_utils.extract_test_fn is conftest._extract_test_fn
    assert core.extract_test_fn is conftest._extract_test_fn
    assert stock() is None and conftest._extract_test_fn() is None

    found = []

    class Case(unittest.TestCase):
        def test_probe(self):
            def nested():
                found.append((stock(), conftest._extract_test_fn()))

            nested()

    result = unittest.TextTestRunner(stream=io.StringIO()).run(Case("test_probe"))
    assert result.wasSuccessful()
    assert found == [(Case.test_probe, Case.test_probe)], found

    op = next(o for o in OPS if o.name == "add")
    seeded = []
    for extract in (stock, conftest._extract_test_fn):
        common_utils.extract_test_fn = core.extract_test_fn = extract
        try:
            torch.manual_seed(0)
            seeded.append([s.input.clone() for s in itertools.islice(op.sample_inputs("cpu", torch.float32), 4)])
        finally:
            common_utils.extract_test_fn = core.extract_test_fn = conftest._extract_test_fn
    assert all(torch.equal(a, b) for a, b in zip(*seeded, strict=True))
