"""Per-op micro-benchmarks inside FakeTensorMode, stock vs fastfake.

Static shapes, and (``*_sym``) the same result-cache hits with every input
dimension symbolic in a ShapeEnv; and (``*_sym_first``) the *first* call of an op
in a new ShapeEnv whose structure an earlier ShapeEnv already saw (a new compile,
or Dynamo restarting its analysis): each sample is a fresh mode, ShapeEnv and
inputs, made untimed, and one timed call.

    python -m bench.micro [--number N] [--repeat R] [--json out.json]

Prints, per op, the median time per call in microseconds under stock torch and
under fastfake (interleaved, ``timeit`` with several repeats; medians) and the
ratio stock/fastfake. The same ops are benchmarked with pytest-benchmark in
``bench/test_micro.py``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import timeit
from collections.abc import Callable

import torch

import fastfake
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

from .harness import set_impl

IMPLS = ("stock", "fastfake")


def _add_broadcast():
    a, b = torch.randn(64, 128), torch.randn(128)
    return lambda: a + b


def _mul_scalar():
    a = torch.randn(64, 128)
    return lambda: a * 2.5


def _relu():
    a = torch.randn(64, 128)
    return lambda: torch.relu(a)


def _where():
    c, a, b = torch.randn(64, 128) > 0, torch.randn(64, 128), torch.randn(64, 128)
    return lambda: torch.where(c, a, b)


def _add_inplace():
    a, b = torch.randn(64, 128), torch.randn(64, 128)
    return lambda: a.add_(b)


def _mm():
    a, b = torch.randn(64, 128), torch.randn(128, 256)
    return lambda: torch.mm(a, b)


def _layer_norm():
    x, w, b = torch.randn(8, 128, 256), torch.randn(256), torch.randn(256)
    return lambda: torch.nn.functional.layer_norm(x, (256,), w, b)


def _view():
    a = torch.randn(64, 128)
    return lambda: a.view(128, 64)


def _softmax():
    a = torch.randn(8, 16, 128)
    return lambda: torch.softmax(a, -1)


def _sym_tensor(mode: FakeTensorMode, *shape: int) -> torch.Tensor:
    ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * len(shape))
    return mode.from_tensor(torch.randn(*shape), symbolic_context=ctx)


def _mm_sym(mode):
    a, b = _sym_tensor(mode, 64, 128), _sym_tensor(mode, 128, 256)
    return lambda: torch.mm(a, b)


def _layer_norm_sym(mode):
    x, w, b = _sym_tensor(mode, 8, 128, 256), torch.randn(256), torch.randn(256)
    w, b = mode.from_tensor(w), mode.from_tensor(b)
    return lambda: torch.nn.functional.layer_norm(x, (256,), w, b)


def _view_sym(mode):
    a = _sym_tensor(mode, 8, 128, 64)
    return lambda: a.view(a.shape[0] * a.shape[1], a.shape[2])


def _softmax_sym(mode):
    a = _sym_tensor(mode, 8, 16, 128)
    return lambda: torch.softmax(a, -1)


def _device():
    a = torch.randn(64, 128)
    return lambda: a.device


#: op name -> builder; call the builder inside a FakeTensorMode to get a zero-arg
#: callable performing the op once on fake tensors.
OPS: dict[str, Callable[[], Callable[[], object]]] = {
    "add_broadcast": _add_broadcast,  # [64,128] + [128]
    "mul_scalar": _mul_scalar,  # [64,128] * 2.5
    "relu": _relu,
    "where": _where,  # where(bool[64,128], [64,128], [64,128])
    "add_inplace": _add_inplace,  # [64,128].add_([64,128])
    "device": _device,  # FakeTensor.device property
    # result-cache hits (after the first call)
    "mm": _mm,  # [64,128] @ [128,256]
    "layer_norm": _layer_norm,  # [8,128,256], affine
    "view": _view,  # [64,128] -> [128,64]
    "softmax": _softmax,  # [8,16,128], dim -1
}

#: symbolic-shape result-cache hits: builder(mode) is called outside the mode
#: (from_tensor symbolizes only there) and returns the op callable.
SYMBOLIC_OPS: dict[str, Callable[[FakeTensorMode], Callable[[], object]]] = {
    "mm_sym": _mm_sym,  # [s0,s1] @ [s2,s3]
    "layer_norm_sym": _layer_norm_sym,  # [s0,s1,s2], affine
    "view_sym": _view_sym,  # [s0,s1,s2] -> [s0*s1, s2]
    "softmax_sym": _softmax_sym,  # [s0,s1,s2], dim -1
}
ALL_OPS = [*OPS, *SYMBOLIC_OPS]


def _pair_sym(mode):
    # y shares x's SymNodes (a [s0, s1] tensor made from x), as in a traced program
    x = _sym_tensor(mode, 64, 128)
    with mode:
        y = torch.ops.aten.neg.default(x)
    return x, y


def _mul_sym_first(mode):
    x, y = _pair_sym(mode)
    return lambda: torch.ops.aten.mul.Tensor(x, y)


def _gelu_sym_first(mode):
    x = _sym_tensor(mode, 8, 128, 64)
    return lambda: torch.ops.aten.gelu.default(x)


def _softmax_sym_first(mode):
    x = _sym_tensor(mode, 8, 16, 128)
    return lambda: torch.ops.aten._softmax.default(x, -1, False)


def _mm_sym_first(mode):
    a = _sym_tensor(mode, 64, 128)
    with mode:
        b = torch.ops.aten.t.default(a)
    return lambda: torch.ops.aten.mm.default(a, b)


#: first calls in a new ShapeEnv of a known structure: builder(mode) makes the
#: inputs (outside the timed call) and returns the op callable.
FIRST_CALL_OPS: dict[str, Callable[[FakeTensorMode], Callable[[], object]]] = {
    "mul_sym_first": _mul_sym_first,  # [s0,s1] * [s0,s1] (pointwise)
    "gelu_sym_first": _gelu_sym_first,  # gelu([s0,s1,s2]) (pointwise)
    "softmax_sym_first": _softmax_sym_first,  # _softmax([s0,s1,s2], -1)
    "mm_sym_first": _mm_sym_first,  # [s0,s1] @ [s1,s0]
}


def measure_first(name: str, impl: str, *, samples: int) -> float:
    """Median microseconds of the first call of op ``name`` in a new ShapeEnv,
    after one earlier ShapeEnv ran it (fastfake learns there)."""
    import gc

    set_impl(impl)
    build = FIRST_CALL_OPS[name]
    for _ in range(3):
        mode = FakeTensorMode(shape_env=ShapeEnv())
        fn = build(mode)
        with mode:
            fn()
    setups = []
    for _ in range(samples):
        mode = FakeTensorMode(shape_env=ShapeEnv())
        setups.append((mode, build(mode)))
    times = []
    enabled = gc.isenabled()
    gc.disable()  # (the collector's pauses are not the op's)
    try:
        for mode, fn in setups:
            with mode:
                t0 = timeit.default_timer()
                fn()
                times.append(timeit.default_timer() - t0)
    finally:
        if enabled:
            gc.enable()
    return statistics.median(times) * 1e6


def run_first(samples: int = 200, rounds: int = 3) -> list[dict]:
    rows = []
    try:
        for name in FIRST_CALL_OPS:
            res: dict[str, list[float]] = {i: [] for i in IMPLS}
            for _ in range(rounds):  # interleaved stock / fastfake
                for impl in IMPLS:
                    res[impl].append(measure_first(name, impl, samples=samples))
            s, f = statistics.median(res["stock"]), statistics.median(res["fastfake"])
            rows.append({"op": name, "stock_us": s, "fastfake_us": f, "speedup": s / f})
    finally:
        fastfake.uninstall()
    return rows


def make_op(name: str) -> tuple[FakeTensorMode, Callable[[], object]]:
    """A fresh FakeTensorMode (with a ShapeEnv for the symbolic ops) and the op's
    callable on fake tensors of that mode."""
    if name in SYMBOLIC_OPS:
        mode = FakeTensorMode(shape_env=ShapeEnv())
        return mode, SYMBOLIC_OPS[name](mode)
    mode = FakeTensorMode()
    with mode:
        fn = OPS[name]()
    return mode, fn


def measure(name: str, impl: str, *, number: int, repeat: int, mode=None, fn=None) -> float:
    """Median microseconds per call of op ``name`` under ``impl``."""
    set_impl(impl)
    if fn is None:
        mode, fn = make_op(name)
    with mode:
        for _ in range(20):  # warm: fastfake admits a signature on its first call
            fn()
        times = timeit.repeat(fn, number=number, repeat=repeat)
    return statistics.median(times) / number * 1e6


def run(number: int = 2000, repeat: int = 7, rounds: int = 3) -> list[dict]:
    rows = []
    try:
        for name in ALL_OPS:
            mode, fn = make_op(name)
            res: dict[str, list[float]] = {i: [] for i in IMPLS}
            for _ in range(rounds):  # interleaved stock / fastfake
                for impl in IMPLS:
                    res[impl].append(measure(name, impl, number=number, repeat=repeat, mode=mode, fn=fn))
            s, f = statistics.median(res["stock"]), statistics.median(res["fastfake"])
            rows.append({"op": name, "stock_us": s, "fastfake_us": f, "speedup": s / f})
    finally:
        fastfake.uninstall()
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.micro", description=__doc__.split("\n\n")[0])
    p.add_argument("--number", type=int, default=2000, help="calls per timeit sample (default 2000)")
    p.add_argument("--repeat", type=int, default=7, help="timeit samples per round (default 7)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved stock/fastfake rounds (default 3)")
    p.add_argument("--first-samples", type=int, default=200,
                   help="fresh ShapeEnvs per round for the *_sym_first rows (default 200; 0 skips them)")
    p.add_argument("--json", metavar="OUT.json")
    a = p.parse_args(argv)
    rows = run(a.number, a.repeat, a.rounds)
    if a.first_samples > 0:
        rows += run_first(a.first_samples, a.rounds)
    print(f"fastfake {fastfake.__version__} | torch {torch.__version__} | median us per call inside "
          f"FakeTensorMode (timeit number={a.number} x repeat={a.repeat} x {a.rounds} interleaved rounds; "
          f"*_sym_first: one first call in each of {a.first_samples} new ShapeEnvs x {a.rounds} rounds)")
    print(f"{'op':15s} {'stock us':>10s} {'fastfake us':>12s} {'stock/fastfake':>15s}")
    for r in rows:
        print(f"{r['op']:15s} {r['stock_us']:10.2f} {r['fastfake_us']:12.2f} {r['speedup']:14.2f}x")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
