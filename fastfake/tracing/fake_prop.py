"""``FakeTensorProp.run_node`` without the interpreter's no-op wrappers.

``FakeTensorProp`` (Inductor, ``torch.export``, ONNX export and many graph tools
re-run shape propagation with it) spends most of a repeated propagation around the
ops rather than in them once fastfake serves the ops: for each node stock's
``run_node`` enters two generator context managers (``Interpreter._set_current_node``
-> ``fx.traceback.set_current_meta``, which do nothing unless node metadata is being
preserved), builds a lazy debug-log string, fetches the arguments through two
nested helper methods and a closure, dispatches on ``getattr(self, n.op)``, and wraps
the result's snapshot in a per-node closure for ``map_aggregate``.

:func:`run_node` replaces ``FakeTensorProp.run_node`` and does, for the nodes it
covers, exactly what stock's does minus those no-ops:

* ``call_function`` nodes (not ``invoke_subgraph``): the arguments are looked up in
  ``self.env`` with ``map_arg`` (as ``Interpreter.map_nodes_to_values`` does), the
  target is called, ``rebind_unbacked`` runs when the node carries unbacked bindings
  (it returns at once otherwise), the result's snapshot (``snapshot_fake``, as
  stock's ``extract_val``) is stored in ``n.meta["val"]`` and, with a ShapeEnv,
  ``compute_unbacked_bindings`` runs as in stock;
* ``placeholder`` nodes: the next positional argument (``next(self.args_iter)``).

Everything else goes to stock's ``run_node``, counted as
``fake_prop.stock.<reason>``: ``class`` (a subclass of ``FakeTensorProp``, or an
instance or class attribute overriding what ``run_node`` calls), ``node_meta``
(``fx.traceback.preserve_node_meta()`` is on: then ``set_current_meta`` does
work), ``debug_log`` (``torch.fx.interpreter``'s logger at DEBUG), ``env`` (an
environment that is not a plain dict, or an argument missing from it: stock raises
its own error), ``op`` (``get_attr``, ``output``, ``call_module``, ``call_method``,
``invoke_subgraph``), ``placeholder`` (a starred placeholder, or no argument left:
stock's default value or error). Served nodes count ``fake_prop.fast``.

Errors raised by the op itself propagate unchanged, and ``Interpreter.run`` (not
replaced) adds its "While executing ..." context as it does for stock.

It is offered only where the stock functions it stands for are source-identical to
those of a release it was proven on (:data:`fastfake.common.compat.FAKE_PROP_SOURCES`)
and the install-time self-test (feature ``fake_prop``) finds the same node metadata
and ShapeEnv; ``FASTFAKE_DISABLE=fake_prop`` turns it off.
"""
from __future__ import annotations

import logging
import operator
from collections import Counter

_counts: Counter = Counter()
_NAMES = ("fast", "stock.class", "stock.node_meta", "stock.debug_log", "stock.env",
          "stock.op", "stock.placeholder")

#: Filled by :func:`setup`: stock's objects the fast path uses and checks.
_cls = _I = _stock_run_node = _I_run_node = _invoke_subgraph = None
_ftp = _interp = _fx_traceback = _symbolic_shapes = _log = None
_DEBUG = logging.DEBUG
#: What stock's run_node reaches through the instance or the class: a replacement
#: of any of them sends the node to stock.
_METHODS = ("_set_current_node", "fetch_args_kwargs_from_env", "map_nodes_to_values",
            "call_function", "placeholder")
_methods_of = operator.attrgetter(*_METHODS)
_method_names = frozenset(_METHODS) | {"run_node"}
_expected: tuple = ()
#: What stock's ``extract_val`` keeps besides fake tensors and SymInts (int, float
#: and bool on 2.13 and later; none on 2.9), and whether it asks ``is_fake_tensor``
#: (2.14 on) rather than ``isinstance(obj, FakeTensor)``.
_scalars: tuple = ()
_asks_is_fake_tensor = False
#: Tests only: "rebind" skips ``rebind_unbacked``, "bindings" drops the unbacked
#: bindings; the self-test must catch either.
_fault: str | None = None


def counters() -> dict[str, int]:
    return {f"fake_prop.{k}": _counts[k] for k in _NAMES}


def reset_counters() -> None:
    _counts.clear()


def saved_counters() -> dict[str, int]:
    return dict(_counts)


def restore_counters(saved: dict[str, int]) -> None:
    _counts.clear()
    _counts.update(saved)



def available() -> bool:
    from fastfake.common import compat as _compat

    return _compat.fake_prop_proven()


def setup() -> None:
    """Capture stock's ``run_node`` and what the fast path checks (once)."""
    global _cls, _I, _stock_run_node, _I_run_node, _invoke_subgraph, _expected
    global _ftp, _interp, _fx_traceback, _symbolic_shapes, _log, _scalars, _asks_is_fake_tensor
    if _stock_run_node is not None:
        return
    from fastfake.common import compat as _compat
    import torch
    from torch.fx import interpreter
    from torch.fx import traceback as fx_traceback
    from torch.fx.experimental import symbolic_shapes
    from torch.fx.passes import fake_tensor_prop

    _cls = fake_tensor_prop.FakeTensorProp
    _I = interpreter.Interpreter
    _stock_run_node = vars(_cls)["run_node"]
    _I_run_node = vars(_I)["run_node"]
    _expected = _methods_of(_I)
    _invoke_subgraph = getattr(torch.ops.higher_order, "invoke_subgraph", None)
    _ftp, _interp, _fx_traceback, _symbolic_shapes = (
        fake_tensor_prop, interpreter, fx_traceback, symbolic_shapes)
    _log = getattr(interpreter, "log", None)  # (2.9's run_node logs nothing)
    _scalars = (int, float, bool) if _compat.fake_prop_keeps_python_scalars() else ()
    _asks_is_fake_tensor = _compat.fake_prop_asks_is_fake_tensor()


def run_node(self, n):
    """``FakeTensorProp.run_node`` (see the module docstring). Every name stock's
    code would look up at call time (``snapshot_fake``, ``map_arg``, ...) is looked
    up in the same module at call time here too."""
    why = None
    if (
        self.__class__ is not _cls
        or _methods_of(_cls) != _expected
        or _I.run_node is not _I_run_node
        or not _method_names.isdisjoint(vars(self))
    ):
        why = "class"
    elif _fx_traceback.should_preserve_node_meta:
        why = "node_meta"
    elif _log is not None and _log.isEnabledFor(_DEBUG):
        why = "debug_log"
    else:
        op = n.op
        if op == "call_function":
            target = n.target
            env = self.env
            if target is _invoke_subgraph or isinstance(target, str):
                why = "op"
            elif type(env) is not dict:
                why = "env"
            else:
                map_arg = _interp.map_arg
                try:
                    args = map_arg(n.args, env.__getitem__)
                    kwargs = map_arg(n.kwargs, env.__getitem__)
                except KeyError:
                    why = "env"
                else:
                    if not isinstance(args, tuple) or not isinstance(kwargs, dict):
                        why = "env"
        elif op == "placeholder":
            target = n.target
            if not isinstance(target, str) or target.startswith("*"):
                why = "placeholder"
            else:
                try:
                    result = next(self.args_iter)
                except StopIteration:
                    why = "placeholder"
        else:
            why = "op"
    if why is not None:
        _counts["stock." + why] += 1
        return _stock_run_node(self, n)

    if op == "call_function":
        result = target(*args, **kwargs)
    _counts["fast"] += 1
    mode = self._mode
    meta_dict = n.meta
    if op != "placeholder" and meta_dict.get("unbacked_bindings") is not None and _fault != "rebind":
        _symbolic_shapes.rebind_unbacked(mode.shape_env, n, result)
    ftp = _ftp
    if type(result) is ftp.FakeTensor:
        meta = ftp.snapshot_fake(result)
    else:
        meta = ftp.map_aggregate(result, _extractor(mode))
    if meta is not None:
        meta_dict["val"] = meta
        shape_env = mode.shape_env
        if shape_env and (bindings := _symbolic_shapes.compute_unbacked_bindings(shape_env, result)):
            if _fault != "bindings":
                meta_dict["unbacked_bindings"] = bindings
    return result


def _extractor(mode):
    """Stock's ``extract_val`` (FakeTensorProp.run_node's closure), reading the
    same module's names."""
    import torch

    ftp = _ftp

    def extract_val(obj):
        if ftp.is_fake_tensor(obj) if _asks_is_fake_tensor else isinstance(obj, ftp.FakeTensor):
            return ftp.snapshot_fake(obj)
        elif isinstance(obj, torch.Tensor):
            return ftp.snapshot_fake(mode.from_tensor(obj, static_shapes=True))
        elif isinstance(obj, (*ftp.py_sym_types, *_scalars)):
            return obj
        else:
            return None

    return extract_val


def apply(on: bool, crosscheck: bool = False) -> None:
    """The table's hook (fastfake/core/accelerations.py): ``FakeTensorProp.run_node``
    patched or restored."""
    if not available():
        return
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    from fastfake.common.originals import patch

    patch(FakeTensorProp, "run_node", run_node if on else None)
