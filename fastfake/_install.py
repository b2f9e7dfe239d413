"""install() / uninstall() / enabled(): patching torch and putting it back exactly."""
from __future__ import annotations

import contextlib
import logging
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from . import (
    _C,
    _accelerations,
    _compat,
    _convert,
    _detach,
    _free_symbols,
    _functional,
    _item_memo,
    _originals,
    _portable,
    _registry,
    _rerun,
    _selftest,
    _selftest_store,
    _stock_cache,
    _stock_key,
    _symnode,
    _fake_prop,
    _symnode_expr,
    _symnode_int,
)
from ._compat import SUPPORTED_TORCH_VERSIONS
from ._env import flag as _env_flag

log = logging.getLogger("fastfake")

# Upper bound on learned signatures per pointwise overload (see csrc/elementwise.cpp).
MAX_SIGNATURES_PER_OP = 1024
# Upper bound on result-cache entries (LRU, see csrc/cache.cpp).
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
    requested: Options | None = None  # what install() was last asked for
    selftest: _selftest.Report | None = None  # once per process
    originals = _originals.ORIGINALS  # (fastfake/_originals.py)
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

    from ._cache import _VIDS, capture_begin, learn, still_valid, sym_vid
    from ._crosscheck import check

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
    # to be the fields': csrc/cache_keys.cpp)
    from torch.fx.experimental.symbolic_shapes import ShapeEnvSettings

    fields = _compat.settings_fields(ShapeEnvSettings)
    _C.set_settings_fields(*((ShapeEnvSettings, *fields) if fields else (None, (), None, None)))
    # (a recipe's new SymNodes copied from the first one's instance dict, where
    # SymNode's constructor is one fastfake knows: csrc/cache_rebuild.cpp)
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
    from ._real_inputs import policy

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

    Idempotent; calling it again with other options reconfigures. Patches only
    what is asked:

    * ``elementwise``: pointwise ATen ops are computed in C++ (C-level
      ``FakeTensorMode.__torch_dispatch__``).
    * ``cache``: per-op result cache in C++ for every other op (static shapes, and
      symbolic shapes per ShapeEnv), filled from stock's own dispatch-cache entries;
      also wraps ``FakeTensorMode._output_from_cache_entry`` (pass-through capture
      of the tensor stock synthesises on a symbolic miss).
      ``FASTFAKE_NO_SYMBOLIC_CACHE=1`` keeps symbolic calls out of it.
      With it, the storage size of AOTAutograd's ``FunctionalTensor`` wrappers
      over symbolic fakes is memoised per ShapeEnv (:mod:`fastfake._functional`;
      ``FASTFAKE_NO_FUNCTIONAL_MEMO=1`` turns that off).
    * with either of them, the FakeTensor snapshots make_fx and FakeTensorProp take
      of every traced value (``snapshot_fake`` -> ``fast_detach``) are built in C++
      (:mod:`fastfake._detach`; ``FASTFAKE_NO_FAST_DETACH=1`` turns that off).
    * with either of them, real tensors are converted into FakeTensors in C++
      (``FakeTensorConverter.from_real_tensor`` for plain CPU leaves:
      :mod:`fastfake._convert`; ``FASTFAKE_NO_FAST_CONVERT=1`` turns that off).
    * with either of them, SymNode binary arithmetic is memoised
      (:mod:`fastfake._symnode`; ``FASTFAKE_NO_SYMNODE_MEMO=1``), ``SymNode.expr``
      is computed in C (:mod:`fastfake._symnode_expr`; ``FASTFAKE_NO_SYMNODE_EXPR=1``)
      and so is ``SymNode.maybe_as_int`` (:mod:`fastfake._symnode_int`;
      ``FASTFAKE_NO_SYMNODE_INT=1``), and ``FakeTensorProp`` runs its nodes without the interpreter's no-op wrappers
      (:mod:`fastfake._fake_prop`; ``FASTFAKE_NO_FAKE_PROP=1``), each where the
      stock source is one it was proven on and the self-test agrees.
    * under ``allow_non_fake_inputs=True`` both serve calls with real tensor
      arguments after converting them with the mode's own converter, as stock does
      (``FASTFAKE_NO_REAL_INPUTS=1`` leaves such calls to stock).
    * ``device``: ``FakeTensor.device`` is served by a C-level descriptor.
    * ``crosscheck`` (or ``FASTFAKE_CROSSCHECK=1``): every fast result is
      recomputed by stock and compared; a mismatch raises
      :class:`fastfake.CrosscheckError`.

    The first ``install()`` in a process runs the self-test (:mod:`fastfake._selftest`),
    or reads its result kept on disk for this unchanged installation
    (:mod:`fastfake._selftest_store`; ``FASTFAKE_CACHE_DIR`` says where,
    ``FASTFAKE_NO_SELFTEST_CACHE=1`` always runs it).

    ``FASTFAKE_DISABLE=1`` makes this a logged no-op.
    """
    if _env_flag("FASTFAKE_DISABLE"):
        log.warning("fastfake.install() skipped: FASTFAKE_DISABLE is set")
        return
    crosscheck = crosscheck or _env_flag("FASTFAKE_CROSSCHECK")
    opts = Options(elementwise=elementwise, cache=cache, device=device, crosscheck=crosscheck)
    if _State.requested == opts:
        return
    # stock's cache key built in C++ (proved here, with stock's state preserved)
    stock_key = opts.cache and not _env_flag(_accelerations.BY_NAME["stock_key"].switch)
    _check_version()
    ft, _ = _torch_internals()
    # Setting up and self-testing run stock fake ops; stock's dispatch cache and
    # its statistics are left as they were.
    with _selftest.stock_state_preserved(), _stock_cache.not_counted():
        _setup()
        if _State.selftest is None:
            _State.selftest = _run_selftest(ft)
        if stock_key:
            _stock_key.prove_once()
    requested = opts
    opts = _proven(opts, _State.selftest)
    if opts.elementwise and ft.FakeTensorConfig.debug:
        log.warning("fastfake: TORCH_FAKE_TENSOR_DEBUG is set; the elementwise path stays off")
        opts = Options(False, opts.cache, opts.device, opts.crosscheck)

    _C.set_config(
        elementwise=opts.elementwise,
        cache=opts.cache,
        crosscheck=opts.crosscheck,
        max_signatures_per_op=MAX_SIGNATURES_PER_OP,
        cache_max_entries=CACHE_MAX_ENTRIES,
        cache_max_bytes=CACHE_MAX_BYTES,
        cache_symbolic=_symbolic_cache_allowed(_State.selftest),
        real_inputs=not _env_flag(_accelerations.BY_NAME["real_inputs"].switch),
    )
    report = _State.selftest
    _C.set_portable(opts.cache and _portable_allowed(report))
    _stock_key.enable(opts.cache and stock_key)
    _C.set_rerun(opts.cache and _rerun_allowed(report))
    _C.set_rerun_scalar(opts.cache and _rerun_scalar_allowed(report))
    _C.set_item_memo(opts.cache and _item_memo_allowed(report))
    _apply(ft, opts)
    if opts.cache and _allowed(report, "functional_storage"):
        _functional.install(crosscheck=opts.crosscheck)
    else:
        _functional.uninstall()
    # the rest serve with either path on; detach and convert not under fake-tensor debug
    either = opts.elementwise or opts.cache
    plain = either and not ft.FakeTensorConfig.debug
    _patch_fast_detach(
        _detach.replacement(crosscheck=opts.crosscheck) if plain and _allowed(report, "detach") else None
    )
    _patch_convert(
        _convert.replacement(crosscheck=opts.crosscheck) if plain and _allowed(report, "convert") else None
    )
    _patch_symnode(either and _allowed(report, "symnode_memo"), crosscheck=opts.crosscheck)
    _patch_fake_prop(either and _allowed(report, "fake_prop"))
    _patch_symnode_expr(either and _allowed(report, "symnode_expr"), crosscheck=opts.crosscheck)
    _patch_symnode_int(either and _allowed(report, "symnode_int"), crosscheck=opts.crosscheck)
    _State.options = opts
    _State.requested = requested


#: Each feature the self-test judges that a switch can turn off, and the switch (from
#: the one table of accelerations, fastfake/_accelerations.py).
SWITCHES = _accelerations.env_switches()


def _allowed(report, feature: str) -> bool:
    """The self-test passed ``feature`` and its switch is not set."""
    return not _env_flag(SWITCHES[feature]) and report.passed.get(feature, False)


def _symbolic_cache_allowed(report) -> bool:
    return _allowed(report, "cache_symbolic") and _compat.shape_env_counts_replacements()


def _portable_allowed(report) -> bool:
    return (
        _symbolic_cache_allowed(report)
        and _allowed(report, "cache_portable")
        and _portable.available()
    )


def _rerun_allowed(report) -> bool:
    return (
        _symbolic_cache_allowed(report)
        and _allowed(report, "cache_rerun")
        and _compat.stock_reruns_unsafe_view()
    )


def _rerun_scalar_allowed(report) -> bool:
    return (
        _symbolic_cache_allowed(report)
        and _allowed(report, "cache_rerun_scalar")
        and _rerun.scalar_available()
    )


def _item_memo_allowed(report) -> bool:
    return _allowed(report, "cache_item_memo") and _item_memo.available()


def _patch_symnode(on: bool, crosscheck: bool = False) -> None:
    """SymNode's binary op methods, patched with the memo's hooks (fastfake/_symnode.py)
    and restored like the other attributes."""
    from torch.fx.experimental.sym_node import SymNode

    for attr, hook in _symnode.hooks().items():
        _patch(SymNode, attr, hook if on else None)
    _C.set_symnode_memo_check(_symnode.check if on and crosscheck else None)
    _C.set_symnode_memo(on and bool(_symnode.hooks()))


def _patch_fake_prop(on: bool) -> None:
    """``FakeTensorProp.run_node``, patched with fastfake/_fake_prop.py's (and
    restored like every other patched attribute)."""
    if not _fake_prop.available():
        return
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    _patch(FakeTensorProp, "run_node", _fake_prop.run_node if on else None)


def _patch_symnode_attr(attr: str, module, make, on: bool) -> None:
    """A SymNode attribute computed in C (``module``: fastfake/_symnode_expr.py,
    _symnode_int.py), patched with ``make()`` or restored like every other patched
    attribute."""
    if not module.available():
        return
    from torch.fx.experimental.sym_node import SymNode

    _patch(SymNode, attr, make() if on else None)


def _patch_symnode_expr(on: bool, crosscheck: bool = False) -> None:
    _patch_symnode_attr(
        "expr", _symnode_expr, lambda: _symnode_expr.descriptor(crosscheck=crosscheck), on
    )


def _patch_symnode_int(on: bool, crosscheck: bool = False) -> None:
    _patch_symnode_attr(
        "maybe_as_int", _symnode_int, lambda: _symnode_int.method(crosscheck=crosscheck), on
    )


def _patch_fast_detach(replacement: object | None) -> None:
    """The name ``snapshot_fake`` calls (``proxy_tensor.fast_detach``), patched and
    restored as the class attributes are (:func:`_patch`)."""
    from torch.fx.experimental import proxy_tensor

    _patch(proxy_tensor, "fast_detach", replacement)  # type: ignore[arg-type]


def _patch_convert(replacement: object | None) -> None:
    """``FakeTensorConverter.from_real_tensor``, patched (afresh: the crosscheck
    variant is a function too) and restored like the other attributes."""
    from torch._subclasses.fake_tensor import FakeTensorConverter

    _patch(FakeTensorConverter, "from_real_tensor", None)
    _patch(FakeTensorConverter, "from_real_tensor", replacement)
    _C.set_convert(replacement is not None)


def _apply(ft, opts: Options) -> None:
    """Patch (or restore) the stock attributes as ``opts`` asks."""
    _patch(
        ft.FakeTensorMode,
        "__torch_dispatch__",
        _C.make_fast_dispatch() if (opts.elementwise or opts.cache) else None,
    )
    from ._cache import capturing

    _patch(
        ft.FakeTensorMode,
        "_output_from_cache_entry",
        capturing(_originals.original(ft.FakeTensorMode, "_output_from_cache_entry")) if opts.cache else None,
    )
    _patch(
        ft.FakeTensorMode,
        "_cache_key",
        _portable.key_logger(_originals.original(ft.FakeTensorMode, "_cache_key")) if opts.cache else None,
    )
    _patch(
        ft.FakeTensor,
        "device",
        _C.make_device_descriptor(_originals.original(ft.FakeTensor, "device")) if opts.device else None,
    )
    # Stock's cache statistics count the calls served here; clearing stock's cache
    # clears fastfake's (fastfake/_stock_cache.py).
    serving = opts.elementwise or opts.cache
    _stock_cache.flush_at_exit()
    for name, make in (
        ("cache_info", _stock_cache.make_cache_info),
        ("cache_clear", _stock_cache.make_cache_clear),
    ):
        original = _originals.original(ft.FakeTensorMode, name)
        _patch(ft.FakeTensorMode, name, make(original) if serving else None)


def _run_selftest(ft) -> _selftest.Report:
    """Run the self-test (once per process) with nothing of fastfake's installed
    but the feature under test; warn about every feature it turns off."""

    @contextlib.contextmanager
    def only(feature: str):
        _C.set_config(
            elementwise=feature == "elementwise",
            cache=feature in ("cache", "cache_symbolic", "cache_portable", "cache_rerun", "cache_rerun_scalar",
                              "cache_item_memo"),
            crosscheck=False,
            max_signatures_per_op=MAX_SIGNATURES_PER_OP,
            cache_max_entries=CACHE_MAX_ENTRIES,
            cache_max_bytes=CACHE_MAX_BYTES,
            cache_symbolic=feature in ("cache_symbolic", "cache_portable", "cache_rerun", "cache_rerun_scalar"),
        )
        _C.set_portable(feature == "cache_portable")
        _C.set_rerun(feature == "cache_rerun")
        _C.set_rerun_scalar(feature == "cache_rerun_scalar")
        _C.set_item_memo(feature == "cache_item_memo")
        _apply(ft, Options(elementwise=True, cache=feature != "elementwise", device=True))
        if feature == "functional_storage":
            _functional.install()
        if feature == "detach":
            _patch_fast_detach(_detach.replacement())
        if feature == "convert":
            _patch_convert(_convert.replacement())
        if feature == "symnode_memo":
            _patch_symnode(True)
        if feature == "fake_prop":
            _patch_fake_prop(True)
        if feature == "symnode_expr":
            _patch_symnode_expr(True)
        if feature == "symnode_int":
            _patch_symnode_int(True)
        try:
            yield
        finally:
            _patch_symnode_int(False)
            _patch_symnode_expr(False)
            _patch_fake_prop(False)
            _patch_symnode(False)
            _patch_convert(None)
            _patch_fast_detach(None)
            _functional.uninstall()
            _apply(ft, Options(elementwise=False, cache=False, device=False))
            _configure_off()

    features = ["elementwise", "cache", "device", "detach"]
    if _compat.converter_layout_known():
        features.append("convert")
    if _compat.functional_tensor_recomputes_storage():
        features.append("functional_storage")
    if _compat.shape_env_counts_replacements():
        features.append("cache_symbolic")
        if _portable.available():
            features.append("cache_portable")
        if _compat.stock_reruns_unsafe_view():
            features.append("cache_rerun")
        if _rerun.scalar_available():
            features.append("cache_rerun_scalar")
    if _item_memo.available():
        features.append("cache_item_memo")
    if _symnode.available():
        features.append("symnode_memo")
    if _fake_prop.available():
        features.append("fake_prop")
    if _symnode_expr.available():
        features.append("symnode_expr")
    if _symnode_int.available():
        features.append("symnode_int")
    report = _stored_or_run(features, lambda: _selftest.run(only, _originals.original(ft.FakeTensor, "device"), features))
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


def _stored_or_run(features: list[str], run) -> _selftest.Report:
    """The result kept on disk for this installation, else ``run()``'s (then kept).
    The pointwise-op registry is handed to the extension first: read with a kept
    result, else built from torch's operator metadata and kept with the new one."""
    t0 = time.perf_counter()
    found = _selftest_store.lookup(features)
    table = found.pointwise  # only a hit carries one
    if table is None:
        table = _registry.pointwise_table()
    _registry.register_table(_C, table)
    if found.report is not None:
        return _selftest.Report.from_stored(found.report, time.perf_counter() - t0)
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


def _patch(cls: type, name: str, replacement: object | None) -> None:
    original = _originals.original(cls, name)
    current = cls.__dict__.get(name)
    if replacement is None:
        if current is not original:
            setattr(cls, name, original)
    elif current is original or type(current) is not type(replacement):
        setattr(cls, name, replacement)


def _configure_off() -> None:
    """Every fast path off in C++ (bounds kept)."""
    _C.set_config(
        elementwise=False,
        cache=False,
        crosscheck=False,
        max_signatures_per_op=MAX_SIGNATURES_PER_OP,
        cache_max_entries=CACHE_MAX_ENTRIES,
        cache_max_bytes=CACHE_MAX_BYTES,
    )
    _C.set_convert(False)
    _C.set_portable(False)
    _stock_key.enable(False)
    _C.set_rerun(False)
    _C.set_rerun_scalar(False)
    _C.set_item_memo(False)
    _C.set_symnode_memo(False)
    _C.set_symnode_memo_check(None)
    _C.set_symnode_expr_check(None)
    _C.set_symnode_int_check(None)


def uninstall() -> None:
    """Restore every patched attribute to the identical original object."""
    _stock_cache.detach()
    _functional.uninstall()
    for (cls, name), original in _State.originals.items():
        if cls.__dict__.get(name) is not original:
            setattr(cls, name, original)
    if _State.setup_done:
        _configure_off()
    _State.options = None
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
    unchanged installation, :mod:`fastfake._selftest_store`) and ``store`` what
    happened to the kept result (``hit``, ``written``, ``write_failed``,
    ``unreadable``, ``off``, ``fault``)."""
    return None if _State.selftest is None else _State.selftest.as_dict()


def cache_clear() -> None:
    """Drop every entry of fastfake's result cache (stock's is untouched;
    ``FakeTensorMode.cache_clear()`` clears both), the FunctionalTensor
    storage sizes memoised per ShapeEnv, and the memoised free symbols."""
    _C.cache_clear()
    _C.symnode_memo_clear()
    _C.symnode_expr_clear()
    _functional.clear()
    _free_symbols.clear()
