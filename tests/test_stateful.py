"""History-dependent differential testing.

fastfake learns state that lives for the whole process (elementwise signatures and
their stride rules, result-cache entries, symbolic recipes); per-case tests only
see a fresh miss and a hit. Here long random sequences of calls run in one process
against two worlds fed the same sequence: a stock world (fastfake uninstalled) and
a fast world (installed), each with its own FakeTensorModes (two per world, so
mixing modes is exercised) and, in the symbolic variant, its own ShapeEnv. After
every call every output field is compared (sizes, strides, offset, storage nbytes,
dtype, device, layout, requires_grad, conj/neg, view-ness, version, the FakeTensor
__dict__, output-is-input identity), stock's errors must be fastfake's (type and
message), and in the symbolic variant the ShapeEnv state too (guards, ranges,
replacements, deferred runtime asserts). Outputs join the pool, so later calls run
on views of views, in-place results and broadcasts of earlier outputs. Some steps
clear stock's cache (which clears fastfake's), forget learned signatures, or shrink
the bounds (signature limit, cache LRU) so that eviction and the limits run too.

Two drivers share the steps: a hypothesis state machine (shrinks a failure to a
short program; derandomized so CI is repeatable) and a long seeded loop (thousands
of calls, the history real programs build). A failure prints the program.
"""
from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass, field
from typing import Any, Callable

import optree
import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule
from torch._dynamo.source import ConstantSource
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

import fastfake
import parity
from fastfake.common import compat as _compat
from fastfake.core import install as _install

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32,
          torch.bool, torch.complex64]
DEVICES = ["cpu", "cuda"]
SCALARS = [0, 1, 2, -3, 0.3, 2.5, -0.0, True, False, 1 + 2j]

# Pointwise ops (all served by the elementwise path once admitted).
BINARY: dict[str, Callable[..., Any]] = {
    "add": torch.add,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=2),
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "maximum": torch.maximum,
    "pow": torch.pow,
    "atan2": torch.atan2,
    "eq": torch.eq,
    "lt": torch.lt,
    "logical_and": torch.logical_and,
    "bitwise_and": torch.bitwise_and,
    "lerp": lambda a, b: torch.lerp(a, b, 0.3),
    "where": lambda a, b: torch.where(a > 0, a, b),
    "addcmul": lambda a, b: torch.addcmul(a, a, b, value=0.5),
    "clamp": lambda a, b: torch.clamp(a, min=b),
}
UNARY: dict[str, Callable[..., Any]] = {
    "neg": torch.neg,
    "exp": torch.exp,
    "sigmoid": torch.sigmoid,
    "relu": torch.relu,
    "abs": torch.abs,
    "sqrt": torch.sqrt,
    "logical_not": torch.logical_not,
    "to_float": lambda a: a.to(torch.float32),
    "gelu": torch.nn.functional.gelu,
}
INPLACE: dict[str, Callable[..., Any]] = {
    "add_": lambda a, b: a.add_(b),
    "mul_": lambda a, b: a.mul_(b),
    "clamp_": lambda a, b: a.clamp_(min=b),
    "copy_": lambda a, b: a.copy_(b),
    "lerp_": lambda a, b: a.lerp_(b, 0.5),
}
VIEWS: dict[str, Callable[..., Any]] = {
    "t": lambda a: a.t(),
    "transpose": lambda a: a.transpose(0, -1),
    "permute": lambda a: a.permute(*reversed(range(a.dim()))),
    "unsqueeze": lambda a: a.unsqueeze(1),
    "squeeze": lambda a: a.squeeze(),
    "expand": lambda a: a.unsqueeze(0).expand(3, *a.shape),
    "slice": lambda a: a[::2],
    "narrow": lambda a: a.narrow(-1, 0, 1),
    "flatten": lambda a: a.view(-1),
    "reshape": lambda a: a.reshape(-1, 1),
    "contiguous": lambda a: a.contiguous(),
    "channels_last": lambda a: a.view(1, *a.shape[-3:]).contiguous(memory_format=torch.channels_last)
    if a.dim() >= 3
    else a.clone(),
    "diagonal": lambda a: a.diagonal(),
    "select": lambda a: a.select(0, 0),
    "unsafe_view": lambda a: torch.ops.aten._unsafe_view.default(a, [a.numel()]),
    "detach": lambda a: a.detach(),
    "conj": lambda a: a.conj(),
}
OTHER: dict[str, Callable[..., Any]] = {
    "sum": lambda a: a.sum(-1),
    "sum_keepdim": lambda a: a.sum(0, keepdim=True),
    "mean": lambda a: a.mean(),
    "amax": lambda a: a.amax(-1),
    "argmax": lambda a: a.argmax(0),
    "softmax": lambda a: torch.softmax(a, -1),
    "cumsum": lambda a: a.cumsum(0),
    "split": lambda a: a.split(1, 0),
    "layer_norm": lambda a: torch.nn.functional.layer_norm(a, a.shape[-1:]),
}
PAIRS: dict[str, Callable[..., Any]] = {
    "matmul": torch.matmul,
    "mm": torch.mm,
    "cat0": lambda a, b: torch.cat([a, b]),
    "cat_last": lambda a, b: torch.cat([a, b], -1),
    "stack": lambda a, b: torch.stack([a, b]),
    "index_select": lambda a, b: a.index_select(0, b.long().flatten()[:2].clamp(min=0)),
}


@pytest.fixture(autouse=True)
def _stock_cache_restored():
    """The worlds swap stock's class-level cache dict; put the real one back."""
    cache = FakeTensorMode.cache
    yield
    FakeTensorMode.cache = cache


def _quiet(fn: Callable[[], Any]) -> tuple[bool, Any]:
    try:
        return True, fn()
    except Exception as e:  # noqa: BLE001 - stock's errors are part of the result
        return False, e


def _device(t: torch.Tensor) -> torch.device:
    return t.fake_device if isinstance(t, FakeTensor) else t.device


def _clear_shape_env_method_caches() -> None:
    """Stock's lru-cached ShapeEnv methods (``_maybe_evaluate_static`` and others)
    are shared by every ShapeEnv of the process and cleared only when the calling
    ShapeEnv's version counter differs from the last caller's. Interleaving two
    worlds therefore gives each a cache history a single-world run would not have:
    two *stock* worlds fed the same program disagree on which known guards get
    added again. Each call starts from an empty cache, in both worlds alike."""
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    for v in vars(ShapeEnv).values():
        clear = getattr(v, "cache_clear", None)
        if clear is not None:
            clear()


@dataclass
class World:
    """One side of the comparison: two modes (and their ShapeEnv when symbolic) and
    the pool of values made so far, in the order both worlds share."""

    fast: bool
    symbolic: bool
    real_inputs: bool = False  # modes allow non-fake inputs; the pool gets real tensors
    modes: list = field(default_factory=list)
    pool: list = field(default_factory=list)
    # Stock's class-level dispatch cache, one per world: stock's results depend on
    # its cache's history (an in-place op that resizes `self` resizes on a miss, not
    # on a hit), so each world sees only its own calls.
    stock_cache: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        env = ShapeEnv() if self.symbolic else None
        self.modes = [FakeTensorMode(shape_env=env, allow_non_fake_inputs=self.real_inputs)
                      for _ in range(2)]

    @contextlib.contextmanager
    def active(self):
        if self.fast:
            fastfake.install()
        else:
            fastfake.uninstall()
        FakeTensorMode.cache = self.stock_cache
        yield

    def make(self, mode_idx: int, shape: tuple, stride: tuple | None, dtype, device: str,
             requires_grad: bool) -> Any:
        with self.active():
            if mode_idx == 2:  # a real tensor (each world its own, same metadata and values)
                t = _zeros(shape, stride, dtype)
                if requires_grad and (dtype.is_floating_point or dtype.is_complex):
                    t.requires_grad_(True)
                return t
            mode = self.modes[mode_idx]
            if self.symbolic:
                real = _zeros(shape, stride, dtype)
                ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * len(shape))
                # A named source, as Dynamo / make_fx / export give: without one, the
                # converter names the symbols' source after its memo's current length,
                # which moves with when earlier real tensors die (refcount and GC
                # timing differ between the worlds) and so decides symbol reuse.
                t = mode.from_tensor(real, symbolic_context=ctx, source=ConstantSource(f"t{len(self.pool)}"))
            else:
                with mode:
                    t = (torch.empty(shape, dtype=dtype, device=device) if stride is None
                         else torch.empty_strided(shape, stride, dtype=dtype, device=device))
            # Not on fake cuda: stock aborts (autograd's InputMetadata asks for the cuda
            # device guard, which a CPU-only build lacks) as soon as such a leaf is used.
            if requires_grad and device == "cpu" and (dtype.is_floating_point or dtype.is_complex):
                t.requires_grad_(True)
        return t

    def call(self, mode_idx: int, fn: Callable[..., Any], args: tuple) -> tuple[bool, Any]:
        if self.symbolic:
            _clear_shape_env_method_caches()
        with self.active(), self.modes[mode_idx]:
            return _quiet(lambda: fn(*args))

    def describe(self, ok: bool, value: Any, inputs: tuple) -> Any:
        fastfake.uninstall()  # describe with stock's own properties
        if not ok:  # object addresses in messages (e.g. two modes) differ by world
            return parity.error_outcome(value)
        desc = parity.describe_value(value, list(inputs), self.modes[0])
        if self.symbolic:
            desc["shape_env"] = parity.shape_env_fields(self.modes[0].shape_env)
        return desc


class Twin:
    """The two worlds fed the same sequence; each step is recorded for the report."""

    def __init__(self, symbolic: bool, real_inputs: bool = False) -> None:
        self.symbolic = symbolic
        self.real_inputs = real_inputs
        self.stock = World(False, symbolic, real_inputs)
        self.fast = World(True, symbolic, real_inputs)
        self.program: list[str] = []

    def _check(self, what: str, rs: tuple, rf: tuple, s_in: tuple, f_in: tuple) -> None:
        a = self.stock.describe(*rs, s_in)
        b = self.fast.describe(*rf, f_in)
        if a != b:
            out: list[str] = []
            parity._diff(a, b, "result", out)
            prog = "\n  ".join(self.program)
            inputs = "\n  ".join(
                f"{type(t).__name__}{tuple(t.shape)} stride={t.stride()} {t.dtype} {_device(t)} "
                f"requires_grad={t.requires_grad}" if isinstance(t, torch.Tensor) else repr(t)
                for t in s_in
            )
            raise AssertionError(
                f"fastfake differs from stock at step {len(self.program)} ({what}):\n  "
                + "\n  ".join(out[:8])
                + f"\ninputs (stock world):\n  {inputs}"
                + f"\nprogram ({'symbolic' if self.symbolic else 'static'}):\n  {prog}"
            )

    def _keep(self, rs: tuple, rf: tuple) -> list[int]:
        """Tensor outputs join both pools; returns their handles."""
        if not (rs[0] and rf[0]):
            return []
        ls = optree.tree_leaves(rs[1], none_is_leaf=True)
        lf = optree.tree_leaves(rf[1], none_is_leaf=True)
        handles = []
        for s, f in zip(ls, lf):
            if isinstance(s, torch.Tensor) and isinstance(f, torch.Tensor):
                self.stock.pool.append(s)
                self.fast.pool.append(f)
                handles.append(len(self.stock.pool) - 1)
        return handles

    def new(self, mode_idx: int, shape: tuple, stride: tuple | None, dtype, device: str,
            requires_grad: bool) -> int | None:
        if self.symbolic or mode_idx == 2:
            device = "cpu"
        self.program.append(
            f"t{len(self.stock.pool)} = new(mode={'real' if mode_idx == 2 else mode_idx}, shape={shape}, stride={stride}, "
            f"{dtype}, {device}, requires_grad={requires_grad})"
        )
        rs = _quiet(lambda: self.stock.make(mode_idx, shape, stride, dtype, device, requires_grad))
        rf = _quiet(lambda: self.fast.make(mode_idx, shape, stride, dtype, device, requires_grad))
        self._check("new", rs, rf, (), ())
        handles = self._keep(rs, rf)
        return handles[0] if handles else None

    def mixes_devices(self, handles: list[int]) -> bool:
        """Stock itself aborts the process (an uncaught c10::Error: "PyTorch is not
        linked with support for cuda devices") on e.g. matmul of a fake cuda tensor
        with a cpu tensor on a CPU-only build: such calls are not generated for the
        non-pointwise ops."""
        return len({str(_device(self.stock.pool[h])) for h in handles}) > 1

    def autograd_on_cuda(self, handles: list[int]) -> bool:
        """Stock aborts the process when autograd records a fake cuda tensor on a
        CPU-only build (InputMetadata asks for the cuda device guard): calls that
        would do so are not generated."""
        ts = [self.stock.pool[h] for h in handles]
        return any(t.requires_grad for t in ts) and any(_device(t).type == "cuda" for t in ts)

    def step(self, mode_idx: int, name: str, fn: Callable[..., Any], handles: list[int],
             extra: tuple = ()) -> list[int]:
        if self.autograd_on_cuda(handles):
            return []
        s_in = tuple(self.stock.pool[h] for h in handles) + extra
        f_in = tuple(self.fast.pool[h] for h in handles) + extra
        self.program.append(
            f"{name}(mode={mode_idx}, " + ", ".join([*(f"t{h}" for h in handles), *map(repr, extra)])
            + f") -> t{len(self.stock.pool)}.."
        )
        rs = self.stock.call(mode_idx, fn, s_in)
        rf = self.fast.call(mode_idx, fn, f_in)
        self._check(name, rs, rf, s_in, f_in)
        return self._keep(rs, rf)

    def clear_caches(self) -> None:
        self.program.append("FakeTensorMode.cache_clear()")
        for world in (self.stock, self.fast):
            with world.active():
                FakeTensorMode.cache_clear()  # installed: stock's and fastfake's

    def forget(self) -> None:
        self.program.append("forget learned signatures")
        fastfake._C.forget_signatures()


def _zeros(shape: tuple, stride: tuple | None, dtype) -> torch.Tensor:
    """A real tensor with defined values: what a conversion reads of them (a 0-d
    tensor's value becomes its item() memo unless it is NaN or inf) must not
    depend on uninitialised memory, which differs between the two worlds."""
    t = torch.empty(shape, dtype=dtype) if stride is None else torch.empty_strided(shape, stride, dtype=dtype)
    return t.zero_()


@contextlib.contextmanager
def tight_bounds(signatures: int, entries: int):
    """Small signature limit and result-cache bound so that limits and eviction
    run within a short program (restored afterwards)."""
    old = (_install.MAX_SIGNATURES_PER_OP, _install.CACHE_MAX_ENTRIES, _install.CACHE_MAX_BYTES)
    # the byte bound: about a dozen entries, so byte eviction runs as well
    _install.MAX_SIGNATURES_PER_OP, _install.CACHE_MAX_ENTRIES, _install.CACHE_MAX_BYTES = (
        signatures, entries, 16 << 10)
    fastfake.uninstall()
    try:
        fastfake.install()
        yield
    finally:
        _install.MAX_SIGNATURES_PER_OP, _install.CACHE_MAX_ENTRIES, _install.CACHE_MAX_BYTES = old
        fastfake.uninstall()
        fastfake.install()
        fastfake.uninstall()


# ---------------------------------------------------------------------------
# Random arguments shared by both drivers
# ---------------------------------------------------------------------------

SHAPES = [(4, 3), (1, 3), (4, 1), (16, 1), (2, 3, 4), (2, 1, 4), (0, 3), (1,), (3,), (), (2, 2, 2, 2),
          (1, 1)]


def _stride_for(shape: tuple, kind: int) -> tuple | None:
    """None (contiguous), a transposed layout, or size-1 dims with odd strides."""
    if kind == 0 or len(shape) < 2:
        return None
    if kind == 1:  # column-major
        strides, acc = [], 1
        for s in shape:
            strides.append(acc)
            acc *= max(s, 1)
        return tuple(strides)
    # size-1 dims get stride 1 (like the lerp bf16 [16, 1] (1, 1) case)
    cont = torch.empty(shape).stride() if 0 not in shape else tuple(1 for _ in shape)
    return tuple(1 if s == 1 else c for s, c in zip(shape, cont))


# How the long driver picks a call: (upper bound of the draw, table), in order;
# above the last bound: cache_clear() or forgetting learned signatures.
CATEGORIES = [(0.30, BINARY), (0.42, UNARY), (0.52, INPLACE), (0.72, VIEWS), (0.85, OTHER), (0.995, PAIRS)]
ARITY = {id(BINARY): 2, id(UNARY): 1, id(INPLACE): 2, id(VIEWS): 1, id(OTHER): 1, id(PAIRS): 2}

# Most tensors come from a small universe, so that signatures and cache keys
# repeat as they do in real programs (learned state is reused, not only made).
COMMON_SHAPES = [(4, 3), (1, 3), (4, 1), (2, 3, 4)]
COMMON_DTYPES = [torch.float32, torch.float32, torch.bfloat16, torch.int64]


def random_steps(twin: Twin, rng: random.Random, n: int) -> None:
    """The long seeded driver."""
    live: list[int] = []
    recent: list[tuple] = []
    for _ in range(n):
        r = rng.random()
        if recent and r < 0.2:
            # the same call again, on the same values (hits; in-place ops again)
            mode_idx, name, fn, handles, extra = rng.choice(recent)
            live.extend(twin.step(mode_idx, name, fn, handles, extra))
            continue
        if r < 0.32 or len(live) < 3:
            common = rng.random() < 0.75
            shape = rng.choice(COMMON_SHAPES if common else SHAPES)
            dtype = rng.choice(COMMON_DTYPES if common else DTYPES)
            if twin.real_inputs and rng.random() < 0.35:
                mode_idx = 2  # a real tensor (a weight of a real model)
            else:
                mode_idx = rng.randrange(2) if rng.random() < 0.05 else 0
            h = twin.new(mode_idx, shape,
                         _stride_for(shape, rng.randrange(3)), dtype,
                         "cuda" if rng.random() < 0.2 else "cpu", rng.random() < 0.2)
            if h is not None:
                live.append(h)
            continue
        mode_idx = 0 if rng.random() < 0.97 else 1

        def call(name, fn, handles, extra=()):
            recent.append((mode_idx, name, fn, handles, extra))
            if len(recent) > 30:
                recent.pop(0)
            return twin.step(mode_idx, name, fn, handles, extra)

        a = rng.choice(live)
        b = a if rng.random() < 0.3 else rng.choice(live)
        kind = rng.random()
        table = next((t for bound, t in CATEGORIES if kind < bound), None)
        if table is not None:
            name = rng.choice(list(table))
            if table is BINARY and rng.random() < 0.25:
                out = call(name, table[name], [a], (rng.choice(SCALARS),))
            elif table is PAIRS and twin.mixes_devices([a, b]):
                out = []
            else:
                out = call(name, table[name], [a, b][: ARITY[id(table)]])
        elif kind < 0.998:
            twin.clear_caches()
            out = []
        else:
            twin.forget()
            out = []
        live.extend(out)
        if len(live) > 40:  # keep a working set; old values stay alive in the pools
            del live[: len(live) - 40]


def _served(stats: dict[str, int]) -> int:
    return stats["elementwise.hit"] + stats["cache.hit"]


@pytest.mark.parametrize("symbolic", [False, True], ids=["static", "symbolic"])
@pytest.mark.parametrize("seed", range(3))
def test_long_random_sequences(seed, symbolic):
    fastfake.reset_stats()
    twin = Twin(symbolic)
    random_steps(twin, random.Random(1000 * seed + symbolic), 1500)
    s = fastfake.stats()
    if not symbolic or _compat.shape_env_counts_replacements():
        # (torch 2.9: the symbolic cache is off, every symbolic call is stock's)
        assert _served(s) > 300, f"the fast paths served too little to prove anything: {s}"


@pytest.mark.parametrize("seed", range(2))
def test_long_random_sequences_real_inputs(seed):
    """allow_non_fake_inputs=True with real tensors in the pool (converted by each
    mode's own converter, as stock converts them)."""
    fastfake.reset_stats()
    twin = Twin(False, real_inputs=True)
    random_steps(twin, random.Random(50 + seed), 1500)
    s = fastfake.stats()
    assert s["real_inputs.converted"] > 40 and _served(s) > 300, s


@pytest.mark.parametrize("seed", range(2))
def test_long_random_sequences_tight_bounds(seed):
    """Signature limit and LRU eviction hit again and again in one sequence."""
    fastfake.reset_stats()
    with tight_bounds(signatures=3, entries=16):
        twin = Twin(False)
        random_steps(twin, random.Random(7 + seed), 1200)
        s = fastfake.stats()
    assert s["cache.evict"] > 0 and s["elementwise.fallback.signature_limit"] > 0, s
    assert _served(s) > 100, s


# ---------------------------------------------------------------------------
# The hypothesis state machine (shrinks a failing sequence)
# ---------------------------------------------------------------------------


class FakeTensorMachine(RuleBasedStateMachine):
    symbolic = False
    tensors = Bundle("tensors")

    def __init__(self) -> None:
        super().__init__()
        self.twin = Twin(self.symbolic)

    @initialize(target=tensors, shape=st.sampled_from(SHAPES), dtype=st.sampled_from(DTYPES[:3]))
    def first(self, shape, dtype):
        return self.twin.new(0, shape, None, dtype, "cpu", False)

    @rule(target=tensors, shape=st.sampled_from(SHAPES), layout=st.integers(0, 2),
          dtype=st.sampled_from(DTYPES), device=st.sampled_from(DEVICES), rg=st.booleans(),
          mode_idx=st.sampled_from([0, 0, 0, 1]))
    def new(self, shape, layout, dtype, device, rg, mode_idx):
        return self.twin.new(mode_idx, shape, _stride_for(shape, layout), dtype, device, rg)

    def _step(self, name, fn, handles, extra=()):
        if any(h is None for h in handles):
            return []
        return self.twin.step(0, name, fn, list(handles), extra)

    @rule(target=tensors, a=tensors, b=tensors, name=st.sampled_from(sorted(BINARY)))
    def binary(self, a, b, name):
        out = self._step(name, BINARY[name], [a, b])
        return out[0] if out else None

    @rule(target=tensors, a=tensors, s=st.sampled_from(SCALARS), name=st.sampled_from(sorted(BINARY)))
    def binary_scalar(self, a, s, name):
        out = self._step(name, BINARY[name], [a], (s,))
        return out[0] if out else None

    @rule(target=tensors, a=tensors, name=st.sampled_from(sorted(UNARY)))
    def unary(self, a, name):
        out = self._step(name, UNARY[name], [a])
        return out[0] if out else None

    @rule(a=tensors, b=tensors, name=st.sampled_from(sorted(INPLACE)))
    def inplace(self, a, b, name):
        self._step(name, INPLACE[name], [a, b])

    @rule(target=tensors, a=tensors, name=st.sampled_from(sorted(VIEWS)))
    def view(self, a, name):
        out = self._step(name, VIEWS[name], [a])
        return out[0] if out else None

    @rule(target=tensors, a=tensors, name=st.sampled_from(sorted(OTHER)))
    def other(self, a, name):
        out = self._step(name, OTHER[name], [a])
        return out[0] if out else None

    @rule(target=tensors, a=tensors, b=tensors, name=st.sampled_from(sorted(PAIRS)))
    def pair(self, a, b, name):
        if a is None or b is None or self.twin.mixes_devices([a, b]):
            return None
        out = self._step(name, PAIRS[name], [a, b])
        return out[0] if out else None

    @rule()
    def clear(self):
        self.twin.clear_caches()

    @invariant()
    def caches_bounded(self):
        assert fastfake._C.cache_size() <= _install.CACHE_MAX_ENTRIES
        assert fastfake._C.cache_bytes() <= _install.CACHE_MAX_BYTES


class SymbolicFakeTensorMachine(FakeTensorMachine):
    symbolic = True


_MACHINE_SETTINGS = settings(
    max_examples=40,
    stateful_step_count=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
    print_blob=True,
)


def test_state_machine_static():
    FakeTensorMachine.TestCase.settings = _MACHINE_SETTINGS
    FakeTensorMachine.TestCase().runTest()


def test_state_machine_symbolic():
    SymbolicFakeTensorMachine.TestCase.settings = _MACHINE_SETTINGS
    SymbolicFakeTensorMachine.TestCase().runTest()


@pytest.mark.parametrize("kind", ["dtype", "device"])
def test_the_comparison_catches_a_wrong_result(kind):
    """The twin comparison is not vacuous: a wrong dtype, or a wrong device stored
    on a served result, fails it and prints the program."""
    twin = Twin(False)
    a = twin.new(0, (4, 3), None, torch.float32, "cpu", False)
    twin.step(0, "add", BINARY["add"], [a, a])  # admitted: learned from stock
    fastfake._C._inject_fault(1, kind)
    with pytest.raises(AssertionError, match=r"(?s)differs from stock at step 3 \(add\).*program"):
        twin.step(0, "add", BINARY["add"], [a, a])


def test_size1_layouts_are_not_one_class():
    """Found by the long sequences: relu on a [1, 3] tensor with strides (1, 1)
    taught a stride rule that then gave (1, 1) for a [3, 1] tensor with strides
    (1, 3), where stock keeps (1, 3). Size-1 layouts are keyed exactly."""
    cases = [((1, 3), (1, 1)), ((3, 1), (1, 3)), ((3, 1), (1, 1)), ((1, 3), (3, 3)), ((2, 1, 3), (3, 3, 1)),
             ((2, 1, 3), (3, 1, 1))]

    def run():
        out = []
        with FakeTensorMode():
            for shape, stride in cases:
                for op in (torch.relu, torch.neg, lambda t: t * 2, lambda t: torch.lerp(t, t, 0.3)):
                    x = torch.empty_strided(shape, stride, dtype=torch.float64)
                    out.append((shape, stride, op(x).stride()))
        return out

    fastfake.uninstall()
    stock = run()
    fastfake.install()
    assert run() == stock and run() == stock
    assert fastfake.stats()["elementwise.hit"] > 0
