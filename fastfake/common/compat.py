"""Every difference between the torch releases fastfake supports, named by what differs.

Supported releases: torch 2.9 (the release torch_xla 2.9 needs), 2.13, 2.14, 2.15.
Each difference is detected from the installed torch itself (an attribute, a
signature, a stock-built object), not from a version number, so that a release
fastfake does not know gets the behaviour its internals call for, and the
install-time self-test (:mod:`fastfake.core.selftest`) then proves or refuses it.
Compile-time differences of the C++ extension are in ``csrc/common/compat.h``.

Nothing outside this module (and ``csrc/common/compat.h``) asks which torch it runs on.
(Also detected here: whether the real-to-fake converter has the layout the C++
conversion needs, ``converter_layout_known``.)
"""
from __future__ import annotations

import functools
import inspect
import linecache
import types

import torch

#: The releases this tree is built and tested against (``scripts/matrix``).
SUPPORTED_TORCH_VERSIONS = ("2.9.0", "2.13.0", "2.14.1", "2.15.0")


def torch_release() -> str:
    """``torch.__version__`` without its local part (``2.15.0+cu132`` -> ``2.15.0``)."""
    return torch.__version__.split("+")[0]


def _ft():
    from torch._subclasses import fake_tensor as ft

    return ft


@functools.cache
def fake_device_attr() -> str:
    """The FakeTensor instance attribute holding its fake device: ``fake_device``
    up to 2.9, ``_fake_device`` (behind a ``fake_device`` property) later. Read off
    a FakeTensor stock builds on a device other than its meta backing."""
    ft = _ft()
    with ft.FakeTensorMode():
        sample = torch.empty(1)
    device = torch.device("cpu")
    names = [k for k, v in vars(sample).items() if isinstance(v, torch.device) and v == device]
    if len(names) != 1:
        raise RuntimeError(
            f"fastfake: cannot tell which FakeTensor attribute holds its device on torch "
            f"{torch.__version__} (candidates: {names})"
        )
    return names[0]


@functools.cache
def cache_entry_rebuild_takes_func() -> bool:
    """Whether ``FakeTensorMode._output_from_cache_entry`` takes the op: ``(self,
    state, entry, key, func, args)`` up to 2.14, ``(self, state, entry, key, args)``
    from 2.15 on (view-ness comes from the entry's ``view_idx`` there)."""
    params = list(inspect.signature(_ft().FakeTensorMode._output_from_cache_entry).parameters)
    if params == ["self", "state", "entry", "key", "func", "args"]:
        return True
    if params == ["self", "state", "entry", "key", "args"]:
        return False
    raise RuntimeError(
        "fastfake: FakeTensorMode._output_from_cache_entry has an unknown signature "
        f"{params} on torch {torch.__version__}"
    )


def output_from_cache_entry(original, mode, state, entry, key, func, args):
    """Call stock's ``_output_from_cache_entry`` (``original``) on any release."""
    if cache_entry_rebuild_takes_func():
        return original(mode, state, entry, key, func, args)
    return original(mode, state, entry, key, args)


def wrap_output_from_cache_entry(original, body):
    """A replacement for ``FakeTensorMode._output_from_cache_entry`` with stock's
    own signature, calling ``body(original, self, state, entry, key, func, args)``
    (``func`` is None on releases whose stock no longer passes it)."""
    if cache_entry_rebuild_takes_func():

        def _output_from_cache_entry(self, state, entry, key, func, args):
            return body(original, self, state, entry, key, func, args)

    else:

        def _output_from_cache_entry(self, state, entry, key, args):
            return body(original, self, state, entry, key, None, args)

    _output_from_cache_entry.__wrapped__ = original
    _output_from_cache_entry.__doc__ = original.__doc__
    return _output_from_cache_entry


@functools.cache
def shape_env_counts_replacements() -> bool:
    """Whether a ShapeEnv keeps ``_replacements_version_counter`` (2.10+). The
    symbolic result cache re-checks its entries when it moves; without it there is
    no cheap way to notice a new replacement, so the symbolic cache stays off
    (``cache.bypass.symbolic_shape``)."""
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    return isinstance(getattr(ShapeEnv(), "_replacements_version_counter", None), int)


def export_tracks_fake_tensor_leaks() -> bool:
    """Whether non-strict ``torch.export`` tracks every FakeTensor created
    (``torch._export.config.detect_non_strict_fake_tensor_leaks``, 2.10+; export
    hooks ``FakeTensor.__init__`` then, so fastfake leaves such calls to stock).
    Releases without the option have no such tracker."""
    try:
        import torch._export.config as cfg
    except ImportError:
        return False
    if not hasattr(cfg, "detect_non_strict_fake_tensor_leaks"):
        return False
    return bool(cfg.detect_non_strict_fake_tensor_leaks)


@functools.cache
def converter_layout_known() -> bool:
    """Whether ``FakeTensorConverter.from_real_tensor`` and the objects behind it
    are what the C++ conversion (``csrc/convert/convert.cpp``) works with: the method takes
    ``(self, fake_mode, t, make_constant, shape_env, ...)``, answers from
    ``_get_memo``, and a converter holds a ``meta_converter`` (``MetaConverter``:
    ``describer``, ``tensor_memo``, ``storage_memo``, ``hit``, ``arg_cnt``,
    ``copy_data``) whose describer (``MetaTensorDescriber``) assigns ids with
    ``get_storage_id`` / ``get_tensor_id`` and keeps ``lookup_storage``. Read off a
    converter stock builds; where anything differs the feature is not offered (the
    self-test would refuse it anyway)."""
    from torch._subclasses import meta_utils

    ft = _ft()
    try:
        params = list(inspect.signature(ft.FakeTensorConverter.from_real_tensor).parameters)
        conv = ft.FakeTensorConverter()
        mc = conv.meta_converter
        d = mc.describer
    except (AttributeError, TypeError, ValueError):
        return False
    return (
        params[:5] == ["self", "fake_mode", "t", "make_constant", "shape_env"]
        and callable(getattr(conv, "_get_memo", None))
        and type(mc) is getattr(meta_utils, "MetaConverter", None)
        and type(d) is getattr(meta_utils, "MetaTensorDescriber", None)
        and all(hasattr(mc, a) for a in ("tensor_memo", "storage_memo", "hit", "arg_cnt", "copy_data"))
        and all(hasattr(d, a) for a in ("get_storage_id", "get_tensor_id", "lookup_storage", "copy_data"))
    )


@functools.cache
def tensors_have_grad_dtype() -> bool:
    """Whether tensors carry a ``grad_dtype`` (2.13 on), which stock's conversion
    copies onto the fake where it differs from the dtype (2.9 has neither)."""
    return hasattr(torch.Tensor, "grad_dtype")


def fake_dict_template() -> dict:
    """The ``__dict__`` of a stock-built FakeTensor (keys in stock's order), with
    the per-tensor fields cleared; every FakeTensor fastfake builds copies it. A new
    dict each call, of the sample read once (at ``install()``, where stock's cache
    and counters are kept as they were: a later first read, inside a program's
    trace, would count the sample's ``torch.empty`` in ``torch.utils._stats`` and
    put an entry in stock's cache)."""
    return dict(_fake_dict_sample())


@functools.cache
def _fake_dict_sample() -> dict:
    ft = _ft()
    with ft.FakeTensorMode():
        sample = torch.empty(1)
    template = dict(sample.__dict__)
    template["fake_mode"] = None
    template[fake_device_attr()] = None
    return template


@functools.cache
def proxy_sym_register():
    """``torch.fx.experimental.proxy_tensor._sym_register(tracer, func, args, out)``:
    what the proxy mode's ``__sym_dispatch__`` does with the result of a traced
    SymNode operation (2.13 on); ``None`` where it is inlined (2.9), and the
    FunctionalTensor storage-size memo then leaves proxy-traced wrappers to stock."""
    from torch.fx.experimental import proxy_tensor

    from fastfake.common.originals import ORIGINALS

    # (stock's, also while fastfake's C one is in place: fastfake/tracing/sym_register.py)
    fn = ORIGINALS.get((proxy_tensor, "_sym_register")) or getattr(proxy_tensor, "_sym_register", None)
    if fn is None:
        return None
    params = list(inspect.signature(fn).parameters)
    return fn if params == ["tracer", "func", "args", "out"] else None


@functools.cache
def functional_tensor_recomputes_storage() -> bool:
    """Whether ``FunctionalTensor.__new__`` lets ``_make_wrapper_subclass`` compute
    the wrapper's storage size (13 positional arguments, up to 2.14) rather than
    passing its inner tensor's (a 14th, ``storage_size``, from 2.15 on). Read off
    a wrapper stock builds."""
    from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode

    seen: list[int] = []
    original = torch._C.TensorBase._make_wrapper_subclass

    def probe(cls, *args, **kwargs):
        if cls is FunctionalTensor:
            seen.append(len(args) + len(kwargs))
        return original(cls, *args, **kwargs)

    had = "_make_wrapper_subclass" in torch.Tensor.__dict__
    previous = torch.Tensor.__dict__.get("_make_wrapper_subclass")
    torch.Tensor._make_wrapper_subclass = staticmethod(probe)
    try:
        with _ft().FakeTensorMode():
            x = torch.empty(2, 3)
            with FunctionalTensorMode():
                FunctionalTensor.to_functional(x)
    finally:
        if had:
            torch.Tensor._make_wrapper_subclass = previous
        else:
            del torch.Tensor._make_wrapper_subclass
    return bool(seen) and all(n == 13 for n in seen)


def backed_hints(env) -> dict:
    """The hints of a ShapeEnv's backed symbols (``backed_var_to_val``; named
    ``var_to_val`` before it was split from unbacked values)."""
    hints = getattr(env, "backed_var_to_val", None)
    return hints if hints is not None else env.var_to_val


@functools.cache
def backed_hints_attr() -> str:
    """The name of the ShapeEnv attribute :func:`backed_hints` reads."""
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    return "backed_var_to_val" if getattr(ShapeEnv(), "backed_var_to_val", None) is not None else "var_to_val"


@functools.cache
def portable_entries_known() -> bool:
    """Whether this release's ShapeEnv has every piece of state fastfake.cache.portable
    compares (its static evaluation reads them), and stock's cache stores symbolic
    entries per ShapeEnv through ``_set_cache_key_for_shape_env``."""
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env = ShapeEnv()
    names = (
        "guards", "_version_counter", "_replacements_version_counter",
        "num_deferred_runtime_asserts", "var_to_range", "axioms", "divisible",
        "size_like", "replacements", "_resimplify_floor_div_axioms", "fake_tensor_cache",
    )
    if not all(hasattr(env, n) for n in names):
        return False
    hints = env.backed_var_to_val if hasattr(env, "backed_var_to_val") else getattr(env, "var_to_val", None)
    if not isinstance(hints, dict):
        return False
    return callable(getattr(_ft(), "_set_cache_key_for_shape_env", None))


@functools.cache
def stock_key_head() -> int | None:
    """How many items stock's dispatch-cache key starts with before the arguments:
    6 (op, default dtype, default device, inference mode, ShapeEnv settings, proxy
    tracing; 2.13+), 5 (no proxy-tracing flag; 2.9), None if neither (the C++
    key builder then stays off). Read off a key stock builds for a call without
    arguments."""
    from torch._subclasses._fake_tensor_utils import _CacheKeyState

    ft = _ft()
    mode = ft.FakeTensorMode()
    try:
        key = mode._cache_key(_CacheKeyState(None), torch.ops.aten.zeros.default, (), {})
    except Exception:  # noqa: BLE001 -- an unknown layout
        return None
    items = key.key
    if len(items) not in (5, 6) or items[0] is not torch.ops.aten.zeros.default or items[4] is not None:
        return None
    if len(items) == 6 and type(items[5]) is not bool:
        return None
    return len(items)


@functools.cache
def stock_reruns_unsafe_view() -> bool:
    """Whether stock refuses to cache ``aten._unsafe_view`` ("unsafe view", up to
    2.14; 2.15 caches it as a view): then fastfake.cache.rerun serves its symbolic
    repeats. Read from stock's cache-key validation."""
    try:
        src = code_span_text(_ft().FakeTensorMode._validate_cache_key)
    except (OSError, TypeError, AttributeError):
        return False
    return '"unsafe view"' in src and "_unsafe_view" in src


#: Digest of stock's SymNode ``binary_magic_impl`` (with its ``capture_provenance``
#: wrapper) -> the releases the SymNode memo was proven on with that source.
#: 2.15's differs: it memoises the same operations itself (``ShapeEnv._symop_cache``).
SYMNODE_BINARY_SOURCES = {
    "616fb7df75a58231": "2.13.0, 2.14.1",
    "34f285c030f48a50": "2.9.0",
}


def _digest(text: str) -> str:
    """The short digest the proven-source tables are keyed by."""
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _normalised_source(fn: object) -> str:
    lines = inspect.getsource(fn).splitlines()  # type: ignore[arg-type]
    return "\n".join(line.strip() for line in lines if line.strip())


def _last_code_line(code: types.CodeType) -> int:
    """The last line any instruction of ``code`` (or of the code nested in it)
    spans: the largest end line of ``co_positions()`` (``_C.last_code_line``)."""
    from fastfake import _C

    return _C.last_code_line(code)


def _code_span_lines(fn: object) -> list[str]:
    """``fn``'s source lines (decorators included) to the last one any of its
    instructions, or those of the code nested in it, spans: inspect's block of the
    same function less any trailing lines that carry no code. No tokenizer: a
    fraction of inspect's cost."""
    code = inspect.unwrap(fn).__code__  # type: ignore[arg-type, attr-defined]
    lines = linecache.getlines(code.co_filename)
    if not lines:
        raise OSError(f"no source for {code.co_filename}")
    return lines[code.co_firstlineno - 1 : _last_code_line(code)]


def code_span_text(fn: object) -> str:
    """``fn``'s code span as text (:func:`_code_span_lines`): for the checks that
    look for code in a function's source (a trailing comment holds none)."""
    return "".join(_code_span_lines(fn))


def _code_span_source(fn: object) -> str:
    """``fn``'s code span, normalised like :func:`_normalised_source`."""
    return "\n".join(line.strip() for line in _code_span_lines(fn) if line.strip())


def _source_digest(compose, table) -> str | None:
    """The digest of ``compose(source)``, ``source`` reading one function's normalised
    source. Tried first with :func:`_code_span_source`: when that digest is one of
    ``table``'s (texts of inspect's blocks), the functions are those proven ones but
    for trailing lines without code, so it is the answer. Otherwise inspect's
    blocks decide (None when a source cannot be read)."""
    try:
        quick = _digest(compose(_code_span_source))
    except (OSError, TypeError, AttributeError, ImportError, ValueError):
        quick = None
    if quick is not None and quick in table:
        return quick
    try:
        return _digest(compose(_normalised_source))
    except (OSError, TypeError, AttributeError, ImportError):
        return None


@functools.cache
def symnode_binary_source_digest() -> str | None:
    """Digest of the one implementation behind every SymNode binary op (None if it
    cannot be read or the ops do not share one)."""
    from fastfake.common.stock_sources import symnode_binary_methods

    try:
        methods = symnode_binary_methods()
        codes = {fn.__wrapped__.__code__ for _, _, fn in methods}  # type: ignore[attr-defined]
    except (TypeError, AttributeError):
        return None
    if not methods or len(codes) != 1:
        return None
    fn = methods[0][2]
    return _source_digest(
        lambda source: source(fn.__wrapped__) + "\n--\n" + source(fn),  # type: ignore[attr-defined]
        SYMNODE_BINARY_SOURCES,
    )


def symnode_binary_ops_proven() -> bool:
    """Stock's SymNode binary ops are source-identical to those of a release the
    SymNode memo was proven on (fastfake/symbolic/symnode_memo.py). Anything else (a new release,
    a patched torch) leaves them to stock."""
    return symnode_binary_source_digest() in SYMNODE_BINARY_SOURCES


#: Digest of the stock functions ``fastfake.tracing.fake_prop.run_node`` stands for
#: (``FakeTensorProp.run_node``, the ``Interpreter`` methods it reaches, the
#: unbacked-binding helpers, ``snapshot_fake``) -> the releases it was proven on.
FAKE_PROP_SOURCES: dict[str, str] = {
    "a0ca3c027297a3bb": "2.9.0",
    "5ccf86aba2f420b6": "2.13.0",
    "ddae4def2de1c4bc": "2.14.1, 2.15.0",
}


@functools.cache
def fake_prop_source_digest() -> str | None:
    """Digest of what ``fastfake.tracing.fake_prop.run_node`` replaces (None if a source
    cannot be read)."""
    from fastfake.common.stock_sources import fake_prop_functions

    return _source_digest(
        lambda source: "\n--\n".join(source(fn) for fn in fake_prop_functions()), FAKE_PROP_SOURCES
    )


def _fake_prop_run_node_source() -> str:
    from fastfake.common.stock_sources import fake_prop_functions

    run_node = fake_prop_functions()[0]
    try:
        return _code_span_source(run_node)
    except (OSError, TypeError, AttributeError, ValueError):
        return _normalised_source(run_node)


def fake_prop_keeps_python_scalars() -> bool:
    """Whether stock's ``FakeTensorProp`` records int / float / bool results in
    ``meta["val"]`` (2.13 and later; 2.9 records only SymInts and fake tensors)."""
    return "(*py_sym_types, int, float, bool)" in _fake_prop_run_node_source()


def fake_prop_asks_is_fake_tensor() -> bool:
    """Whether stock's ``FakeTensorProp`` tells fake tensors by ``is_fake_tensor``
    (2.14 on, which also knows C++ fakes) rather than ``isinstance(.., FakeTensor)``."""
    return "if is_fake_tensor(obj):" in _fake_prop_run_node_source()


def fake_prop_proven() -> bool:
    """Stock's ``FakeTensorProp.run_node`` and what it calls are source-identical to
    those of a release the fast ``run_node`` was proven on (fastfake/tracing/fake_prop.py)."""
    return fake_prop_source_digest() in FAKE_PROP_SOURCES


#: Digest of the stock pytree functions ``csrc/tracing/pytree.cpp`` stands for
#: (``stock_sources.pytree_functions``) -> the releases it was proven on.
PYTREE_SOURCES: dict[str, str] = {
    "13c338e2a4abefb9": "2.9.0",
    "4a8b3b7c50c4dace": "2.13.0, 2.14.1, 2.15.0",
}


@functools.cache
def pytree_source_digest() -> str | None:
    """Digest of what fastfake/tracing/pytree.py's C functions stand for (None if a
    source cannot be read)."""
    from fastfake.common.stock_sources import pytree_functions

    return _source_digest(lambda source: "\n--\n".join(source(fn) for fn in pytree_functions()), PYTREE_SOURCES)


def pytree_sources_proven() -> bool:
    """Stock's pytree functions are source-identical to those of a release the C maps
    were proven on (fastfake/tracing/pytree.py)."""
    return pytree_source_digest() in PYTREE_SOURCES


#: Digest of FX's immutable containers and their flatten functions
#: (``stock_sources.pytree_fx_containers``) -> the releases on which ``tree_iter`` /
#: ``tree_leaves`` in C were proven to flatten them as list and dict.
PYTREE_FX_SOURCES: dict[str, str] = {
    "9e806f9459271660": "2.9.0, 2.13.0, 2.14.1, 2.15.0",
}


@functools.cache
def pytree_fx_source_digest() -> str | None:
    """Digest of FX's immutable containers as the C leaves see them (None if a source
    cannot be read)."""
    from fastfake.common.stock_sources import pytree_fx_containers

    return _source_digest(lambda source: "\n--\n".join(source(fn) for fn in pytree_fx_containers()),
                          PYTREE_FX_SOURCES)


def pytree_fx_sources_proven() -> bool:
    return pytree_fx_source_digest() in PYTREE_FX_SOURCES


#: Digest of stock's ``SymNode.expr`` getter -> (the rule ``csrc/symbolic/symnode_expr.cpp``
#: computes for it, the releases it was proven on). Rules: 1 = 2.13's
#: ``is_number`` test, 2 = 2.14's ``is_Number``, 3 = 2.15's ``is_Number`` or
#: boolean atom. 2.9's getter is a bare ``shape_env.replace(_expr)``: not offered.
SYMNODE_EXPR_SOURCES: dict[str, tuple[int, str]] = {
    "750ceb4198193b0b": (1, "2.13.0"),
    "3433ebb6fdc269f9": (2, "2.14.1"),
    "4ee54c55cdc5a24e": (3, "2.15.0"),
}


@functools.cache
def symnode_expr_source_digest() -> str | None:
    try:
        from torch.fx.experimental.sym_node import SymNode

        fget = SymNode.expr.fget
    except (AttributeError, ImportError):
        return None
    return _source_digest(lambda source: source(fget), SYMNODE_EXPR_SOURCES)


def symnode_expr_rule() -> int | None:
    """The rule for this release's ``SymNode.expr`` (fastfake/symbolic/symnode_expr.py), None
    if its source is not one fastfake was proven on."""
    entry = SYMNODE_EXPR_SOURCES.get(symnode_expr_source_digest() or "")
    return entry[0] if entry else None


#: Digests of stock's ``SymNode.maybe_as_int`` fastfake computes in C
#: (fastfake/symbolic/symnode_int.py); the body is the same on every release, 2.9 has no
#: return annotation.
SYMNODE_MAYBE_AS_INT_SOURCES: dict[str, str] = {
    "5a38e20423b33298": "2.13.0, 2.14.1, 2.15.0",
    "ebb8d60c80010287": "2.9.0",
}


#: Digests of ``SymNode.__init__`` (normalised source) that store their arguments
#: and constants and read the ShapeEnv only for a missing hint and for translation
#: validation: for the same fields the instance dict is the same in every ShapeEnv
#: without translation validation, apart from ``shape_env``, so a result-cache
#: recipe's new SymNodes may be copies of the first one's dict
#: (csrc/cache/rebuild.cpp). 2.9.0's lacks the ``expr`` memo's two fields.
SYMNODE_INIT_SOURCES: dict[str, str] = {
    "df3c3a5efd1a09d2": "2.13.0, 2.14.1, 2.15.0",
    "97cb877f8b2e7e1b": "2.9.0",
}


@functools.cache
def symnode_init_source_digest(fn: object) -> str | None:
    """Digest of ``fn``, stock's ``SymNode.__init__`` (None if unreadable)."""
    return _source_digest(lambda source: source(fn), SYMNODE_INIT_SOURCES)


def instructions(fn: object) -> list[tuple[str, object]]:
    """``fn``'s bytecode as ``(opname, argval)`` pairs, without the instructions that
    do nothing (``RESUME``, ``NOP``, ``CACHE``, ``PRECALL``)."""
    import dis

    return [(i.opname, i.argval) for i in dis.get_instructions(fn)
            if i.opname not in ("RESUME", "NOP", "CACHE", "PRECALL")]


def symnode_kind_methods() -> tuple:
    """``(SymNode.is_int, is_float, is_bool)`` if each is the function ``return
    self.pytype is <int / float / bool>`` (its bytecode; the builtin not shadowed in
    the module), else ``(None, None, None)``: a SymNode's kind is then its pytype's,
    which c10's SymInt / SymBool constructors may read without calling them
    (csrc/cache/rebuild.cpp)."""
    import builtins
    import sys

    from torch.fx.experimental.sym_node import SymNode

    module = vars(sys.modules[SymNode.__module__])
    out = []
    for name, ty in (("is_int", "int"), ("is_float", "float"), ("is_bool", "bool")):
        fn = vars(SymNode).get(name)
        code = getattr(fn, "__code__", None)
        if code is None or code.co_argcount != 1 or ty in module or getattr(builtins, ty) is None:
            return (None, None, None)
        ops = instructions(fn)
        want = [("LOAD_FAST", code.co_varnames[0]), ("LOAD_ATTR", "pytype"), ("LOAD_GLOBAL", ty),
                ("IS_OP", 0), ("RETURN_VALUE", None)]
        if ops != want:
            return (None, None, None)
        out.append(fn)
    return tuple(out)


@functools.cache
def symnode_maybe_as_int_source_digest(fn: object) -> str | None:
    """Digest of ``fn``, stock's ``SymNode.maybe_as_int`` (None if unreadable)."""
    return _source_digest(lambda source: source(fn), SYMNODE_MAYBE_AS_INT_SOURCES)


#: Opcodes a dataclass's generated ``__eq__`` / ``__hash__`` use besides loads
#: (3.11: ``other.__class__ is self.__class__`` and a tuple comparison; ``hash``
#: of a tuple).
_FIELDS_ONLY_OPS = ("IS_OP", "BUILD_TUPLE", "COMPARE_OP", "RETURN_VALUE", "CALL", "PUSH_NULL")


def settings_fields(cls: object) -> tuple[tuple[str, ...], object, object] | None:
    """``(field names, __eq__, __hash__)`` of ``ShapeEnvSettings`` where both
    methods are the class's own and read nothing but its fields, its class and
    the builtins ``hash`` / ``NotImplemented`` (their bytecode): two settings of
    the class whose fields are the same objects are then equal with equal hashes,
    so the result cache may key on the fields themselves
    (``_C.set_settings_fields``). None where that is not proven."""
    import builtins
    import dataclasses

    if not isinstance(cls, type) or not dataclasses.is_dataclass(cls):
        return None
    names = tuple(f.name for f in dataclasses.fields(cls))
    methods = []
    for meth in ("__eq__", "__hash__"):
        fn = vars(cls).get(meth)
        code = getattr(fn, "__code__", None)
        module = getattr(fn, "__globals__", None)
        if code is None or not isinstance(module, dict):
            return None
        args = code.co_varnames[: code.co_argcount]
        for op, arg in instructions(fn):
            if op == "LOAD_ATTR":
                ok = arg == "__class__" or arg in names
            elif op == "LOAD_GLOBAL":
                ok = arg in ("hash", "NotImplemented") and arg not in module and hasattr(builtins, arg)
            elif op == "LOAD_FAST":
                ok = arg in args
            else:
                ok = op in _FIELDS_ONLY_OPS or op.startswith("POP_JUMP_")
            if not ok:
                return None
        methods.append(fn)
    if builtins.hash is not _BUILTIN_HASH:
        return None
    return names, methods[0], methods[1]


_BUILTIN_HASH = hash


def stub_extract() -> object | None:
    """``_DeconstructedSymNode.extract`` if its bytecode is ``return SymNode(self._expr,
    shape_env, self.pytype, self._hint, self.constant, self.fx_node)`` with its
    module's ``SymNode`` torch's, else None: the new SymNodes of the keys a served
    first call stores in stock's cache are then made in C++ as that constructor call
    makes them (csrc/cache/portable_fast.cpp; the constructor itself, or its
    proven template, csrc/cache/rebuild.cpp)."""
    from torch._subclasses import _fake_tensor_utils as utils
    from torch.fx.experimental.sym_node import SymNode

    fn = vars(utils._DeconstructedSymNode).get("extract")
    code = getattr(fn, "__code__", None)
    if code is None or code.co_argcount != 2 or getattr(fn, "__globals__", {}).get("SymNode") is not SymNode:
        return None
    me, env = code.co_varnames[:2]
    want = [("LOAD_GLOBAL", "SymNode"), ("LOAD_FAST", me), ("LOAD_ATTR", "_expr"), ("LOAD_FAST", env)]
    for field in ("pytype", "_hint", "constant", "fx_node"):
        want += [("LOAD_FAST", me), ("LOAD_ATTR", field)]
    want += [("CALL", 6), ("RETURN_VALUE", None)]
    return fn if instructions(fn) == want else None


#: Digest of the stock cache code the learned-record store relies on
#: (``stock_sources.store_functions``) -> the releases it was proven on.
STORE_SOURCES: dict[str, str] = {
    "c866d194401ae6b2": "2.13.0",
    "6c92c21e5397237d": "2.14.1",  # (2.13.0's code; two comments differ)
    # 2.15.0: the hit no longer takes func and rebuilds under disable_proxy_modes_tracing
    # (its crosscheck too); a view's sizes derived once. The store keeps no view op or
    # output and serves nothing under the crosscheck; the hit is stock's own code.
    "a08cd0714b433258": "2.15.0",
}


@functools.cache
def store_source_digest() -> str | None:
    from fastfake.common.stock_sources import store_functions

    return _source_digest(lambda source: "\n--\n".join(source(fn) for fn in store_functions()), STORE_SOURCES)


def store_entries_known() -> bool:
    """Stock's dispatch cache is laid out as the store keeps it (entries, output
    infos and metadata with the fields fastfake/store/codec.py writes) and its cache
    code is source-identical to a release the store was proven on."""
    import dataclasses

    ft = _ft()

    def fields(cls: object) -> tuple:
        return tuple(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else ()

    if fields(getattr(ft, "_DispatchCacheValidEntry", None)) != ("output_infos", "is_output_tuple"):
        return False
    if fields(getattr(ft, "_DispatchCacheEntryOutputInfo", None)) != (
            "inplace_idx", "metadata", "view_idx", "constant_value"):
        return False
    if fields(getattr(ft, "_DispatchCacheBypassEntry", None)) != ("reason",):
        return False
    if not fields(getattr(ft, "TensorMetadata", None)) or not hasattr(ft, "_set_cache_key"):
        return False
    return store_source_digest() in STORE_SOURCES


#: Digest of Dynamo's function-name table code and ``tokenize.open``
#: (``stock_sources.funcnames_functions``) -> the releases fastfake/store/funcnames.py
#: was proven on.
FUNCNAMES_SOURCES: dict[str, str] = {
    "f5ce12fe91c9ad64": "2.13.0, 2.14.1, 2.15.0",  # (Python 3.11)
}


@functools.cache
def funcnames_source_digest() -> str | None:
    from fastfake.common.stock_sources import funcnames_functions

    return _source_digest(lambda source: "\n--\n".join(source(fn) for fn in funcnames_functions()),
                          FUNCNAMES_SOURCES)


def funcnames_proven() -> bool:
    """Dynamo's ``funcname_cache`` builds its tables as fastfake/store/funcnames.py
    keeps them: its code and ``tokenize.open`` are source-identical to a release that
    was proven."""
    try:
        return funcnames_source_digest() in FUNCNAMES_SOURCES
    except ImportError:
        return False


#: Digest of torch's configuration-module read (``stock_sources.config_attr_functions``)
#: -> the releases csrc/tracing/config_attr.cpp was proven on.
CONFIG_ATTR_SOURCES: dict[str, str] = {
    # (2.15.0: the same ConfigModule code; its modules with implications, torch._inductor.config,
    # are of a subclass with its own __getattr__, whose reads csrc/tracing/config_attr.cpp leaves to stock)
    "c0318e6c19ead749": "2.13.0, 2.14.1, 2.15.0",
}


@functools.cache
def config_attr_source_digest() -> str | None:
    from fastfake.common.stock_sources import config_attr_functions

    return _source_digest(lambda source: "\n--\n".join(source(fn) for fn in config_attr_functions()),
                          CONFIG_ATTR_SOURCES)


def config_attr_proven() -> bool:
    """torch's ``ConfigModule`` reads a setting as csrc/tracing/config_attr.cpp does: its
    ``__getattr__`` and helpers are source-identical to a release that was proven."""
    try:
        return config_attr_source_digest() in CONFIG_ATTR_SOURCES
    except (ImportError, KeyError):  # (2.9's ConfigModule has no _warn_if_deprecated)
        return False


#: Digest of the proxy mode's record of a SymNode operation and what its plain call
#: runs (``stock_sources.sym_register_functions``) -> the releases
#: csrc/tracing/sym_register.cpp was proven on.
SYM_REGISTER_SOURCES: dict[str, str] = {
    "33692182fefc18b4": "2.13.0",
    # 2.14.1 and 2.15.0 (one code): the opaque-value test renamed (is_custom_class_obj /
    # is_custom_class, the same registry read the same way), is_fake through
    # fake_tensor.is_fake_tensor (False for a SymInt, as before)
    "020d2902adf858e1": "2.14.1, 2.15.0",
}


@functools.cache
def sym_register_source_digest() -> str | None:
    from fastfake.common.stock_sources import sym_register_functions

    return _source_digest(lambda source: "\n--\n".join(source(fn) for fn in sym_register_functions()),
                          SYM_REGISTER_SOURCES)


def sym_register_proven() -> bool:
    """``proxy_tensor._sym_register`` records a SymNode operation as
    csrc/tracing/sym_register.cpp does: it and what its plain call runs are
    source-identical to a release that was proven (2.9 has no ``_sym_register``)."""
    try:
        return sym_register_source_digest() in SYM_REGISTER_SOURCES
    except (ImportError, KeyError, AttributeError):
        return False


#: Digest of the proxy mode's SymNode dispatch and what its plain call runs
#: (``stock_sources.sym_dispatch_functions``) -> the releases
#: csrc/tracing/sym_dispatch.cpp was proven on.
SYM_DISPATCH_SOURCES: dict[str, str] = {
    "e360d0c501377278": "2.13.0",
    # 2.14.1 and 2.15.0 (one code): get_proxy_mode's answer wrapped in typing.cast
    "70faf2cf3270f5f0": "2.14.1, 2.15.0",
}


@functools.cache
def sym_dispatch_source_digest() -> str | None:
    from fastfake.common.stock_sources import sym_dispatch_functions

    return _source_digest(lambda source: "\n--\n".join(source(fn) for fn in sym_dispatch_functions()),
                          SYM_DISPATCH_SOURCES)


def sym_dispatch_proven() -> bool:
    """``proxy_tensor.handle_sym_dispatch`` dispatches a SymNode operation as
    csrc/tracing/sym_dispatch.cpp does: it and what its plain call runs are
    source-identical to a release that was proven (2.9's ``__sym_dispatch__`` is
    another code)."""
    try:
        return sym_dispatch_source_digest() in SYM_DISPATCH_SOURCES
    except (ImportError, KeyError, AttributeError):
        return False


#: Digest of make_fx's dead-code-elimination predicate and what it reads
#: (``stock_sources.dce_pred_functions``) -> the releases csrc/tracing/dce_pred.cpp
#: was proven on.
DCE_PRED_SOURCES: dict[str, str] = {
    "01d402f6aed158c6": "2.13.0, 2.14.1, 2.15.0",
}


@functools.cache
def dce_pred_source_digest() -> str | None:
    from fastfake.common.stock_sources import dce_pred_functions

    return _source_digest(lambda source: "\n--\n".join(source(fn) for fn in dce_pred_functions()),
                          DCE_PRED_SOURCES)


def dce_pred_proven() -> bool:
    """make_fx's dead-code elimination asks its predicate as csrc/tracing/dce_pred.cpp
    answers: the predicate and what it reads are source-identical to a release that
    was proven (2.9's purity check is another code)."""
    try:
        return dce_pred_source_digest() in DCE_PRED_SOURCES
    except (ImportError, KeyError, AttributeError):
        return False


#: Digest of make_fx's node creation and what its plain call runs
#: (``stock_sources.fx_node_functions``) -> the releases csrc/tracing/fx_node.cpp
#: was proven on.
FX_NODE_SOURCES: dict[str, str] = {
    "ec9280c34e850a1d": "2.13.0",
    # 2.14.1 and 2.15.0 (one code): PythonKeyTracer.create_node's eager-input-value
    # map reads is_fake_tensor (a target with eager input values is stock's there)
    "61d069916cdedef3": "2.14.1, 2.15.0",
}


@functools.cache
def fx_node_source_digest() -> str | None:
    from fastfake.common.stock_sources import fx_node_functions

    return _source_digest(lambda source: "\n--\n".join(source(fn) for fn in fx_node_functions()),
                          FX_NODE_SOURCES)


def fx_node_proven() -> bool:
    """make_fx's tracer creates a node as csrc/tracing/fx_node.cpp does: its
    ``create_node`` and what the plain call runs are source-identical to a release
    that was proven."""
    try:
        return fx_node_source_digest() in FX_NODE_SOURCES
    except (ImportError, KeyError, AttributeError):
        return False


#: Digest of the functional mode's dispatch and what it calls
#: (``stock_sources.functional_dispatch_functions``) -> the releases
#: csrc/tracing/functional_dispatch.cpp was proven on.
FUNCTIONAL_DISPATCH_SOURCES: dict[str, str] = {
    # 2.9.0: its own layout (stock_sources._functional_dispatch_functions_2_9; FUNCTIONAL_DISPATCH_VARIANTS)
    "9ec2d3a396c43bc4": "2.9.0",
    "7fe63e271560a07f": "2.9.0",
    "c098bd2c74ead317": "2.13.0",
    # (the same functions' code spans, :func:`_code_span_source`: some end in comment
    # lines inspect's blocks keep; this key spares install() the tokenizer)
    "4b76fe3222d2b71e": "2.13.0",
    # 2.14.1: alias / detach keep the input's FakeTensor dispatch_keys (FUNCTIONAL_DISPATCH_VARIANTS)
    "368bc3d8e534bfef": "2.14.1",
    "e0e9ee5e80aedfd1": "2.14.1",
    # 2.15.0: that, has_effects' new order, FunctionalTensor.__new__ handing over the storage size
    "7997c6a4a86d3e39": "2.15.0",
    "0403e991a1f93479": "2.15.0",
}


@functools.cache
def functional_dispatch_source_digest() -> str | None:
    from fastfake.common.stock_sources import functional_dispatch_functions

    return _source_digest(lambda source: "\n--\n".join(source(fn) for fn in functional_dispatch_functions()),
                          FUNCTIONAL_DISPATCH_SOURCES)


#: What the functional mode's code of each proven release adds to the plain path
#: (csrc/tracing/functional_dispatch.cpp, functional_dispatch_setup_variant), by the
#: release names of :data:`FUNCTIONAL_DISPATCH_SOURCES`:
#: ``preserve_dispatch_keys`` -- alias / detach of one FunctionalTensor give the
#: outputs' FakeTensors the input's ``dispatch_keys`` (2.14+); ``effect_first`` --
#: ``has_effects`` reads the effect registry before ``has_aliasing`` (2.15);
#: ``layout_2_9`` -- 2.9's method: every op outside export is offered to
#: ``decompose`` (its ``_can_decompose`` closure answers True), effects are
#: ``effects.SIDE_EFFECTS``, no ``torch._disable_dynamo`` wrapper, no view-replay
#: sync, enter / exit set no compile-internals flag, bare assertions, and a
#: ``return_and_correct_aliasing`` read through its own schema info (called for
#: every served op with FunctionalTensor outputs).
FUNCTIONAL_DISPATCH_VARIANTS: dict[str, dict[str, bool]] = {
    "2.9.0": {"preserve_dispatch_keys": False, "effect_first": False, "layout_2_9": True},
    "2.13.0": {"preserve_dispatch_keys": False, "effect_first": False, "layout_2_9": False},
    "2.14.1": {"preserve_dispatch_keys": True, "effect_first": False, "layout_2_9": False},
    "2.15.0": {"preserve_dispatch_keys": True, "effect_first": True, "layout_2_9": False},
}


def functional_dispatch_variant() -> dict[str, bool]:
    """:data:`FUNCTIONAL_DISPATCH_VARIANTS`' entry of the release this torch's code was
    proven as (only where :func:`functional_dispatch_proven`)."""
    return FUNCTIONAL_DISPATCH_VARIANTS[FUNCTIONAL_DISPATCH_SOURCES[functional_dispatch_source_digest()]]


def functional_dispatch_proven() -> bool:
    """The functional mode dispatches as csrc/tracing/functional_dispatch.cpp does: its
    ``__torch_dispatch__`` and everything it calls are source-identical to a release
    that was proven."""
    try:
        return functional_dispatch_source_digest() in FUNCTIONAL_DISPATCH_SOURCES
    except (ImportError, KeyError, AttributeError):
        return False


#: Digest of the proxy mode's dispatch and what it calls
#: (``stock_sources.proxy_dispatch_functions``) -> the releases
#: csrc/tracing/proxy_dispatch.cpp was proven on.
PROXY_DISPATCH_SOURCES: dict[str, str] = {
    # 2.9.0: no autograd_would_have_decomposed, the module's CURRENT_DECOMPOSITION_TABLE,
    # ORIGINAL_ATEN a global (PROXY_DISPATCH_VARIANTS' layout_2_9)
    "df7607e0740b51d1": "2.9.0",
    "77355c3a03d555c6": "2.9.0",
    "91ab7a45814020f7": "2.13.0",
    # (the same functions' code spans, :func:`_code_span_source`)
    "8c484e0d75712c82": "2.13.0",
    # 2.14.1 and 2.15.0 (one code): proxy_call's compile-on-one-rank device rewrite,
    # OpOverload.__call__'s _pyobj_dispatcher, opaque values renamed custom classes,
    # is_fake through is_fake_tensor, unbacked bindings routed per output proxy
    "c310c7bb6d8a5b85": "2.14.1, 2.15.0",
    "5d8fa675a7628868": "2.14.1, 2.15.0",
}


@functools.cache
def proxy_dispatch_source_digest() -> str | None:
    from fastfake.common.stock_sources import proxy_dispatch_functions

    return _source_digest(lambda source: "\n--\n".join(source(fn) for fn in proxy_dispatch_functions()),
                          PROXY_DISPATCH_SOURCES)


#: What the proxy mode's code of each proven release adds to the plain path
#: (csrc/tracing/proxy_dispatch.cpp), by the release names of
#: :data:`PROXY_DISPATCH_SOURCES`: ``coor`` -- proxy_call rewrites a torch.device
#: argument under compile-on-one-rank (``_coor_enabled``); ``pyobj_dispatcher`` --
#: ``OpOverload.__call__`` asks the op's ``_pyobj_dispatcher`` first;
#: ``layout_2_9`` -- 2.9's proxy_call offers every op but size / stride /
#: storage_offset to ``decompose`` (no ``autograd_would_have_decomposed``), its
#: decomposition table is the module's ``CURRENT_DECOMPOSITION_TABLE`` (not the
#: mode's), ``ORIGINAL_ATEN`` is a module global (not a ContextVar), and the mode's
#: enter / exit set no compile-internals flag in C.
PROXY_DISPATCH_VARIANTS: dict[str, dict[str, bool]] = {
    "2.9.0": {"coor": False, "pyobj_dispatcher": False, "layout_2_9": True},
    "2.13.0": {"coor": False, "pyobj_dispatcher": False, "layout_2_9": False},
    "2.14.1, 2.15.0": {"coor": True, "pyobj_dispatcher": True, "layout_2_9": False},
}


def proxy_dispatch_variant() -> dict[str, bool]:
    """:data:`PROXY_DISPATCH_VARIANTS`' entry of the release this torch's code was
    proven as (only where :func:`proxy_dispatch_proven`)."""
    return PROXY_DISPATCH_VARIANTS[PROXY_DISPATCH_SOURCES[proxy_dispatch_source_digest()]]


def proxy_dispatch_proven() -> bool:
    """The proxy mode dispatches as csrc/tracing/proxy_dispatch.cpp does: its
    ``__torch_dispatch__`` and everything it calls are source-identical to a release
    that was proven."""
    try:
        return proxy_dispatch_source_digest() in PROXY_DISPATCH_SOURCES
    except (ImportError, KeyError, AttributeError):
        return False


def privateuse1_device() -> str:
    """The name an out-of-tree backend gave the PrivateUse1 device (TorchTPU:
    ``tpu``), "" while it has none (or this torch cannot say)."""
    try:
        name = torch._C._get_privateuse1_backend_name()
    except Exception:  # noqa: BLE001
        return ""
    return "" if name == "privateuseone" else name
