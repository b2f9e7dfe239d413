"""pytree maps over plain trees in C, at the tracing stack's own call sites.

Every op that AOTAutograd traces goes through ``FunctionalTensorMode.__torch_dispatch__``,
which unwraps its arguments and wraps its outputs with two
``pytree.tree_map_only(...)`` calls and lists them with ``pytree.tree_leaves``;
FakeTensorMode and AOTAutograd's wrappers map over arguments with
``pytree.tree_map``. Each is a recursive Python flatten (a ``TreeSpec`` per node, a
registry lookup and a namedtuple test per value), a ``functools.wraps`` closure and a
recursive unflatten; and FX's ``Graph.create_node`` walks every node's arguments with
``pytree.tree_iter`` (2.13 on): ~6 % of a first ``torch.compile`` of a Llama-style
model under fastfake (cProfile, own time of ``torch/utils/_pytree.py``).

``csrc/tracing/pytree.cpp`` computes the same functions in C for *plain* trees
(exactly tuple, list and dict containers; every other value a leaf the registry
cannot claim), in stock's order and with stock's fresh containers, and hands every
other call to stock's function (counted as ``pytree.stock.<reason>``; the reasons and
the exact rule are in the C file).

**Where.** Not ``torch.utils._pytree`` itself: user code, and Dynamo, which inlines and
polyfills pytree functions, keep stock's module. The tracing modules that reach
pytree through a module global ``pytree`` and that Dynamo never inlines (:data:`CALL_SITES`) get a view of it: a
module object that answers the names that module is served with the C functions
while ``torch.utils._pytree`` still holds stock's (a function patched there is what
the view answers instead) and every other name from ``torch.utils._pytree``.
``uninstall()`` puts the module back.

**Proof.** Offered where stock's functions the C code stands for
(:func:`fastfake.common.stock_sources.pytree_functions`)
are source-identical to a release it was proven on
(:data:`fastfake.common.compat.PYTREE_SOURCES`) and the registry holds stock's own
entries for tuple, list and dict; the install-time self-test (feature ``pytree``)
compares results, call order and errors over a set of trees with stock's.
``FASTFAKE_DISABLE=pytree`` turns it off.

Counters (``stats()``): ``pytree.{map_only,map,leaves,iter}.served``,
``pytree.stock.{arguments,predicate,function,node,registry,depth}``.
"""
from __future__ import annotations

import sys
import types

from fastfake import _C

#: The modules whose ``pytree`` global a view replaces, and the names each view
#: answers with C functions. Each module imports ``torch.utils._pytree`` as
#: ``pytree``, and Dynamo never inlines its functions
#: (``torch._dynamo.trace_rules.check_file`` skips it; tests/test_pytree.py), so a
#: view is never seen by a trace of user code. ``proxy_tensor`` also maps with
#: pytree, but it is in Dynamo's ``MOD_INLINELIST``: it keeps the module.
#: ``tree_iter`` only where its one caller (``Graph.create_node``, 2.13 on) loops
#: over the leaves without changing the tree, so an iterator over a list of them is
#: what stock's generator yields.
CALL_SITES: dict[str, tuple[str, ...]] = {
    "torch._subclasses.functional_tensor": ("tree_map_only", "tree_map", "tree_leaves"),
    "torch._subclasses.fake_tensor": ("tree_map_only", "tree_map", "tree_leaves"),
    "torch._functorch._aot_autograd.graph_capture_wrappers": ("tree_map_only", "tree_map", "tree_leaves"),
    "torch._functorch._aot_autograd.collect_metadata_analysis": ("tree_map_only", "tree_map", "tree_leaves"),
    "torch.fx.graph": ("tree_iter",),
}
_SERVED = ("tree_map_only", "tree_map", "tree_leaves", "tree_iter")

_fast: dict[str, object] = {}
_stock: dict[str, object] = {}
_views: dict[tuple[str, ...], types.ModuleType] = {}
_real: list = [None]  # torch.utils._pytree


class _PytreeView(types.ModuleType):
    """``torch.utils._pytree`` as a tracing module sees it with fastfake on: the names
    of ``_names`` answered with the C functions while ``torch.utils._pytree`` holds
    stock's (a function patched there is what the view answers instead), every
    other name from ``torch.utils._pytree``."""

    _names: tuple[str, ...] = ()

    def __getattr__(self, name: str):
        value = getattr(_real[0], name)
        if name in self._names and value is _stock[name]:
            return _fast[name]
        return value

    def __dir__(self):
        return dir(_real[0])


def _registry_is_stock() -> bool:
    import torch.utils._pytree as p

    for cls, flatten, unflatten in ((tuple, p._tuple_flatten, p._tuple_unflatten),
                                    (list, p._list_flatten, p._list_unflatten),
                                    (dict, p._dict_flatten, p._dict_unflatten)):
        d = p.SUPPORTED_NODES.get(cls)
        if d is None or d.flatten_fn is not flatten or d.unflatten_fn is not unflatten:
            return False
    return type(p.SUPPORTED_NODES) is dict and type(None) not in p.SUPPORTED_NODES


def available() -> bool:
    from fastfake.common import compat as _compat

    try:
        return _compat.pytree_sources_proven() and _registry_is_stock()
    except Exception:  # noqa: BLE001 - anything unexpected: not offered
        return False


def _fx_containers() -> tuple:
    """(immutable_list, immutable_dict, their registry entries) when ``tree_leaves`` /
    ``tree_iter`` in C may flatten them as list and dict: their sources are proven
    (``compat.PYTREE_FX_SOURCES``) and the registry holds stock's entries for them;
    else four Nones (they go to stock, as any other registered node)."""
    from fastfake.common import compat as _compat

    try:
        import torch.utils._pytree as p
        from torch.fx import immutable_collections as ic

        if _compat.pytree_fx_sources_proven():
            pairs = ((ic.immutable_list, ic._immutable_list_flatten), (ic.immutable_dict, ic._immutable_dict_flatten))
            defs = [p.SUPPORTED_NODES.get(cls) for cls, _ in pairs]
            if all(d is not None and d.flatten_fn is fn for d, (_, fn) in zip(defs, pairs)):
                return (ic.immutable_list, ic.immutable_dict, *defs)
    except Exception:  # noqa: BLE001 - anything unexpected: not offered
        pass
    return (None, None, None, None)


def setup() -> None:
    import torch.utils._pytree as p

    if _fast:
        return
    _real[0] = p
    _stock.update({n: getattr(p, n) for n in _SERVED})
    _C.setup_pytree(p.SUPPORTED_NODES, p.SUPPORTED_NODES[tuple], p.SUPPORTED_NODES[list],
                    p.SUPPORTED_NODES[dict], *(_stock[n] for n in _SERVED))
    _C.setup_pytree_fx(*_fx_containers())
    _fast.update(zip(_SERVED, _C.pytree_functions()))


def view(names: tuple[str, ...]) -> types.ModuleType:
    """The view answering ``names`` in C (one per set of names)."""
    v = _views.get(names)
    if v is None:
        v = _views[names] = _PytreeView("torch.utils._pytree", f"torch.utils._pytree, {', '.join(names)} in C")
        v._names = names
    return v


def _call_sites():
    import torch.utils._pytree as real

    for name, names in CALL_SITES.items():
        mod = sys.modules.get(name)
        if mod is None:
            try:
                mod = __import__(name, fromlist=["_"])
            except ImportError:
                continue
        current = vars(mod).get("pytree")
        if current is real or isinstance(current, _PytreeView):
            yield mod, names


def check(tree, value, leaves_only: bool) -> bool:
    """crosscheck: against stock's ``tree_flatten(tree)``, ``value`` (a served
    ``tree_leaves``) holds the same leaves, or (a served map) has the same structure
    (``TreeSpec.flatten_up_to``: the same container types, lengths and dict keys) in
    fresh containers."""
    import torch.utils._pytree as p

    from fastfake.parity.crosscheck import CrosscheckError

    leaves, spec = p.tree_flatten(tree)
    if leaves_only:
        ok = [id(x) for x in value] == [id(x) for x in leaves]
        why = f"{len(value)} leaves, not stock's {len(leaves)} in its order"
    else:
        try:
            # (fresh but for the empty tuple, which CPython keeps as one object)
            ok = len(spec.flatten_up_to(value)) == len(leaves) and (
                spec.is_leaf() or value is not tree or value == ())
            why = "the input's own container"
        except (TypeError, ValueError) as e:
            ok, why = False, str(e)
    if not ok:
        raise CrosscheckError(f"fastfake crosscheck: pytree map of a {type(tree).__name__} differs from stock "
                              f"({spec}): {why}")
    return True


def apply(on: bool, crosscheck: bool = False) -> None:
    """The table's hook (fastfake/core/accelerations.py): the view at the call sites,
    or ``torch.utils._pytree`` put back."""
    if not available():
        return
    from fastfake.common.originals import patch

    if on:
        setup()
        _C.set_pytree_check(check if crosscheck else None)
    else:
        _C.set_pytree_check(None)
    for mod, names in _call_sites():
        if on:
            patch(mod, "pytree", view(names))
        elif isinstance(vars(mod).get("pytree"), _PytreeView):
            patch(mod, "pytree", None)
