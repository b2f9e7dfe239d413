"""install() / uninstall() / enabled(): patching torch and putting it back exactly."""
from __future__ import annotations

import contextlib
import logging
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from fastfake import _C
from fastfake.core import accelerations as _accelerations
from fastfake.core import switches as _switches
from fastfake.common import compat as _compat
from fastfake.convert import converter as _convert
from fastfake.cache import facts as _facts
from fastfake.cache import free_symbols as _free_symbols
from fastfake.tracing import functional as _functional
from fastfake.cache import item_memo as _item_memo
from fastfake.common import originals as _originals
from fastfake.cache import portable as _portable
from fastfake.elementwise import registry as _registry
from fastfake.cache import rerun as _rerun
from fastfake.core import selftest_store as _selftest_store
from fastfake.stock import cache as _stock_cache
from fastfake.stock import key as _stock_key
from fastfake.store import files as _store_files
from fastfake.store import records as _store
from fastfake.symbolic import symnode_memo as _symnode
from fastfake.tracing import fake_prop as _fake_prop
from fastfake.symbolic import symnode_expr as _symnode_expr
from fastfake.common.compat import SUPPORTED_TORCH_VERSIONS
from fastfake.common.env import flag as _env_flag

log = logging.getLogger("fastfake")

# Upper bound on learned signatures per pointwise overload (see csrc/elementwise/elementwise.cpp).
MAX_SIGNATURES_PER_OP = 1024
# Upper bound on result-cache entries (LRU, see csrc/cache/cache.cpp).
CACHE_MAX_ENTRIES = 1 << 16
#: ... and by the bytes its entries hold (fastfake._C.cache_bytes(), estimated)
CACHE_MAX_BYTES = 64 << 20


@dataclass(frozen=True)
class Options:
    elementwise: bool = True
    cache: bool = True
    device: bool = True
    crosscheck: bool = False


class _State:
    options: Options | None = None  # None: not installed; else what is in force
    why: dict[str, str] = {}  # per acceleration, "on" or why install() left it off
    requested: Options | None = None  # what install() was last asked for
    selftest: _selftest_store.Report | None = None  # once per process
    originals = _originals.ORIGINALS  # (fastfake/common/originals.py)
    setup_done = False
    warned_version = False


def _unpatched(cls: type, name: str) -> object | None:
    """The class attribute, seen through fastfake's own patch objects."""
    current = cls.__dict__.get(name)
    if current is not None and type(current).__module__ == _C.__name__:
        return _State.originals.get((cls, name))
    return current


def _torch_internals():
    """The stock objects fastfake replaces; raises a clear error if they moved."""
    try:
        from torch._subclasses import fake_tensor as ft
        from torch.utils import _stats
    except ImportError as e:
        raise RuntimeError(
            f"fastfake: this torch ({torch.__version__}) has no torch._subclasses.fake_tensor; "
            f"supported versions: {', '.join(SUPPORTED_TORCH_VERSIONS)}"
        ) from e
    missing = []
    mode_dispatch = _unpatched(ft.FakeTensorMode, "__torch_dispatch__")
    device_prop = _unpatched(ft.FakeTensor, "device")
    if mode_dispatch is None:
        missing.append("FakeTensorMode.__torch_dispatch__")
    if not isinstance(device_prop, property):
        missing.append("FakeTensor.device (property)")
    for name in ("dispatch", "in_kernel_invocation"):
        if not hasattr(ft.FakeTensorMode, name):
            missing.append(f"FakeTensorMode.{name}")
    if not hasattr(_stats, "simple_call_counter"):
        missing.append("torch.utils._stats.simple_call_counter")
    if missing:
        raise RuntimeError(
            f"fastfake cannot install on torch {torch.__version__}: missing "
            f"{', '.join(missing)}; supported versions: {', '.join(SUPPORTED_TORCH_VERSIONS)}"
        )
    return ft, _stats


def _check_version() -> None:
    """A release not in SUPPORTED_TORCH_VERSIONS is said once; the self-test then
    decides what runs there."""
    if _compat.torch_release() not in SUPPORTED_TORCH_VERSIONS and not _State.warned_version:
        _State.warned_version = True
        log.warning(
            "fastfake %s is tested with torch %s, not %s; the install-time self-test "
            "decides which features run here (fastfake.selftest_report()).",
            __import__("fastfake").__version__,
            ", ".join(SUPPORTED_TORCH_VERSIONS),
            torch.__version__,
        )




def _pre_dispatch_infra_modes() -> list | None:
    """The list torch._ops keeps the pre-dispatch [PROXY, FUNCTIONAL] modes in
    (read by C++ for the 'proxy tracing active' part of the cache key)."""
    state = torch._ops._mode_stack_state_for_pre_dispatch
    modes = vars(state).get("_ModeStackStateForPreDispatch__infra_modes")
    if not isinstance(modes, list):
        raise RuntimeError(
            f"fastfake cannot install on torch {torch.__version__}: the pre-dispatch "
            "mode stack moved; supported versions: " + ", ".join(SUPPORTED_TORCH_VERSIONS)
        )
    return modes


def _setup() -> None:
    if _State.setup_done:
        return
    ft, stats_mod = _torch_internals()
    from torch.fx.experimental.sym_node import SymNode

    from fastfake.cache.learn import _VIDS, capture_begin, learn, still_valid, sym_vid
    from fastfake.parity.crosscheck import check

    _C.setup(
        ft.FakeTensor,
        ft.FakeTensorMode,
        _originals.original(ft.FakeTensorMode, "__torch_dispatch__"),
        stats_mod.simple_call_counter,
        check,
        _compat.fake_dict_template(),
        torch.device("meta"),
        vars(torch.compiler),
        _compat.export_tracks_fake_tensor_leaks,
        learn,
        torch._ops.OpOverload,
        _pre_dispatch_infra_modes(),
        torch.ops.prim.device.default,
        _compat.fake_device_attr(),
    )
    # (values already interned are looked up in C++, in the hook's own dict)
    _C.setup_symbolic(SymNode, torch.SymInt, sym_vid, still_valid, capture_begin, _VIDS)
    # (a ShapeEnv's settings keyed by their fields where their equality is proven
    # to be the fields': csrc/cache/keys.cpp)
    from torch.fx.experimental.symbolic_shapes import ShapeEnvSettings

    fields = _compat.settings_fields(ShapeEnvSettings)
    _C.set_settings_fields(*((ShapeEnvSettings, *fields) if fields else (None, (), None, None)))
    # (a recipe's new SymNodes copied from the first one's instance dict, where
    # SymNode's constructor is one fastfake knows: csrc/cache/rebuild.cpp)
    init = vars(SymNode).get("__init__")
    _C.set_symnode_template(init if _compat.symnode_init_source_digest(init) in _compat.SYMNODE_INIT_SOURCES else None)
    _C.set_symnode_kinds(*_compat.symnode_kind_methods())
    _portable.setup(_C)
    _rerun.setup(_C)
    _item_memo.setup()
    _symnode.setup(_C)
    if _fake_prop.available():
        _fake_prop.setup()
    if _symnode_expr.available():
        _symnode_expr.setup()
    from fastfake.convert.real_inputs import policy

    _C.setup_real_inputs(torch.Tensor, torch.nn.Parameter, ft.fake_tensor_tls, policy)
    _convert.setup()
    _State.setup_done = True


def install(
    *,
    elementwise: bool = True,
    cache: bool = True,
    device: bool = True,
    crosscheck: bool = False,
) -> None:
    """Accelerate FakeTensorMode in this process.

    Idempotent; calling it again with other options reconfigures. Every
    acceleration is an entry of the one table (fastfake/core/accelerations.py,
    ``python -m fastfake accelerations``); each rides on one of the options:

    * ``elementwise``: pointwise ATen ops are computed in C++ (C-level
      ``FakeTensorMode.__torch_dispatch__``).
    * ``cache``: per-op result cache in C++ for every other op (static shapes, and
      symbolic shapes per ShapeEnv, records served in other ShapeEnvs, repeats of
      calls stock reruns), filled from stock's own dispatch-cache entries; the
      ``FunctionalTensor`` storage-size memo; stock's cache key built in C++.
    * with either of them: snapshots (``fast_detach``), the converter, SymNode
      arithmetic, ``SymNode.expr`` / ``maybe_as_int``, ``FakeTensorProp`` nodes,
      real inputs under ``allow_non_fake_inputs``.
    * ``device``: ``FakeTensor.device`` is served by a C-level descriptor.
    * ``crosscheck`` (or ``FASTFAKE_CROSSCHECK=1``): every fast result is
      recomputed by stock and compared; a mismatch raises
      :class:`fastfake.CrosscheckError`.

    An acceleration is on when its option is, ``FASTFAKE_DISABLE`` does not name it
    (fastfake/core/switches.py), the self-test passed it on this release, and what
    it needs is on (:func:`decisions` says which are). ``FASTFAKE_DISABLE=1`` makes
    this a logged no-op.

    The first ``install()`` in a process runs the self-test (fastfake/core/selftest.py),
    or reads its result kept on disk for this unchanged installation
    (fastfake/core/selftest_store.py; ``FASTFAKE_CACHE_DIR`` says where,
    ``FASTFAKE_NO_SELFTEST_CACHE=1`` always runs it).
    """
    if _switches.disabled_all():
        log.warning("fastfake.install() skipped: FASTFAKE_DISABLE=%s", _switches.raw())
        return
    crosscheck = crosscheck or _env_flag("FASTFAKE_CROSSCHECK")
    opts = Options(elementwise=elementwise, cache=cache, device=device, crosscheck=crosscheck)
    if _State.requested == opts:
        return
    _switches.check()
    _check_version()
    ft, _ = _torch_internals()
    # Setting up and self-testing run stock fake ops; stock's dispatch cache and
    # its statistics are left as they were.
    with _stock_cache.stock_state_preserved(), _stock_cache.not_counted():
        _setup()
        if _State.selftest is None:
            _State.selftest = _run_selftest(ft)
        # stock's cache key built in C++ (proved with the self-test, and kept with it)
        if opts.cache and not _switches.disabled(_accelerations.BY_NAME["stock_key"]):
            _stock_key.prove_once(_State.selftest.proofs.get("stock_key"))
    requested = opts
    opts = _proven(opts, _State.selftest)
    if opts.elementwise and ft.FakeTensorConfig.debug:
        log.warning("fastfake: TORCH_FAKE_TENSOR_DEBUG is set; the elementwise path stays off")
        opts = Options(False, opts.cache, opts.device, opts.crosscheck)
    why = decide(opts, _State.selftest, debug=bool(ft.FakeTensorConfig.debug))
    on = {name: reason == "on" for name, reason in why.items()}
    opts = Options(on["elementwise"], on["cache"], on["device"], opts.crosscheck)
    _set_config(
        elementwise=opts.elementwise,
        cache=opts.cache,
        crosscheck=opts.crosscheck,
        cache_symbolic=on["cache_symbolic"],
        real_inputs=on["real_inputs"],
    )
    _apply(ft, opts)
    for acc in _accelerations.ACCELERATIONS:
        if acc.apply:
            _accelerations.resolve(acc.apply)(on[acc.name], opts.crosscheck)
    _State.options = opts
    _State.why = why
    _State.requested = requested


def available(acc: _accelerations.Acceleration) -> bool:
    """This release has what ``acc`` stands in for (and what it needs has too)."""
    return all(
        not a.available or _accelerations.resolve(a.available)()
        for a in map(_accelerations.BY_NAME.__getitem__, _accelerations.closure(acc.name))
    )


def decide(opts: Options, report, *, debug: bool = False) -> dict[str, str]:
    """Per acceleration, in table order, "on" or why it is off. It is on when it is
    not switched off (``FASTFAKE_DISABLE``), this release has it, it passed the
    self-test (where it has a feature), what it needs is on, and the ``install()``
    option it rides on is on."""
    base = ("elementwise", "cache", "device")  # the install() options themselves
    why: dict[str, str] = {}

    def on(name: str) -> bool:
        return why[name] == "on"

    def rides(acc: _accelerations.Acceleration) -> bool:
        if acc.name in base:
            return getattr(opts, acc.name)
        if acc.rides in base:
            return on(acc.rides)
        either = on("elementwise") or on("cache")
        return either and not (acc.rides == "plain" and debug)

    for acc in _accelerations.ACCELERATIONS:
        off = [n for n in acc.needs if not on(n)]
        if _switches.disabled(acc):
            legacy = acc.legacy if acc.legacy and _env_flag(acc.legacy) else ""
            why[acc.name] = f"switched off ({legacy or acc.switch})"
        elif not _switches.enabled(acc):
            why[acc.name] = f"off unless enabled (FASTFAKE_ENABLE={acc.name})"
        elif not available(acc):
            why[acc.name] = "not offered on this release"
        elif acc.selftest and not report.passed.get(acc.name, False):
            why[acc.name] = "self-test: " + report.failures.get(acc.name, "not run")
        elif off:
            why[acc.name] = "needs " + ", ".join(off)
        elif not rides(acc):
            why[acc.name] = f"rides on {acc.rides}, which is off"
        else:
            why[acc.name] = "on"
    return why


def explain() -> dict[str, str]:
    """Per acceleration, "on" or why ``install()`` left it off (for ``python -m
    fastfake doctor``); "not installed" for all when it is not."""
    if _State.options is None:
        return {acc.name: "not installed" for acc in _accelerations.ACCELERATIONS}
    return dict(_State.why)


def decisions() -> dict[str, bool] | None:
    """What ``install()`` turned on, per acceleration (None when not installed)."""
    return None if _State.options is None else {name: why == "on" for name, why in _State.why.items()}


def _set_config(**switches: bool) -> None:
    """The extension's switches, with the bounds every configuration keeps."""
    _C.set_config(
        max_signatures_per_op=MAX_SIGNATURES_PER_OP,
        cache_max_entries=CACHE_MAX_ENTRIES,
        cache_max_bytes=CACHE_MAX_BYTES,
        **switches,
    )


def _apply(ft, opts: Options) -> None:
    """Patch (or restore) the stock attributes as ``opts`` asks."""
    _originals.patch(
        ft.FakeTensorMode,
        "__torch_dispatch__",
        _C.make_fast_dispatch() if (opts.elementwise or opts.cache) else None,
    )
    from fastfake.cache.learn import capturing

    _originals.patch(
        ft.FakeTensorMode,
        "_output_from_cache_entry",
        capturing(_originals.original(ft.FakeTensorMode, "_output_from_cache_entry")) if opts.cache else None,
    )
    _originals.patch(
        ft.FakeTensorMode,
        "_cache_key",
        _portable.key_logger(_originals.original(ft.FakeTensorMode, "_cache_key"), _store.at_key)
        if opts.cache else None,
    )
    _originals.patch(
        ft.FakeTensorMode,
        "_cached_dispatch_impl",
        _store.dispatch_wrapper(_originals.original(ft.FakeTensorMode, "_cached_dispatch_impl"))
        if opts.cache else None,
    )
    _originals.patch(
        ft.FakeTensor,
        "device",
        _C.make_device_descriptor(_originals.original(ft.FakeTensor, "device")) if opts.device else None,
    )
    # Stock's cache statistics count the calls served here; clearing stock's cache
    # clears fastfake's (fastfake/stock/cache.py).
    serving = opts.elementwise or opts.cache
    _stock_cache.flush_at_exit()
    for name, make in (
        ("cache_info", _stock_cache.make_cache_info),
        ("cache_clear", _stock_cache.make_cache_clear),
    ):
        original = _originals.original(ft.FakeTensorMode, name)
        _originals.patch(ft.FakeTensorMode, name, make(original) if serving else None)


def _run_selftest(ft) -> _selftest_store.Report:
    """Run the self-test (once per process) with nothing of fastfake's installed
    but the feature under test; warn about every feature it turns off."""

    @contextlib.contextmanager
    def only(feature: str):
        # the feature and what it needs (fastfake/core/accelerations.py), nothing else
        on = set(_accelerations.closure(feature))
        _set_config(
            elementwise=feature == "elementwise",
            cache="cache" in on,
            crosscheck=False,
            cache_symbolic="cache_symbolic" in on,
        )
        _apply(ft, Options(elementwise=True, cache=feature != "elementwise", device=True))
        for acc in _accelerations.ACCELERATIONS:
            if acc.apply and acc.name in on:
                _accelerations.resolve(acc.apply)(True, False)
        try:
            yield
        finally:
            _all_off(ft)

    features = [a.name for a in _accelerations.ACCELERATIONS if a.selftest and available(a)]
    def run() -> _selftest_store.Report:
        # (imported only when the programs run: a result kept on disk does not need them)
        from fastfake.core import selftest as _selftest

        report = _selftest.run(only, _originals.original(ft.FakeTensor, "device"), features)
        report.proofs["stock_key"] = [_stock_key.prove_once(), _stock_key.why_disabled()]
        return report

    report = _stored_or_run(features, run)
    for feature, why in report.failures.items():
        warnings.warn(
            f"fastfake: the install-time self-test found a difference from stock on torch "
            f"{torch.__version__} in '{feature}', which stays off: {why}",
            RuntimeWarning,
            stacklevel=4,
        )
    log.info(
        "fastfake self-test (%s): %s in %.3f s", report.source, report.passed, report.seconds
    )
    return report


def _stored_or_run(features: list[str], run) -> _selftest_store.Report:
    """The result kept on disk for this installation, else ``run()``'s (then kept).
    The pointwise-op registry is handed to the extension first: read with a kept
    result, else built from torch's operator metadata and kept with the new one."""
    t0 = time.perf_counter()
    found = _selftest_store.lookup(features)
    # (the learned-record store's file is keyed on the same installation)
    _store_files.set_installation(found.parts or _selftest_store.components(features))
    table = found.pointwise  # only a hit carries one
    if table is None:
        table = _registry.pointwise_table()
    _registry.register_table(_C, table)
    if found.report is not None:
        return _selftest_store.Report.from_stored(found.report, time.perf_counter() - t0)
    report = run()
    report.store = found.keep(report.as_dict(), table)
    report.seconds = time.perf_counter() - t0
    return report


def _proven(opts: Options, report) -> Options:
    """``opts`` less what the self-test turned off; raises if nothing asked for is left."""
    ok = report.passed
    proven = Options(
        elementwise=opts.elementwise and ok.get("elementwise", False),
        cache=opts.cache and ok.get("cache", False),
        device=opts.device and ok.get("device", False),
        crosscheck=opts.crosscheck,
    )
    asked = (opts.elementwise, opts.cache, opts.device)
    if any(asked) and not any((proven.elementwise, proven.cache, proven.device)):
        raise RuntimeError(
            f"fastfake refuses to install on torch {torch.__version__}: its self-test found "
            "results that differ from stock in every feature asked for: "
            + "; ".join(f"{k}: {v}" for k, v in report.failures.items())
        )
    return proven


def _all_off(ft=None) -> None:
    """Every acceleration off (the table's hooks, last first), the stock attributes
    back, and every fast path off in C++ (bounds kept)."""
    for acc in reversed(_accelerations.ACCELERATIONS):
        if acc.apply:
            _accelerations.resolve(acc.apply)(False, False)
    if ft is not None:
        _apply(ft, Options(elementwise=False, cache=False, device=False))
    _set_config(elementwise=False, cache=False, crosscheck=False)


def uninstall() -> None:
    """Restore every patched attribute to the identical original object."""
    _stock_cache.detach()
    if _State.setup_done:
        _all_off()
    for (cls, name), original in _State.originals.items():
        if cls.__dict__.get(name) is not original:
            setattr(cls, name, original)
    _State.options = None
    _State.why = {}
    _State.requested = None


def is_installed() -> bool:
    """True while fastfake's patches are in place."""
    return _State.options is not None


@contextlib.contextmanager
def enabled(
    *,
    elementwise: bool = True,
    cache: bool = True,
    device: bool = True,
    crosscheck: bool = False,
) -> Iterator[None]:
    """``with fastfake.enabled(...):`` install for the block, then restore the
    previous state (installed with its options, or not installed), exceptions
    included."""
    previous = _State.requested
    install(elementwise=elementwise, cache=cache, device=device, crosscheck=crosscheck)
    try:
        yield
    finally:
        if previous is None:
            uninstall()
        else:
            install(**vars(previous))


def current_options() -> Options | None:
    return _State.options


def selftest_report() -> dict | None:
    """What the install-time self-test found in this process (None before the first
    ``install()``): per feature passed / failure message / results it served, the
    torch release and the one the extension was built for, and its cost in seconds
    in this process; ``source`` is ``"run"`` or ``"disk"`` (the result kept for this
    unchanged installation, :mod:`fastfake.core.selftest_store`) and ``store`` what
    happened to the kept result (``hit``, ``written``, ``write_failed``,
    ``unreadable``, ``off``, ``fault``)."""
    return None if _State.selftest is None else _State.selftest.as_dict()


def cache_clear() -> None:
    """Drop every entry of fastfake's result cache (stock's is untouched;
    ``FakeTensorMode.cache_clear()`` clears both), the FunctionalTensor
    storage sizes memoised per ShapeEnv, the memoised free symbols and the
    ShapeEnvs' filtered axioms and divisibility facts."""
    _C.cache_clear()
    _C.symnode_memo_clear()
    _C.symnode_expr_clear()
    _functional.clear()
    _free_symbols.clear()
    _facts.clear()
