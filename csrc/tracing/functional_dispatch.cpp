// FunctionalTensorMode.__torch_dispatch__ in C for the plain path.
//
// AOTAutograd traces every op of a compile through the functional mode
// (torch/_subclasses/functional_tensor.py): stock's Python method asks whether
// the op decomposes (a pytree flatten, a dispatcher query per call, and for view
// and mutable ops the mode entered and left around a `decompose` that answers
// NotImplemented), whether it auto-functionalizes or has effects, unwraps the
// FunctionalTensor arguments with a pytree map, syncs view-replay annotations
// (a tracker lookup per argument), swaps the dispatch-key TLS, calls the op at the
// Functionalize key, wraps the outputs with another pytree map and corrects
// aliasing. This does the same for a call whose answers are plain:
//   - the mode is exactly FunctionalTensorMode, not exporting, not pre-dispatch;
//     every type is Tensor, FakeTensor or FunctionalTensor; the op an exact aten
//     OpOverload that is no metadata query, has no inplace_view tag, is not
//     lift_fresh and does not auto-functionalize (its facts, read once per op by
//     fastfake/tracing/functional_dispatch.py with stock's own predicates);
//   - it does not decompose: for an op stock's _can_decompose_fast leaves to
//     autograd_would_have_decomposed, the device of the first tensor argument (a
//     FunctionalTensor) has a backend kernel; for a view or mutable op, no
//     CompositeImplicitAutograd kernel in py_kernels or the dispatcher (stock's
//     decompose answers NotImplemented), and the mode enter / exit stock makes
//     around it is provably a no-op but for the compile-internals flag, which is
//     set as its exit sets it;
//   - no effect registered for the op (the simple registry's entry, read per
//     call), arguments of plain leaves in tuples and lists one level deep;
//   - under proxy tracing, every FunctionalTensor argument is up to date (stock's
//     annotated sync does nothing then) and its tracker entry is found or the
//     tensor does not require grad (stock raises otherwise).
// Then it unwraps, forces the same TLS key sets, sets reapply-views, calls
// `func._op_dk(Functionalize, ...)`, wraps the outputs with the FunctionalTensor
// class as stock does, restores the TLS as stock's finally does and, for an op
// with alias annotations, calls stock's return_and_correct_aliasing. Anything
// else is stock's method, counted by reason. What each proven release's code adds
// or takes away is bound by functional_dispatch_setup_variant (2.9: every op is
// offered to decompose, effects in SIDE_EFFECTS, no Dynamo wrapper, no
// compile-internals flag, bare assertions; 2.14+: the alias / detach step; 2.15:
// the effect registry first).
#include "tracing/functional_dispatch.h"

#include "common/counts.h"
#include "common/fastfake.h"
#include "common/refs.h"
#include "tracing/mode_method.h"
#include "tracing/mode_noop.h"
#include "tracing/sequence.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/TensorOptions.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Layout.h>
#include <torch/csrc/MemoryFormat.h>
#include <torch/csrc/PyInterpreter.h>
#include <torch/csrc/autograd/python_variable.h>

#include <optional>
#include <sstream>

namespace fastfake {

namespace {

struct State {
  PyObject* mode_type = nullptr;
  PyObject* tensor_type = nullptr; // FunctionalTensor
  PyObject* stock = nullptr;
  PyObject* facts = nullptr;
  PyObject* wrap_outputs = nullptr;
  PyObject* alias_fix = nullptr;
  PyObject* registry = nullptr; // torch._library.simple_registry.singleton
  PyObject* dispatch_dict = nullptr; // torch.utils._python_dispatch.__dict__
  PyObject* set_flag = nullptr;
  PyObject* functionalize_key = nullptr;
  PyObject* cia_key = nullptr;
  PyObject* allowed_types = nullptr; // (Tensor, FakeTensor, FunctionalTensor)
  PyObject* sym_types = nullptr; // (SymInt, SymFloat, SymBool)
  PyObject* op_type = nullptr; // OpOverload
  PyObject* metadata_fns = nullptr; // FunctionalTensor.metadata_fns when the facts were read
  PyObject* check = nullptr;
  PyObject* get_callback = nullptr; // torch._C._dynamo.eval_frame.get_eval_frame_callback
  PyObject* eval_frame_dict = nullptr; // torch._dynamo.eval_frame.__dict__
  // what a release adds (fastfake/common/compat.py, functional_dispatch_variant):
  // 2.14+ gives alias / detach of a FunctionalTensor the input's FakeTensor
  // dispatch_keys (fastfake/tracing/functional_dispatch.py, preserve_dispatch_keys);
  // 2.15 asks the effect registry before has_aliasing; 2.9 keeps effects in
  // torch._higher_order_ops.effects.SIDE_EFFECTS (a WeakKeyDictionary by op), has no
  // torch._disable_dynamo wrapper around the method, no compile-internals flag set
  // by the mode's enter / exit, and asserts without a message (layout_2_9)
  PyObject* preserve_keys = nullptr;
  PyObject* alias_op = nullptr;
  PyObject* detach_op = nullptr;
  bool effect_first = false;
  PyObject* side_effects = nullptr; // 2.9's SIDE_EFFECTS, else nullptr (the simple registry)
  bool layout_2_9 = false;
  c10::DispatchKeySet extra_keys;
  bool on = false;
  int fault = 0;
};
State g;

PyObject* s_export = nullptr;
PyObject* s_pre_dispatch = nullptr;
PyObject* s_elem = nullptr;
PyObject* s_op_dk = nullptr;
PyObject* s_data = nullptr;
PyObject* s_effect = nullptr;
PyObject* s_effect_field = nullptr;
PyObject* s_tracer = nullptr;
PyObject* s_tensor_tracker = nullptr;
PyObject* s_proxy = nullptr;
PyObject* s_node = nullptr;
PyObject* s_metadata_fns = nullptr;
PyObject* s_stance = nullptr;
PyObject* s_stance_field = nullptr;
PyObject* s_default = nullptr;

enum Count : size_t {
  Served,
  StockMode,
  StockTypes,
  StockOp,
  StockDecompose,
  StockEffects,
  StockArguments,
  StockSync,
  StockState,
  StockOutputs,
  NumCounts
};
const char* const kCountNames[NumCounts] = {
    "served",          "stock.mode",      "stock.types", "stock.op",    "stock.decompose",
    "stock.effects",   "stock.arguments", "stock.sync",  "stock.state", "stock.outputs"};
uint64_t g_counts[NumCounts] = {};

struct Facts {
  bool plain = false;
  bool decompose_check = false; // stock calls func.decompose (view / mutable ops)
  bool has_aliasing = false; // has_effects is False without a registry lookup
  bool alias_fix = false; // stock's return_and_correct_aliasing does something
  PyObject* qualname = nullptr; // strong
  std::optional<c10::OperatorHandle> handle;
  void release() { Py_CLEAR(qualname); }
};
// func (aten OpOverloads only) -> its facts
FactsTable<Facts> g_facts;

void clear_facts() { g_facts.clear(); }

// The op's facts (fastfake/tracing/functional_dispatch.py, facts): read again for
// every op once FunctionalTensor.metadata_fns is replaced.
const Facts* facts_of(PyObject* func) {
  PyObject* fns = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(g.tensor_type), s_metadata_fns);
  if (fns != g.metadata_fns) {
    clear_facts();
    hold_ref(g.metadata_fns, fns);
  }
  return g_facts.get(func, g.facts, [](PyObject* r, Facts& f) {
    if (PyTuple_GET_SIZE(r) != 6) return;
    f.handle = op_handle(r, 4);
    if (!f.handle.has_value()) return;
    f.plain = true;
    f.decompose_check = PyTuple_GET_ITEM(r, 0) == Py_True;
    f.has_aliasing = PyTuple_GET_ITEM(r, 1) == Py_True;
    f.alias_fix = PyTuple_GET_ITEM(r, 2) == Py_True;
    f.qualname = PyTuple_GET_ITEM(r, 3);
    Py_INCREF(f.qualname);
  });
}

// A pytree leaf that is no container (what stock's maps pass through).
bool plain_leaf(PyObject* x) {
  return fastfake::plain_leaf(x, g.sym_types);
}

bool is_functional(PyObject* x) {
  return reinterpret_cast<PyObject*>(Py_TYPE(x)) == g.tensor_type;
}

// A new tuple or list (as `x` is; exact types) of f(item) for each item of `x`;
// nullptr where f gives nullptr for one (whatever error f set stays set).
template <typename F>
PyObject* map_sequence(PyObject* x, F&& f) {
  const bool tuple = PyTuple_CheckExact(x);
  return new_sequence(tuple, tuple ? PyTuple_GET_SIZE(x) : PyList_GET_SIZE(x),
                      [&](Py_ssize_t i) { return f(tuple ? PyTuple_GET_ITEM(x, i) : PyList_GET_ITEM(x, i)); });
}

// The argument with every FunctionalTensor replaced by its `elem` (new
// reference), the FunctionalTensors it holds appended to `leaves`, the first
// tensor in pytree order to *first; nullptr without an error where the value is
// not one the fast path takes.
PyObject* unwrap(PyObject* x, int depth, c10::SmallVector<PyObject*, 8>& leaves, PyObject** first) {
  if (THPVariable_Check(x)) {
    if (*first == nullptr) *first = x;
    if (is_functional(x)) {
      PyObject* e = instance_attr(x, s_elem);
      if (e == nullptr || !THPVariable_Check(e)) return nullptr;
      leaves.push_back(x);
      Py_INCREF(e);
      return e;
    }
    if (PyObject_TypeCheck(x, reinterpret_cast<PyTypeObject*>(g.tensor_type))) return nullptr;
    Py_INCREF(x);
    return x;
  }
  if (plain_leaf(x)) {
    Py_INCREF(x);
    return x;
  }
  const bool tuple = PyTuple_CheckExact(x);
  // (the arguments tuple is depth 0; a list or tuple in it, depth 1, holds leaves only)
  if (depth > 1 || (!tuple && !PyList_CheckExact(x))) return nullptr;
  return map_sequence(x, [&](PyObject* v) { return unwrap(v, depth + 1, leaves, first); });
}

// Outputs the fast wrap takes: tensors and plain leaves in tuples / lists (the
// structures an op returns); anything else goes to stock's pytree map.
bool plain_outputs(PyObject* x, int depth) {
  if (THPVariable_Check(x) || plain_leaf(x)) return true;
  const bool tuple = PyTuple_CheckExact(x);
  if (depth > 2 || (!tuple && !PyList_CheckExact(x))) return false;
  const Py_ssize_t n = tuple ? PyTuple_GET_SIZE(x) : PyList_GET_SIZE(x);
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!plain_outputs(tuple ? PyTuple_GET_ITEM(x, i) : PyList_GET_ITEM(x, i), depth + 1)) return false;
  }
  return true;
}

// stock's wrap() over the outputs (pytree.tree_map_only(torch.Tensor, wrap, outs)).
PyObject* wrap(PyObject* mode, PyObject* x, bool* any_functional) {
  if (THPVariable_Check(x)) {
    if (PyObject_TypeCheck(x, reinterpret_cast<PyTypeObject*>(g.tensor_type))) {
      PyErr_SetString(PyExc_AssertionError, "x must not be a FunctionalTensor in wrap()");
      return nullptr;
    }
    if (at::functionalization::impl::isFunctionalTensor(THPVariable_Unpack(x))) {
      PyObject* r = PyObject_CallFunctionObjArgs(g.tensor_type, x, mode, nullptr);
      if (r != nullptr && PyObject_TypeCheck(r, reinterpret_cast<PyTypeObject*>(g.tensor_type))) {
        *any_functional = true;
      }
      return r;
    }
    Py_INCREF(x);
    return x;
  }
  const bool tuple = PyTuple_CheckExact(x);
  if (!tuple && !PyList_CheckExact(x)) {
    Py_INCREF(x);
    return x;
  }
  return map_sequence(x, [&](PyObject* v) { return wrap(mode, v, any_functional); });
}

bool any_functional_in(PyObject* x) {
  if (PyObject_TypeCheck(x, reinterpret_cast<PyTypeObject*>(g.tensor_type))) return true;
  const bool tuple = PyTuple_CheckExact(x);
  if (!tuple && !PyList_CheckExact(x)) return false;
  const Py_ssize_t n = tuple ? PyTuple_GET_SIZE(x) : PyList_GET_SIZE(x);
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (any_functional_in(tuple ? PyTuple_GET_ITEM(x, i) : PyList_GET_ITEM(x, i))) return true;
  }
  return false;
}

bool functionalize_active() {
  return !c10::impl::tls_is_dispatch_key_excluded(c10::DispatchKey::Functionalize) &&
      c10::impl::tls_is_dispatch_key_included(c10::DispatchKey::Functionalize);
}

// Stock's annotated sync of the FunctionalTensor arguments is a no-op for these
// (see the file comment): 1 yes, 0 no (stock's), -1 an error that is not stock's.
int sync_is_noop(const c10::SmallVector<PyObject*, 8>& leaves) {
  auto proxy = c10::impl::TorchDispatchModeTLS::get_mode(c10::impl::TorchDispatchModeKey::PROXY);
  PyObject* tracker = nullptr;
  if (proxy.has_value()) {
    PyObject* m = proxy.value()->ptr(getPyInterpreter());
    PyObject* tracer = PyObject_GetAttr(m, s_tracer);
    if (tracer == nullptr) {
      PyErr_Clear();
      return 0;
    }
    tracker = PyObject_GetAttr(tracer, s_tensor_tracker);
    Py_DECREF(tracer);
    if (tracker == nullptr) {
      PyErr_Clear();
      return 0;
    }
  }
  int ok = 1;
  for (PyObject* a : leaves) {
    const at::Tensor& elem = THPVariable_Unpack(instance_attr(a, s_elem));
    if (!at::functionalization::impl::isFunctionalTensor(elem)) {
      ok = 0;
      break;
    }
    if (!at::functionalization::impl::unsafeGetFunctionalWrapper(elem)->is_up_to_date()) {
      ok = 0;
      break;
    }
    if (tracker == nullptr) continue;
    at::Tensor unwrapped = at::functionalization::impl::from_functional_tensor(elem);
    PyObject* u = THPVariable_Wrap(unwrapped);
    if (u == nullptr) {
      ok = -1;
      break;
    }
    PyObject* entry = PyObject_GetItem(tracker, u);
    Py_DECREF(u);
    if (entry == nullptr) {
      const bool key_error = PyErr_ExceptionMatches(PyExc_KeyError);
      PyErr_Clear();
      if (!key_error || unwrapped.requires_grad()) {
        ok = 0;
        break;
      }
      continue;
    }
    PyObject* p = PyObject_GetAttr(entry, s_proxy);
    Py_DECREF(entry);
    PyObject* node = p ? PyObject_GetAttr(p, s_node) : nullptr;
    Py_XDECREF(p);
    if (node == nullptr) {
      PyErr_Clear();
      ok = 0;
      break;
    }
    Py_DECREF(node);
  }
  Py_XDECREF(tracker);
  return ok;
}

// Stock's method is wrapped by torch._disable_dynamo: Dynamo's frame callback is
// None while it runs (under the default stance) and put back after. Where the
// callback is None already and the stance is the default, that wrapper changes
// nothing; elsewhere the call is stock's.
bool dynamo_off() {
  if (g.layout_2_9) return true; // (no wrapper, nothing to prove)
  if (g.get_callback == nullptr || g.eval_frame_dict == nullptr) return false;
  PyObject* cb = PyObject_CallNoArgs(g.get_callback);
  if (cb == nullptr) {
    PyErr_Clear();
    return false;
  }
  const bool none = cb == Py_None;
  Py_DECREF(cb);
  if (!none) return false;
  PyObject* stance = PyDict_GetItemWithError(g.eval_frame_dict, s_stance);
  PyObject* name = stance ? instance_attr(stance, s_stance_field) : nullptr;
  if (name == nullptr || !PyUnicode_Check(name)) {
    PyErr_Clear();
    return false;
  }
  return PyUnicode_Compare(name, s_default) == 0;
}

enum class Outcome { Served, Error, Stock };

Outcome serve(PyObject* mode, PyObject* func, PyObject* types, PyObject* args, PyObject* kwargs, PyObject** result) {
  if (reinterpret_cast<PyObject*>(Py_TYPE(mode)) != g.mode_type || instance_attr(mode, s_export) != Py_False ||
      instance_attr(mode, s_pre_dispatch) != Py_False || !dynamo_off()) {
    g_counts[StockMode]++;
    return Outcome::Stock;
  }
  if (!PyTuple_CheckExact(types) && !PyList_CheckExact(types)) {
    g_counts[StockTypes]++;
    return Outcome::Stock;
  }
  {
    const bool tup = PyTuple_CheckExact(types);
    const Py_ssize_t n = tup ? PyTuple_GET_SIZE(types) : PyList_GET_SIZE(types);
    for (Py_ssize_t i = 0; i < n; ++i) {
      if (!one_of(g.allowed_types, tup ? PyTuple_GET_ITEM(types, i) : PyList_GET_ITEM(types, i))) {
        g_counts[StockTypes]++;
        return Outcome::Stock;
      }
    }
  }
  if (reinterpret_cast<PyObject*>(Py_TYPE(func)) != g.op_type || !PyTuple_CheckExact(args) ||
      (kwargs != nullptr && kwargs != Py_None && !PyDict_CheckExact(kwargs))) {
    g_counts[StockOp]++;
    return Outcome::Stock;
  }
  if (kwargs == Py_None) kwargs = nullptr;
  const Facts* f = facts_of(func);
  PyObject* op_dk = f->plain ? instance_attr(func, s_op_dk) : nullptr;
  if (!f->plain || op_dk == nullptr) {
    g_counts[StockOp]++;
    return Outcome::Stock;
  }
  // the arguments, unwrapped (nothing observable yet)
  c10::SmallVector<PyObject*, 8> leaves;
  PyObject* first = nullptr;
  PyObject* args_u = unwrap(args, 0, leaves, &first);
  PyObject* kwargs_u = nullptr;
  if (args_u != nullptr && kwargs != nullptr && PyDict_GET_SIZE(kwargs) > 0) {
    kwargs_u = PyDict_New();
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (kwargs_u != nullptr && PyDict_Next(kwargs, &pos, &k, &v)) {
      PyObject* u = PyUnicode_CheckExact(k) ? unwrap(v, 1, leaves, &first) : nullptr;
      if (u == nullptr || PyDict_SetItem(kwargs_u, k, u) < 0) {
        Py_XDECREF(u);
        Py_CLEAR(kwargs_u);
        break;
      }
      Py_DECREF(u);
    }
    if (kwargs_u == nullptr) Py_CLEAR(args_u);
  }
  auto give_up = [&](Count why) {
    Py_XDECREF(args_u);
    Py_XDECREF(kwargs_u);
    if (PyErr_Occurred()) PyErr_Clear();
    g_counts[why]++;
    return Outcome::Stock;
  };
  if (args_u == nullptr) return give_up(StockArguments);
  if (!PyTuple_CheckExact(args_u)) return give_up(StockArguments);
  // does not decompose
  bool resync_flag = false;
  try {
    // stock asks func.decompose where _can_decompose_fast says so (view and mutable
    // ops) or autograd_would_have_decomposed does (no tensor argument, or no kernel
    // for the first one's backend)
    bool attempt = f->decompose_check || first == nullptr;
    if (!attempt) {
      if (!is_functional(first)) return give_up(StockDecompose);
      const auto k = backend_key(THPVariable_Unpack(first).device().type());
      if (!k.has_value()) return give_up(StockDecompose);
      attempt = !f->handle->hasKernelForDispatchKey(*k);
    }
    if (attempt) {
      if (decompose_not_implemented(func, *f->handle, g.cia_key) != 1) return give_up(StockDecompose);
      if (enter_exit_is_noop(mode, c10::impl::TorchDispatchModeKey::FUNCTIONAL, g.dispatch_dict,
                             flag_setter(g.layout_2_9, g.set_flag)) != 1) {
        return give_up(StockState);
      }
      resync_flag = true;
    }
  } catch (const std::exception&) {
    return give_up(StockDecompose);
  }
  // no effects (where has_effects asks the registry first, an aliasing op's entry
  // must be there too: stock's lookup would make it). 2.9: an op without alias
  // annotations has effects where SIDE_EFFECTS holds it (a ScriptObject argument,
  // the other way, is no plain leaf: those calls are stock's already)
  if (g.side_effects != nullptr) {
    if (!f->has_aliasing) {
      const int held = PySequence_Contains(g.side_effects, func);
      if (held != 0) return give_up(StockEffects);
    }
  } else if (!f->has_aliasing || g.effect_first) {
    PyObject* data = instance_attr(g.registry, s_data);
    PyObject* entry = data && PyDict_CheckExact(data) ? PyDict_GetItemWithError(data, f->qualname) : nullptr;
    PyObject* holder = entry ? instance_attr(entry, s_effect) : nullptr;
    if (holder == nullptr) return give_up(StockEffects);
    if (!f->has_aliasing && instance_attr(holder, s_effect_field) != Py_None) return give_up(StockEffects);
  }
  if (functionalize_active()) return give_up(StockState);
  int sync = 0;
  try {
    sync = sync_is_noop(leaves);
  } catch (const std::exception&) {
    sync = 0;
  }
  if (sync != 1) return give_up(StockSync);
  if (g.check != nullptr) {
    PyObject* ok = PyObject_CallFunctionObjArgs(g.check, mode, func, args, kwargs ? kwargs : Py_None, nullptr);
    if (ok == nullptr) {
      Py_DECREF(args_u);
      Py_XDECREF(kwargs_u);
      return Outcome::Error;
    }
    Py_DECREF(ok);
  }
  // -- from here on, what stock does --
  if (resync_flag && resync_compile_internals_flag(g.dispatch_dict, flag_setter(g.layout_2_9, g.set_flag)) < 0) {
    Py_DECREF(args_u);
    Py_XDECREF(kwargs_u);
    return Outcome::Error;
  }
  g_counts[Served]++;
  PyObject* out = nullptr;
  PyObject* wrapped = nullptr;
  bool any_functional = false;
  const bool fault = g.fault > 0;
  if (fault) g.fault--;
  try {
    const c10::impl::LocalDispatchKeySet local = c10::impl::tls_local_dispatch_key_set();
    const c10::DispatchKeySet include = local.included_ | c10::DispatchKeySet(c10::DispatchKey::Functionalize);
    const c10::DispatchKeySet exclude = local.excluded_.remove(c10::DispatchKey::Functionalize) - g.extra_keys;
    c10::impl::ForceDispatchKeyGuard guard(include, exclude);
    const bool old_views = at::functionalization::impl::getFunctionalizationReapplyViewsTLS();
    at::functionalization::impl::setFunctionalizationReapplyViewsTLS(true);
    // func._op_dk(DispatchKey.Functionalize, *args_unwrapped, **kwargs_unwrapped)
    const Py_ssize_t n = PyTuple_GET_SIZE(args_u);
    const Py_ssize_t nk = kwargs_u ? PyDict_GET_SIZE(kwargs_u) : 0;
    c10::SmallVector<PyObject*, 16> argv(static_cast<size_t>(1 + n + nk));
    argv[0] = g.functionalize_key;
    for (Py_ssize_t i = 0; i < n; ++i) argv[1 + i] = PyTuple_GET_ITEM(args_u, i);
    PyObject* kwnames = nullptr;
    if (nk > 0) {
      kwnames = PyTuple_New(nk);
      Py_ssize_t pos = 0, j = 0;
      PyObject *k, *v;
      while (kwnames != nullptr && PyDict_Next(kwargs_u, &pos, &k, &v)) {
        Py_INCREF(k);
        PyTuple_SET_ITEM(kwnames, j, k);
        argv[1 + n + j] = v;
        ++j;
      }
    }
    if (nk == 0 || kwnames != nullptr) {
      out = PyObject_Vectorcall(op_dk, argv.data(), static_cast<size_t>(1 + n), kwnames);
    }
    Py_XDECREF(kwnames);
    if (out != nullptr) {
      if (fault) {
        wrapped = out;
        Py_INCREF(wrapped);
      } else if (plain_outputs(out, 0)) {
        wrapped = wrap(mode, out, &any_functional);
      } else {
        g_counts[StockOutputs]++;
        wrapped = PyObject_CallFunctionObjArgs(g.wrap_outputs, mode, out, nullptr);
        any_functional = wrapped != nullptr && any_functional_in(wrapped);
      }
    }
    // stock's finally (the guard then restores the key sets)
    c10::impl::tls_set_dispatch_key_included(c10::DispatchKey::Functionalize, false);
    at::functionalization::impl::setFunctionalizationReapplyViewsTLS(false);
    at::functionalization::impl::setFunctionalizationReapplyViewsTLS(old_views);
  } catch (const std::exception& e) {
    Py_CLEAR(wrapped);
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  Py_XDECREF(out);
  Py_DECREF(args_u);
  Py_XDECREF(kwargs_u);
  if (wrapped == nullptr) return Outcome::Error;
  if (functionalize_active()) {
    Py_DECREF(wrapped);
    if (g.layout_2_9) {
      PyErr_SetNone(PyExc_AssertionError); // (2.9's bare `assert is_excluded or not is_included`)
    } else {
      PyErr_SetString(PyExc_AssertionError,
                      "Functionalization should not already be enabled above this mode after dispatch");
    }
    return Outcome::Error;
  }
  if (g.preserve_keys != nullptr && (func == g.alias_op || func == g.detach_op) && PyTuple_GET_SIZE(args) == 1 &&
      PyObject_TypeCheck(PyTuple_GET_ITEM(args, 0), reinterpret_cast<PyTypeObject*>(g.tensor_type))) {
    PyObject* r = PyObject_CallFunctionObjArgs(g.preserve_keys, PyTuple_GET_ITEM(args, 0), wrapped, nullptr);
    if (r == nullptr) {
      Py_DECREF(wrapped);
      return Outcome::Error;
    }
    Py_DECREF(r);
  }
  if (!any_functional || !f->alias_fix) {
    *result = wrapped;
    return Outcome::Served;
  }
  PyObject* kw = kwargs;
  if (kw == nullptr) {
    kw = PyDict_New();
    if (kw == nullptr) {
      Py_DECREF(wrapped);
      return Outcome::Error;
    }
  } else {
    Py_INCREF(kw);
  }
  PyObject* r = PyObject_CallFunctionObjArgs(g.alias_fix, func, args, kw, wrapped, nullptr);
  Py_DECREF(kw);
  Py_DECREF(wrapped);
  if (r == nullptr) return Outcome::Error;
  *result = r;
  return Outcome::Served;
}

PyObject* call_stock(PyObject* mode, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return call_with_mode(g.stock, mode, args, nargs, kwnames);
}

PyObject* dispatch(PyObject* mode, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (!g.on || kwnames != nullptr || nargs < 2 || nargs > 4) return call_stock(mode, args, nargs, kwnames);
  PyObject* r = nullptr;
  PyObject* empty = nullptr;
  PyObject* a = nargs >= 3 ? args[2] : (empty = PyTuple_New(0));
  if (a == nullptr) return nullptr;
  const Outcome o = serve(mode, args[0], args[1], a, nargs == 4 ? args[3] : nullptr, &r);
  Py_XDECREF(empty);
  if (o == Outcome::Stock) return call_stock(mode, args, nargs, kwnames);
  return o == Outcome::Served ? r : nullptr;
}

PyMethodDef g_def = {
    "__torch_dispatch__",
    reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(dispatch)),
    METH_FASTCALL | METH_KEYWORDS,
    "FunctionalTensorMode.__torch_dispatch__ in C by fastfake for the plain path (stock's otherwise)."};

} // namespace

std::string functional_dispatch_setup(PyObject* mode_type, PyObject* tensor_type, PyObject* stock, PyObject* facts,
                                      PyObject* wrap_outputs, PyObject* alias_fix, PyObject* registry,
                                      PyObject* dispatch_module_dict, PyObject* set_flag, PyObject* functionalize_key,
                                      PyObject* cia_key, PyObject* type_tuples, PyObject* extra_keys_raw) {
  if (s_export == nullptr) {
    s_export = PyUnicode_InternFromString("export");
    s_pre_dispatch = PyUnicode_InternFromString("pre_dispatch");
    s_elem = PyUnicode_InternFromString("elem");
    s_op_dk = PyUnicode_InternFromString("_op_dk");
    s_data = PyUnicode_InternFromString("_data");
    s_effect = PyUnicode_InternFromString("effect");
    s_effect_field = PyUnicode_InternFromString("_effect");
    s_tracer = PyUnicode_InternFromString("tracer");
    s_tensor_tracker = PyUnicode_InternFromString("tensor_tracker");
    s_proxy = PyUnicode_InternFromString("proxy");
    s_node = PyUnicode_InternFromString("node");
    s_metadata_fns = PyUnicode_InternFromString("metadata_fns");
    s_stance = PyUnicode_InternFromString("_stance");
    s_stance_field = PyUnicode_InternFromString("stance");
    s_default = PyUnicode_InternFromString("default");
  }
  clear_facts();
  hold_ref(g.mode_type, mode_type);
  hold_ref(g.tensor_type, tensor_type);
  hold_ref(g.stock, stock);
  hold_ref(g.facts, facts);
  hold_ref(g.wrap_outputs, wrap_outputs);
  hold_ref(g.alias_fix, alias_fix);
  hold_ref(g.registry, registry);
  hold_ref(g.dispatch_dict, dispatch_module_dict);
  hold_ref(g.set_flag, set_flag);
  hold_ref(g.functionalize_key, functionalize_key);
  hold_ref(g.cia_key, cia_key);
  // type_tuples: ((Tensor, FakeTensor, FunctionalTensor), (SymInt, SymFloat, SymBool), OpOverload)
  hold_ref(g.allowed_types, PyTuple_GET_ITEM(type_tuples, 0));
  hold_ref(g.sym_types, PyTuple_GET_ITEM(type_tuples, 1));
  hold_ref(g.op_type, PyTuple_GET_ITEM(type_tuples, 2));
  hold_ref(g.metadata_fns, nullptr);
  const unsigned long long raw = PyLong_AsUnsignedLongLong(extra_keys_raw);
  if (PyErr_Occurred()) return "";
  const c10::DispatchKeySet keys(c10::DispatchKeySet::RAW, static_cast<uint64_t>(raw));
  g.extra_keys = keys;
  std::ostringstream text;
  text << keys;
  return text.str();
}

void functional_dispatch_setup_dynamo(PyObject* get_callback, PyObject* eval_frame_dict) {
  hold_ref(g.get_callback, get_callback);
  hold_ref(g.eval_frame_dict, eval_frame_dict);
}

void functional_dispatch_setup_variant(PyObject* preserve_keys, PyObject* alias_op, PyObject* detach_op,
                                       bool effect_first, PyObject* side_effects, bool layout_2_9) {
  hold_ref(g.preserve_keys, preserve_keys);
  hold_ref(g.alias_op, alias_op);
  hold_ref(g.detach_op, detach_op);
  g.effect_first = effect_first;
  hold_ref(g.side_effects, side_effects == Py_None ? nullptr : side_effects);
  g.layout_2_9 = layout_2_9;
}

PyObject* functional_dispatch_function() {
  if (g.mode_type == nullptr || !PyType_Check(g.mode_type)) {
    PyErr_SetString(PyExc_RuntimeError, "fastfake: functional_dispatch_function() before functional_dispatch_setup()");
    return nullptr;
  }
  return PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(g.mode_type), &g_def);
}

void functional_dispatch_enable(bool on) {
  g.on = on;
}

void functional_dispatch_set_check(PyObject* check) {
  hold_ref(g.check, check);
}

void functional_dispatch_clear() {
  clear_facts();
}

std::map<std::string, uint64_t> functional_dispatch_counts() {
  return counts_as_map(kCountNames, g_counts);
}

void functional_dispatch_set_counts(const std::map<std::string, uint64_t>& counts) {
  counts_from_map(kCountNames, g_counts, counts);
}

void functional_dispatch_inject_fault(int n) {
  g.fault = n;
}

} // namespace fastfake
