"""The one table of fastfake's accelerations.

Every acceleration is one entry here, with the same fields: what in torch it
replaces, how it is proven on a release, the self-test feature that proves it at
``install()`` (and the counters that show it served), the prefix of its counters, its
off switch, what it needs, and how ``crosscheck=True`` verifies it. The self-test's
feature list, ``install()``'s switches, the command line's report and the README's
table are read from here (``python -m fastfake accelerations`` prints the table).
PyTorch's ``fake_impls.py``, rules registered into one table, is the model.

Pure data: imports nothing of fastfake.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Acceleration:
    name: str  # the self-test feature (or the install step, where it has none)
    title: str  # the README's name for it
    replaces: str  # what in torch it stands in for
    proof: str  # why its result is stock's on a release
    served: tuple[str, ...]  # the counters that show it served a call
    counters: str  # prefix of its counters in fastfake.stats()
    switch: str  # off switch: an environment variable, or an install() keyword
    needs: tuple[str, ...] = ()  # accelerations it builds on
    crosscheck: str = "the served result against stock's, field by field"
    selftest: bool = True  # proven by its own self-test feature at install()
    module: str = ""  # where it lives

    @property
    def env_switch(self) -> str | None:
        return self.switch if self.switch.startswith("FASTFAKE_") else None


ACCELERATIONS: tuple[Acceleration, ...] = (
    Acceleration(
        "elementwise", "elementwise path",
        "`FakeTensorMode.__torch_dispatch__` for pointwise ATen overloads (static shapes)",
        "dtype and errors from stock's first call per signature; the stride rule that reproduces stock's result, checked per signature",
        ("elementwise.hit",), "elementwise.", "install(elementwise=False)",
        module="csrc/elementwise*.cpp, fastfake/_registry.py"),
    Acceleration(
        "cache", "result cache",
        "stock's dispatch-cache hit (`_cached_dispatch_impl` → `_output_from_cache_entry`)",
        "learned from stock's own cache entry; a hit builds what stock's hit builds",
        ("cache.hit",), "cache.", "install(cache=False)",
        module="csrc/cache*.cpp, fastfake/_cache.py"),
    Acceleration(
        "cache_symbolic", "symbolic result cache",
        "stock's dispatch-cache hit with symbolic shapes, per ShapeEnv",
        "stock's entry, valid while the replacements it was read under hold",
        ("cache.symbolic.hit",), "cache.symbolic.", "FASTFAKE_NO_SYMBOLIC_CACHE",
        needs=("cache",), module="csrc/cache*.cpp"),
    Acceleration(
        "stock_key", "stock's cache key in C++",
        "`FakeTensorMode._cache_key`",
        "compared with stock's key at install on every release",
        ("stock_key.built",), "stock_key.", "FASTFAKE_NO_STOCK_KEY",
        needs=("cache",), selftest=False, crosscheck="proved at install()",
        module="csrc/stock_key.cpp, fastfake/_stock_key.py"),
    Acceleration(
        "cache_portable", "records served in other ShapeEnvs",
        "a new ShapeEnv's first call (stock's miss) and its nested calls",
        "the signature of what static evaluation reads; stock's cache effects repeated; the kernel's ShapeEnv evaluations replayed",
        ("cache.symbolic.portable.served",), "cache.symbolic.portable.", "FASTFAKE_NO_PORTABLE",
        needs=("cache_symbolic",),
        crosscheck="the result, the ShapeEnv delta, and no evaluation stock's kernel makes that was not replayed",
        module="csrc/cache_portable*.cpp, fastfake/_portable.py, fastfake/_evals.py"),
    Acceleration(
        "cache_rerun", "repeats stock reruns",
        "calls stock never caches (`_unsafe_view` on 2.13 / 2.14)",
        "fingerprint and signature unchanged by the earlier call; its evaluations replayed",
        ("cache.symbolic.rerun.served",), "cache.symbolic.rerun.", "FASTFAKE_NO_RERUN",
        needs=("cache_symbolic",), module="csrc/cache_rerun.cpp, fastfake/_rerun.py"),
    Acceleration(
        "cache_rerun_scalar", "pointwise repeats with a SymFloat",
        "pointwise calls with a SymFloat argument (stock never caches them)",
        "as the repeats above",
        ("cache.symbolic.rerun.served_scalar",), "cache.symbolic.rerun.", "FASTFAKE_NO_RERUN_SCALAR",
        needs=("cache_symbolic",), module="csrc/cache_rerun.cpp, fastfake/_rerun.py"),
    Acceleration(
        "cache_item_memo", "`.item()` repeats",
        "`.item()` answered from the tensor's item memo",
        "where stock's dispatch would answer from the same memo",
        ("cache.item_memo.served",), "cache.item_memo.", "FASTFAKE_NO_ITEM_MEMO",
        needs=("cache",), module="csrc/item_memo.cpp, fastfake/_item_memo.py"),
    Acceleration(
        "device", "`FakeTensor.device`",
        "the Python property",
        "self-test",
        ("device.fast",), "device.", "install(device=False)",
        module="csrc/dispatch.cpp"),
    Acceleration(
        "functional_storage", "FunctionalTensor storage size",
        "the storage-size computation of AOTAutograd's `FunctionalTensor` wrappers",
        "read off a wrapper stock builds; replayed into proxy tracing",
        ("functional.storage.hit", "functional.storage.replayed"), "functional.storage.",
        "FASTFAKE_NO_FUNCTIONAL_MEMO", needs=("cache",), module="fastfake/_functional.py"),
    Acceleration(
        "detach", "snapshots",
        "`proxy_tensor.snapshot_fake` / `fast_detach`",
        "self-test",
        ("detach.fast",), "detach.", "FASTFAKE_NO_FAST_DETACH",
        module="csrc/detach.cpp, fastfake/_detach.py"),
    Acceleration(
        "convert", "converter",
        "`FakeTensorConverter.from_real_tensor` for plain CPU leaves",
        "the converter's layout checked; self-test",
        ("convert.fast",), "convert.", "FASTFAKE_NO_FAST_CONVERT",
        module="csrc/convert.cpp, fastfake/_convert.py"),
    Acceleration(
        "symnode_memo", "SymInt arithmetic",
        "`SymNode` binary ops (`binary_magic_impl`)",
        "source-identical to a proven release; self-test",
        ("symnode.memo.hit",), "symnode.memo.", "FASTFAKE_NO_SYMNODE_MEMO",
        module="csrc/symnode_memo.cpp, fastfake/_symnode.py"),
    Acceleration(
        "fake_prop", "`FakeTensorProp` nodes",
        "`FakeTensorProp.run_node`'s interpreter wrappers",
        "the stock functions it stands for are source-identical to a proven release; self-test",
        ("fake_prop.fast",), "fake_prop.", "FASTFAKE_NO_FAKE_PROP",
        module="fastfake/_fake_prop.py"),
    Acceleration(
        "symnode_expr", "`SymNode.expr`",
        "the Python property",
        "source-identical to a proven release; self-test",
        ("symnode.expr.served",), "symnode.expr.", "FASTFAKE_NO_SYMNODE_EXPR",
        module="csrc/symnode_expr.cpp, fastfake/_symnode_expr.py"),
    Acceleration(
        "symnode_int", "`SymNode.maybe_as_int`",
        "the Python method",
        "source-identical to a proven release; self-test",
        ("symnode.int.served",), "symnode.int.", "FASTFAKE_NO_SYMNODE_INT",
        module="csrc/symnode_int.cpp, fastfake/_symnode_int.py"),
    Acceleration(
        "real_inputs", "real inputs",
        "converting real tensor arguments under `allow_non_fake_inputs`",
        "the mode's own converter, as stock converts them",
        ("real_inputs.converted",), "real_inputs.", "FASTFAKE_NO_REAL_INPUTS",
        selftest=False, module="csrc/real_inputs.cpp, fastfake/_real_inputs.py"),
)

BY_NAME: dict[str, Acceleration] = {a.name: a for a in ACCELERATIONS}


def selftest_features() -> dict[str, tuple[str, ...]]:
    """Self-test feature -> the counters that show it served (fastfake._selftest)."""
    return {a.name: a.served for a in ACCELERATIONS if a.selftest}


def env_switches() -> dict[str, str]:
    """Self-test feature -> its off switch, for those with an environment switch."""
    return {a.name: a.switch for a in ACCELERATIONS if a.selftest and a.env_switch}


def markdown() -> str:
    """The README's table."""
    rows = ["| acceleration | replaces in torch | off switch | counters |", "| --- | --- | --- | --- |"]
    for a in ACCELERATIONS:
        switch = f"`{a.switch}=1`" if a.env_switch else f"`{a.switch}`"
        rows.append(f"| {a.title} | {a.replaces} | {switch} | `{a.counters}*` |")
    return "\n".join(rows)
