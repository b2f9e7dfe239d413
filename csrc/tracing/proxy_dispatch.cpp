// ProxyTorchDispatchMode.__torch_dispatch__ in C for the plain path.
//
// make_fx (and so AOTAutograd, export) records every op through the proxy mode
// (torch/fx/experimental/proxy_tensor.py): stock's Python method counts the call
// (torch.utils._stats.count), sets the original-aten context, and proxy_call
// flattens the arguments with pytree, checks their types, asks the decomposition
// table and autograd_would_have_decomposed (for an op the backend has no kernel
// for, the mode entered and left around a `decompose` that answers
// NotImplemented), fetches the proxies of the tensor and SymInt arguments,
// unflattens them, names the node, asks the tracer for it (`create_proxy`), runs
// the op with thunkification on, tracks the output (the proxy slot, the node's
// `val` and `tensor_meta`, the unbacked bindings) and records the pointwise
// barrier. This does the same for a call whose answers are plain:
//   - the mode is exactly ProxyTorchDispatchMode, not pre-dispatch; the names of
//     proxy_tensor the path relies on are still stock's (checked per call);
//   - the op an exact OpOverload that is no metadata query, not is_nonzero, not
//     lift_fresh(_copy), without the data_dependent_output tag (its facts, read
//     once per op by fastfake/tracing/proxy_dispatch.py), not in the mode's
//     decomposition table;
//   - arguments of tensors of HANDLED_TYPES and plain leaves in tuples and lists
//     one level deep (keyword values alike); every tensor tracked, with no
//     constant (so no constant propagation);
//   - where autograd_would_have_decomposed says it would decompose, stock's
//     decompose answers NotImplemented and the mode enter / exit around it is a
//     no-op but for the compile-internals flag (csrc/tracing/mode_noop.h).
// Then it does stock's steps in stock's order, with the tracer's own
// `create_proxy` (every node meta stock's), stock's `fetch_sym_proxy` for SymInt
// arguments, stock's `set_proxy_slot`, `snapshot_fake` and
// `_extract_tensor_metadata` for an output that is one strided FakeTensor (its
// SymInt sizes, strides, numel and offset given their slots as track_tensor
// gives them, where no torch-function mode would see those reads), and stock's
// `track_tensor_tree` for any other output. prim.device is
// served as stock's method serves it (the count, the context, the call).
// Anything else is stock's method, counted by reason.
#include "tracing/proxy_dispatch.h"

#include "common/counts.h"
#include "common/fastfake.h"
#include "common/bindings.h"
#include "common/refs.h"
#include "tracing/mode_method.h"
#include "tracing/mode_noop.h"
#include "tracing/sequence.h"

#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Layout.h>
#include <torch/csrc/MemoryFormat.h>
#include <torch/csrc/PyInterpreter.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <optional>
#include <utility>
#include <vector>

namespace fastfake {

namespace {

struct State {
  PyObject* mode_type = nullptr;
  PyObject* stock = nullptr;
  PyObject* facts = nullptr;
  PyObject* sym_proxy = nullptr;
  PyObject* module_dict = nullptr;
  NameBindings module_names;
  PyObject* stats_dict = nullptr;
  PyObject* counter_key = nullptr;
  PyObject* traceback_dict = nullptr;
  PyObject* has_preserved = nullptr;
  PyObject* original_aten = nullptr;
  PyObject* device_op = nullptr;
  PyObject* handled_types = nullptr;
  PyObject* fake_type = nullptr;
  PyObject* proxy_type = nullptr;
  PyObject* sym_types = nullptr;
  PyObject* op_type = nullptr;
  PyObject* target_to_str = nullptr;
  PyObject* dispatch_dict = nullptr;
  PyObject* set_flag = nullptr;
  PyObject* cia_key = nullptr;
  PyObject* pre_dispatch_proxy = nullptr;
  // stock's functions the path calls (the values of module_names)
  PyObject* track_tensor_tree = nullptr;
  PyObject* set_proxy_slot = nullptr;
  PyObject* snapshot_fake = nullptr;
  PyObject* set_unbacked_bindings = nullptr;
  PyObject* pointwise_barrier = nullptr;
  PyObject* proxy_tensor_type = nullptr;
  // a symbolic output's SymInts (track_tensor's try_set_proxy_slot)
  PyObject* symnode_dict_type = nullptr;
  PyObject* thunk_type = nullptr;
  PyObject* partial = nullptr;
  PyObject* sym_slot_proxy = nullptr;
  PyObject* sym_ops = nullptr; // (sym_size.int, sym_stride.int, sym_numel.default, sym_storage_offset.default)
  PyObject* log = nullptr;
  PyObject* disabled_torch_function = nullptr;
  PyObject* check = nullptr;
  // 2.14+: stock's _coor_enabled (proxy_call's device-as-parameter rewrite), nullptr
  // on a release without it; OpOverload.__call__ asks `_pyobj_dispatcher` first
  PyObject* coor_enabled = nullptr;
  bool pyobj_dispatcher = false;
  // 2.9: proxy_call offers every op to decompose, the decomposition table is the
  // module's CURRENT_DECOMPOSITION_TABLE, ORIGINAL_ATEN a module global (not a
  // ContextVar), and the mode's enter / exit set no compile-internals flag in C
  bool layout_2_9 = false;
  bool on = false;
  int fault = 0;
  int sym_fault = 0;
};
State g;

struct Names {
  PyObject* pre_dispatch;
  PyObject* tracer;
  PyObject* decomposition_table;
  PyObject* tensor_tracker;
  PyObject* get;
  PyObject* proxy;
  PyObject* constant;
  PyObject* enable_thunkify;
  PyObject* graph;
  PyObject* target_to_str;
  PyObject* create_proxy;
  PyObject* call_function;
  PyObject* name_kw; // ("name",)
  PyObject* track_kw; // ("constant", "tracer")
  PyObject* include_real_kw; // ("include_real",)
  PyObject* node;
  PyObject* op;
  PyObject* meta;
  PyObject* val;
  PyObject* tensor_meta;
  PyObject* op_attr; // OpOverload._op
  PyObject* pyobj_dispatcher; // OpOverload._pyobj_dispatcher (2.14+)
  PyObject* decomp_layers;
  PyObject* emulate;
  PyObject* shape_env;
  PyObject* pending;
  PyObject* ignorable;
  PyObject* counter;
  PyObject* preserve;
  PyObject* current_meta;
  PyObject* original_aten;
  PyObject* has_preserved;
  PyObject* device;
  PyObject* symnode_tracker;
  PyObject* sym_node_dict;
  PyObject* is_enabled_for;
  PyObject* torch_function;
  PyObject* debug_level;
  PyObject* current_table; // (2.9's module globals)
  PyObject* original_aten_global;
  PyObject* extract_tensor_metadata;
};

const Names& names() {
  static const Names n = {
      PyUnicode_InternFromString("pre_dispatch"),
      PyUnicode_InternFromString("tracer"),
      PyUnicode_InternFromString("decomposition_table"),
      PyUnicode_InternFromString("tensor_tracker"),
      PyUnicode_InternFromString("get"),
      PyUnicode_InternFromString("proxy"),
      PyUnicode_InternFromString("constant"),
      PyUnicode_InternFromString("enable_thunkify"),
      PyUnicode_InternFromString("graph"),
      PyUnicode_InternFromString("_target_to_str"),
      PyUnicode_InternFromString("create_proxy"),
      PyUnicode_InternFromString("call_function"),
      Py_BuildValue("(s)", "name"),
      Py_BuildValue("(ss)", "constant", "tracer"),
      Py_BuildValue("(s)", "include_real"),
      PyUnicode_InternFromString("node"),
      PyUnicode_InternFromString("op"),
      PyUnicode_InternFromString("meta"),
      PyUnicode_InternFromString("val"),
      PyUnicode_InternFromString("tensor_meta"),
      PyUnicode_InternFromString("_op"),
      PyUnicode_InternFromString("_pyobj_dispatcher"),
      PyUnicode_InternFromString("decomp_layers"),
      PyUnicode_InternFromString("emulate_precision_casts"),
      PyUnicode_InternFromString("shape_env"),
      PyUnicode_InternFromString("pending_fresh_unbacked_symbols"),
      PyUnicode_InternFromString("ignorable_fresh_unbacked_symbols"),
      PyUnicode_InternFromString("simple_call_counter"),
      PyUnicode_InternFromString("should_preserve_node_meta"),
      PyUnicode_InternFromString("current_meta"),
      PyUnicode_InternFromString("original_aten"),
      PyUnicode_InternFromString("has_preserved_node_meta"),
      PyUnicode_InternFromString("device"),
      PyUnicode_InternFromString("symnode_tracker"),
      PyUnicode_InternFromString("sym_node_dict"),
      PyUnicode_InternFromString("isEnabledFor"),
      PyUnicode_InternFromString("__torch_function__"),
      PyLong_FromLong(10), // logging.DEBUG
      PyUnicode_InternFromString("CURRENT_DECOMPOSITION_TABLE"),
      PyUnicode_InternFromString("ORIGINAL_ATEN"),
      PyUnicode_InternFromString("_extract_tensor_metadata"),
  };
  return n;
}

enum Count : size_t {
  Served,
  ServedDevice,
  StockMode,
  StockOp,
  StockArguments,
  StockDecompose,
  StockState,
  TrackedByStock,
  TrackedSymbolic,
  NumCounts
};
const char* const kCountNames[NumCounts] = {"served",          "served.device",  "stock.mode",
                                            "stock.op",        "stock.arguments", "stock.decompose",
                                            "stock.state",     "tracked_by_stock", "tracked.symbolic"};
uint64_t g_counts[NumCounts] = {};

struct Facts {
  bool plain = false;
  PyObject* name = nullptr; // the node name stock's _target_to_str gives (strong)
  std::optional<c10::OperatorHandle> handle;
  void release() { Py_CLEAR(name); }
};
FactsTable<Facts> g_facts; // func -> its facts

void clear_facts() { g_facts.clear(); }

// The op's facts (fastfake/tracing/proxy_dispatch.py, facts).
const Facts* facts_of(PyObject* func) {
  return g_facts.get(func, g.facts, [](PyObject* r, Facts& f) {
    if (PyTuple_GET_SIZE(r) != 3 || !PyUnicode_CheckExact(PyTuple_GET_ITEM(r, 0))) return;
    f.handle = op_handle(r, 1);
    if (!f.handle.has_value()) return;
    f.plain = true;
    f.name = PyTuple_GET_ITEM(r, 0);
    Py_INCREF(f.name);
  });
}

bool is_sym(PyObject* x) {
  return exact_sym(x, g.sym_types);
}

bool plain_leaf(PyObject* x) {
  return fastfake::plain_leaf(x, g.sym_types);
}

// The names of proxy_tensor the path relies on are bound as at setup.
bool module_names_hold() {
  if (!g.module_names.hold(g.module_dict)) return false;
  PyObject* has = PyDict_GetItemWithError(g.traceback_dict, names().has_preserved);
  if (has != g.has_preserved) {
    PyErr_Clear();
    return false;
  }
  return true;
}

struct Args {
  c10::SmallVector<PyObject*, 8> tensors; // borrowed, in pytree order
  c10::SmallVector<PyObject*, 8> proxies; // strong: each tensor's proxy
  bool device = false; // a torch.device among the leaves
  ~Args() {
    for (PyObject* p : proxies) Py_DECREF(p);
  }
};

// The value takes the plain path (a leaf, or a tuple / list of leaves below
// depth 1); its tensors appended in pytree order.
bool walk(PyObject* x, int depth, Args& a) {
  if (THPVariable_Check(x)) {
    if (!one_of(g.handled_types, reinterpret_cast<PyObject*>(Py_TYPE(x)))) return false;
    a.tensors.push_back(x);
    return true;
  }
  if (plain_leaf(x)) {
    if (THPDevice_Check(x)) a.device = true;
    return true;
  }
  const bool tuple = PyTuple_CheckExact(x);
  if (depth > 0 || (!tuple && !PyList_CheckExact(x))) return false;
  const Py_ssize_t n = tuple ? PyTuple_GET_SIZE(x) : PyList_GET_SIZE(x);
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!walk(tuple ? PyTuple_GET_ITEM(x, i) : PyList_GET_ITEM(x, i), depth + 1, a)) return false;
  }
  return true;
}

// The value with each tensor replaced by its proxy (in order, from a.proxies) and
// each SymInt by stock's fetch_sym_proxy of it (new reference; nullptr with an
// error set).
PyObject* rebuild(PyObject* x, size_t& next, Args& a, PyObject* tracer) {
  if (THPVariable_Check(x)) {
    PyObject* p = a.proxies[next++];
    Py_INCREF(p);
    return p;
  }
  if (is_sym(x)) return PyObject_CallFunctionObjArgs(g.sym_proxy, tracer, x, nullptr);
  if (plain_leaf(x)) {
    Py_INCREF(x);
    return x;
  }
  const bool tuple = PyTuple_CheckExact(x);
  return new_sequence(tuple, tuple ? PyTuple_GET_SIZE(x) : PyList_GET_SIZE(x), [&](Py_ssize_t i) {
    return rebuild(tuple ? PyTuple_GET_ITEM(x, i) : PyList_GET_ITEM(x, i), next, a, tracer);
  });
}

// torch.utils._stats.count's increment of the method's label.
int count_call() {
  PyObject* counter = PyDict_GetItemWithError(g.stats_dict, names().counter);
  if (counter == nullptr) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_NameError, "name 'simple_call_counter' is not defined");
    return -1;
  }
  Py_INCREF(counter);
  int rc = -1;
  const int has = PySequence_Contains(counter, g.counter_key);
  PyObject* zero = has == 0 ? PyLong_FromLong(0) : nullptr;
  if (has > 0 || (zero != nullptr && PyObject_SetItem(counter, g.counter_key, zero) == 0)) {
    PyObject* v = PyObject_GetItem(counter, g.counter_key);
    PyObject* one = v ? PyLong_FromLong(1) : nullptr;
    PyObject* w = one ? PyNumber_Add(v, one) : nullptr;
    if (w != nullptr && PyObject_SetItem(counter, g.counter_key, w) == 0) rc = 0;
    Py_XDECREF(w);
    Py_XDECREF(one);
    Py_XDECREF(v);
  }
  Py_XDECREF(zero);
  Py_DECREF(counter);
  return rc;
}

// set_original_aten_op(func): entered (0; token set where stock sets the
// context) or an error (-1).
int aten_enter(PyObject* func, PyObject** token) {
  *token = nullptr;
  bool none = false;
  if (g.layout_2_9) {
    // (2.9: `global ORIGINAL_ATEN`)
    PyObject* v = PyDict_GetItemWithError(g.module_dict, names().original_aten_global);
    if (v == nullptr) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_NameError, "name 'ORIGINAL_ATEN' is not defined");
      return -1;
    }
    none = v == Py_None;
  } else {
    PyObject* v = nullptr;
    if (PyContextVar_Get(g.original_aten, nullptr, &v) < 0) return -1;
    none = v == Py_None;
    Py_XDECREF(v);
  }
  if (!none) return 0;
  PyObject* preserve = PyDict_GetItemWithError(g.traceback_dict, names().preserve);
  if (preserve == nullptr) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_NameError, "name 'should_preserve_node_meta' is not defined");
    return -1;
  }
  const int on = PyObject_IsTrue(preserve);
  if (on <= 0) return on;
  if (g.layout_2_9) {
    if (PyDict_SetItem(g.module_dict, names().original_aten_global, func) < 0) return -1;
    Py_INCREF(Py_None);
    *token = Py_None; // (the exit puts None back)
  } else {
    *token = PyContextVar_Set(g.original_aten, func);
  }
  if (*token == nullptr) return -1;
  PyObject* meta = PyDict_GetItemWithError(g.traceback_dict, names().current_meta);
  if (meta == nullptr || PyObject_SetItem(meta, names().original_aten, func) < 0) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_NameError, "name 'current_meta' is not defined");
    return -1; // (the token is reset by aten_exit)
  }
  return 0;
}

// The context's finally: the variable reset, current_meta["original_aten"] =
// None; an error of the body kept unless this raises. Returns `ok` (false where
// an error is set).
bool aten_exit(PyObject* token, bool ok) {
  if (token == nullptr) return ok;
  return run_finally(ok, [&] {
    bool fine = g.layout_2_9 ? PyDict_SetItem(g.module_dict, names().original_aten_global, Py_None) == 0
                             : PyContextVar_Reset(g.original_aten, token) == 0;
    Py_DECREF(token);
    if (fine) {
      PyObject* meta = PyDict_GetItemWithError(g.traceback_dict, names().current_meta);
      fine = meta != nullptr && PyObject_SetItem(meta, names().original_aten, Py_None) == 0;
      if (!fine && !PyErr_Occurred()) PyErr_SetString(PyExc_NameError, "name 'current_meta' is not defined");
    }
    return fine;
  });
}

// func(*args, **kwargs) through the op's `_op` (OpOverload.__call__'s body; from
// 2.14 on, only while the op has no `_pyobj_dispatcher`: otherwise its __call__,
// which asks the dispatcher's TLS which way to go).
PyObject* call_op(PyObject* func, PyObject* args, PyObject* kwargs) {
  if (g.pyobj_dispatcher && instance_attr(func, names().pyobj_dispatcher) != Py_None) {
    return PyObject_Call(func, args, kwargs);
  }
  PyObject* op = instance_attr(func, names().op_attr);
  if (op == nullptr) return PyObject_Call(func, args, kwargs);
  return PyObject_Call(op, args, kwargs);
}

// Stock's _set_unbacked_bindings(out, proxy) where no unbacked symbol is pending:
// compute_unbacked_bindings clears the two lists and finds nothing. 1 done, 0
// stock's function to call, -1 error.
int unbacked_bindings_none() {
  auto fake = c10::impl::TorchDispatchModeTLS::get_mode(c10::impl::TorchDispatchModeKey::FAKE);
  if (!fake.has_value()) return 1;
  PyObject* mode = fake.value()->ptr(getPyInterpreter());
  const int truthy = PyObject_IsTrue(mode);
  if (truthy <= 0) return truthy < 0 ? -1 : 1;
  PyObject* env = PyObject_GetAttr(mode, names().shape_env);
  if (env == nullptr) return -1;
  int rc = 0;
  const int env_true = PyObject_IsTrue(env);
  if (env_true < 0) {
    rc = -1;
  } else if (env_true == 0) {
    rc = 1;
  } else {
    PyObject* fresh = instance_attr(env, names().pending);
    PyObject* ign = instance_attr(env, names().ignorable);
    if (fresh != nullptr && ign != nullptr && PyList_CheckExact(fresh) && PyList_CheckExact(ign) &&
        PyList_GET_SIZE(fresh) == 0) {
      rc = PyList_GET_SIZE(ign) == 0 || PyList_SetSlice(ign, 0, PyList_GET_SIZE(ign), nullptr) == 0 ? 1 : -1;
    }
  }
  Py_DECREF(env);
  return rc;
}

// `obj.enable_thunkify = value`, the old value to *old (new reference).
int set_thunkify(PyObject* tracer, PyObject* value, PyObject** old) {
  *old = PyObject_GetAttr(tracer, names().enable_thunkify);
  if (*old == nullptr) return -1;
  if (PyObject_SetAttr(tracer, names().enable_thunkify, value) < 0) {
    Py_CLEAR(*old);
    return -1;
  }
  return 0;
}

// _enable_thunkify's finally: the old value back (an error of the body kept
// unless this raises). Returns `ok`.
bool restore_thunkify(PyObject* tracer, PyObject* old, bool ok) {
  return run_finally(ok, [&] {
    const bool fine = PyObject_SetAttr(tracer, names().enable_thunkify, old) == 0;
    Py_DECREF(old);
    return fine;
  });
}

// The dict of the tracer's _SymNodeDict (strong), or nullptr where a symbolic
// output's SymInts are not tracked here: a torch-function mode is on (stock's
// `tensor.shape`, `.stride()`, `.numel()` and `.storage_offset()` would run it),
// FakeTensor has a __torch_function__ of its own, proxy_tensor's logger shows
// debug records (set_proxy_slot logs even the SymInts it then leaves alone), or
// the tracker is not stock's _SymNodeDict over a plain dict. Error: -1.
int symnode_dict(PyObject* tracer, PyObject** dict) {
  const Names& n = names();
  *dict = nullptr;
  if (at::impl::torch_function_mode_enabled()) return 0;
  PyObject* tf = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(g.fake_type), n.torch_function);
  if (tf != g.disabled_torch_function) return 0;
  PyObject* enabled = PyObject_CallMethodOneArg(g.log, n.is_enabled_for, n.debug_level);
  if (enabled == nullptr) return -1;
  const int shows = PyObject_IsTrue(enabled);
  Py_DECREF(enabled);
  if (shows != 0) return shows < 0 ? -1 : 0;
  PyObject* tracker = instance_attr(tracer, n.symnode_tracker);
  if (tracker == nullptr || reinterpret_cast<PyObject*>(Py_TYPE(tracker)) != g.symnode_dict_type) return 0;
  PyObject* d = instance_attr(tracker, n.sym_node_dict);
  if (d == nullptr || !PyDict_CheckExact(d)) return 0;
  Py_INCREF(d);
  *dict = d;
  return 1;
}

// track_tensor's try_set_proxy_slot(s, <lambda of `op`>, *index) for one size,
// stride, numel or offset `s` of the output: a plain int is left; a SymInt whose
// node the tracer knows keeps its proxy (set_proxy_slot never clobbers one, so
// stock's thunk is made and dropped); any other gets stock's set_proxy_slot with
// a Thunk of functools.partial(sym_slot_proxy, tracer, op, proxy, s, *index),
// which computes what stock's lambda computes when forced. False: error (a C++
// error thrown here is translated by track_syms, its only caller).
bool try_set_sym_slot(const c10::SymInt& si, PyObject* dict, PyObject* tracer, PyObject* op, PyObject* proxy,
                      PyObject* index) {
  if (!si.is_symbolic()) return true;
  // the node `torch.SymInt(...).node` would be (py_sym_node: nullptr for a SymNode
  // that is not Python's, whose node only the wrapper made by py::cast has)
  PyObject* node = py_sym_node(si.toSymNodeImplUnowned());
  if (node != nullptr) {
    const int known = PyDict_Contains(dict, node);
    if (known != 0) return known > 0;
  }
  PyObject* s = py::cast(si).release().ptr();
  if (s == nullptr) return false;
  bool ok = true;
  if (node == nullptr) {
    PyObject* wrapped = PyObject_GetAttr(s, names().node);
    const int known = wrapped ? PyDict_Contains(dict, wrapped) : -1;
    Py_XDECREF(wrapped);
    ok = known == 0;
    if (known > 0) {
      Py_DECREF(s);
      return true;
    }
  }
  if (ok) {
    PyObject* argv[6] = {g.sym_slot_proxy, tracer, op, proxy, s, index};
    PyObject* partial = PyObject_Vectorcall(g.partial, argv, index != nullptr ? 6 : 5, nullptr);
    PyObject* thunk = partial ? PyObject_CallOneArg(g.thunk_type, partial) : nullptr;
    PyObject* r = thunk ? PyObject_CallFunctionObjArgs(g.set_proxy_slot, s, tracer, thunk, nullptr) : nullptr;
    ok = r != nullptr;
    Py_XDECREF(r);
    Py_XDECREF(thunk);
    Py_XDECREF(partial);
  }
  Py_DECREF(s);
  return ok;
}

// track_tensor's loop over a symbolic output's sizes, strides, numel and storage
// offset, in its order (numel is read after the strides' slots are set: a first
// read computes it with SymNode operations the tracer records). A C++ error of a
// read (a SymNode operation's Python error, a c10 error) becomes the Python error
// stock's binding of that read raises (torch's own translation). False: error.
bool track_syms(const at::Tensor& t, PyObject* dict, PyObject* tracer, PyObject* proxy) {
  HANDLE_TH_ERRORS
  PyObject* ops[4];
  for (int k = 0; k < 4; ++k) ops[k] = PyTuple_GET_ITEM(g.sym_ops, k);
  auto each = [&](c10::SymIntArrayRef xs, PyObject* op) {
    for (size_t i = 0; i < xs.size(); ++i) {
      PyObject* index = PyLong_FromSize_t(i);
      if (index == nullptr) return false;
      const bool ok = try_set_sym_slot(xs[i], dict, tracer, op, proxy, index);
      Py_DECREF(index);
      if (!ok) return false;
    }
    return true;
  };
  return each(t.sym_sizes(), ops[0]) && each(t.sym_strides(), ops[1]) &&
      try_set_sym_slot(t.sym_numel(), dict, tracer, ops[2], proxy, nullptr) &&
      try_set_sym_slot(t.sym_storage_offset(), dict, tracer, ops[3], proxy, nullptr);
  END_HANDLE_TH_ERRORS_RET(false)
}

// track_tensor_tree(out, proxy, constant=None, tracer=tracer) for one strided
// FakeTensor: _set_unbacked_bindings, track_tensor (the slots of its SymInt
// sizes, strides, numel and offset where it has any, then the tensor's slot),
// set_meta. 1 done, 0 not such an output (stock's function tracks it), -1 error.
int track_one(PyObject* out, PyObject* proxy, PyObject* tracer) {
  const Names& n = names();
  if (reinterpret_cast<PyObject*>(Py_TYPE(out)) != g.fake_type || reinterpret_cast<PyObject*>(Py_TYPE(proxy)) != g.proxy_type) {
    return 0;
  }
  const at::Tensor& t = THPVariable_Unpack(out);
  if (t.layout() != c10::kStrided) return 0;
  PyObject* dict = nullptr;
  if (t.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) {
    const int rc = symnode_dict(tracer, &dict);
    if (rc <= 0) return rc;
  }
  PyObject* node = PyObject_GetAttr(proxy, n.node);
  if (node == nullptr) {
    Py_XDECREF(dict);
    return -1;
  }
  PyObject* op = PyObject_GetAttr(node, n.op);
  PyObject* meta = op ? PyObject_GetAttr(node, n.meta) : nullptr;
  PyObject* ptracer = meta ? PyObject_GetAttr(proxy, n.tracer) : nullptr;
  Py_DECREF(node);
  auto done = [&](int rc) {
    Py_XDECREF(op);
    Py_XDECREF(meta);
    Py_XDECREF(ptracer);
    Py_XDECREF(dict);
    return rc;
  };
  if (ptracer == nullptr) return done(-1);
  if (!PyUnicode_Check(op) || PyUnicode_Compare(op, n.call_function) != 0 || !PyDict_CheckExact(meta)) {
    if (PyErr_Occurred()) return done(-1);
    return done(0);
  }
  const int none = unbacked_bindings_none();
  if (none < 0) return done(-1);
  if (none == 0) {
    PyObject* r = PyObject_CallFunctionObjArgs(g.set_unbacked_bindings, out, proxy, nullptr);
    if (r == nullptr) return done(-1);
    Py_DECREF(r);
  }
  if (dict != nullptr) {
    g_counts[TrackedSymbolic]++;
    if (g.sym_fault > 0) {
      g.sym_fault--;
    } else if (!track_syms(t, dict, tracer, proxy)) {
      return done(-1);
    }
  }
  // track_tensor: set_proxy_slot(tensor, tracer, _ProxyTensor(proxy, constant))
  PyObject* pt = PyObject_CallFunctionObjArgs(g.proxy_tensor_type, proxy, Py_None, nullptr);
  PyObject* r = pt ? PyObject_CallFunctionObjArgs(g.set_proxy_slot, out, tracer, pt, nullptr) : nullptr;
  Py_XDECREF(pt);
  if (r == nullptr) return done(-1);
  Py_DECREF(r);
  // set_meta(proxy, tensor)
  PyObject* argv[2] = {out, Py_False};
  PyObject* val = PyObject_Vectorcall(g.snapshot_fake, argv, 1, n.include_real_kw);
  if (val == nullptr) return done(-1);
  const int set = PyDict_SetItem(meta, n.val, val);
  Py_DECREF(val);
  if (set < 0) return done(-1);
  PyObject* old = nullptr;
  if (set_thunkify(ptracer, Py_True, &old) < 0) return done(-1);
  // (set_meta's call of the module's _extract_tensor_metadata: looked up now, as
  // stock's global lookup does, so a function rebound there is the one called)
  PyObject* extract = PyDict_GetItemWithError(g.module_dict, n.extract_tensor_metadata);
  if (extract == nullptr && !PyErr_Occurred()) {
    PyErr_SetString(PyExc_NameError, "name '_extract_tensor_metadata' is not defined");
  }
  PyObject* tm = extract ? PyObject_CallOneArg(extract, out) : nullptr;
  bool ok = tm != nullptr && PyDict_SetItem(meta, n.tensor_meta, tm) == 0;
  Py_XDECREF(tm);
  ok = restore_thunkify(ptracer, old, ok);
  return done(ok ? 1 : -1);
}

enum class Outcome { Served, Error, Stock };

// stock's method for prim.device: the count, the context, the call.
Outcome serve_device(PyObject* func, PyObject* args, PyObject* kwargs, PyObject** result) {
  if (count_call() < 0) return Outcome::Error;
  PyObject* token = nullptr;
  if (aten_enter(func, &token) < 0) {
    aten_exit(token, false);
    return Outcome::Error;
  }
  g_counts[ServedDevice]++;
  PyObject* out = PyObject_Call(func, args, kwargs);
  if (!aten_exit(token, out != nullptr)) {
    Py_XDECREF(out);
    return Outcome::Error;
  }
  *result = out;
  return Outcome::Served;
}

Outcome serve(PyObject* mode, PyObject* func, PyObject* args, PyObject* kwargs, PyObject** result) {
  const Names& n = names();
  if (reinterpret_cast<PyObject*>(Py_TYPE(mode)) != g.mode_type || !module_names_hold() ||
      instance_attr(mode, n.pre_dispatch) != Py_False) {
    g_counts[StockMode]++;
    return Outcome::Stock;
  }
  PyObject* tracer = instance_attr(mode, n.tracer);
  PyObject* table = g.layout_2_9 ? PyDict_GetItemWithError(g.module_dict, n.current_table)
                                 : instance_attr(mode, n.decomposition_table);
  if (table == nullptr) PyErr_Clear();
  if (tracer == nullptr || table == nullptr || !PyDict_CheckExact(table)) {
    g_counts[StockMode]++;
    return Outcome::Stock;
  }
  if (reinterpret_cast<PyObject*>(Py_TYPE(func)) != g.op_type || !PyTuple_CheckExact(args) ||
      (kwargs != nullptr && !PyDict_CheckExact(kwargs))) {
    g_counts[StockOp]++;
    return Outcome::Stock;
  }
  PyObject* empty = nullptr;
  if (kwargs == nullptr || PyDict_GET_SIZE(kwargs) == 0) {
    kwargs = empty = PyDict_New(); // (kwargs or {})
    if (kwargs == nullptr) return Outcome::Error;
  } else {
    Py_INCREF(kwargs);
  }
  auto finish = [&](Outcome o) {
    Py_DECREF(kwargs);
    return o;
  };
  if (func == g.device_op) return finish(serve_device(func, args, empty ? nullptr : kwargs, result));
  const Facts* f = facts_of(func);
  if (!f->plain) {
    g_counts[StockOp]++;
    return finish(Outcome::Stock);
  }
  const int in_table = PyDict_Contains(table, func);
  if (in_table != 0) {
    if (in_table < 0) PyErr_Clear();
    g_counts[StockOp]++;
    return finish(Outcome::Stock);
  }
  Args a;
  bool plain = true;
  for (Py_ssize_t i = 0; plain && i < PyTuple_GET_SIZE(args); ++i) plain = walk(PyTuple_GET_ITEM(args, i), 0, a);
  {
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (plain && PyDict_Next(kwargs, &pos, &k, &v)) plain = PyUnicode_CheckExact(k) && walk(v, 0, a);
  }
  auto give_up = [&](Count why) {
    if (PyErr_Occurred()) PyErr_Clear();
    g_counts[why]++;
    return finish(Outcome::Stock);
  };
  if (!plain) return give_up(StockArguments);
  // 2.14+: proxy_call rewrites a torch.device argument under compile-on-one-rank
  // (`_coor_enabled() and any(isinstance(e, torch.device) ...)`; the config read
  // has no effect, so a call without a device need not ask)
  if (a.device && g.coor_enabled != nullptr) {
    PyObject* on = PyObject_CallNoArgs(g.coor_enabled);
    const int truthy = on ? PyObject_IsTrue(on) : -1;
    Py_XDECREF(on);
    if (truthy != 0) return give_up(StockArguments);
  }
  // every tensor tracked, without a constant (fetch_object_proxy; no side effect)
  if (!a.tensors.empty()) {
    PyObject* tracker = PyObject_GetAttr(tracer, n.tensor_tracker);
    if (tracker == nullptr) return give_up(StockArguments);
    bool tracked = true;
    for (PyObject* t : a.tensors) {
      PyObject* entry = PyObject_CallMethodOneArg(tracker, n.get, t);
      if (entry == nullptr || reinterpret_cast<PyObject*>(Py_TYPE(entry)) != g.proxy_tensor_type) {
        Py_XDECREF(entry);
        tracked = false;
        break;
      }
      PyObject* constant = instance_attr(entry, n.constant);
      PyObject* p = instance_attr(entry, n.proxy);
      if (constant != Py_None || p == nullptr) {
        Py_DECREF(entry);
        tracked = false;
        break;
      }
      Py_INCREF(p);
      a.proxies.push_back(p);
      Py_DECREF(entry);
    }
    Py_DECREF(tracker);
    if (!tracked) return give_up(StockArguments);
  }
  // autograd_would_have_decomposed (the first tensor's backend), and if so a
  // decompose that answers NotImplemented inside a no-op enter / exit
  // (2.9: every op but size / stride / storage_offset, which the facts leave to stock)
  bool attempt = a.tensors.empty() || g.layout_2_9;
  if (!attempt) {
    // (`a.device` as stock reads it: a FakeTensor's C++ device() would dispatch
    // prim.device through the fake mode, which stock's property does not)
    PyObject* dev = PyObject_GetAttr(a.tensors[0], n.device);
    if (dev == nullptr || !THPDevice_Check(dev)) {
      Py_XDECREF(dev);
      return give_up(StockDecompose);
    }
    const c10::DeviceType type = reinterpret_cast<THPDevice*>(dev)->device.type();
    Py_DECREF(dev);
    const auto k = backend_key(type);
    if (!k.has_value()) return give_up(StockDecompose);
    try {
      attempt = !f->handle->hasKernelForDispatchKey(*k);
    } catch (const std::exception&) {
      return give_up(StockDecompose);
    }
  }
  if (attempt) {
    if (decompose_not_implemented(func, *f->handle, g.cia_key) != 1) return give_up(StockDecompose);
    if (c10::impl::tls_is_dispatch_key_included(c10::DispatchKey::PreDispatch) ||
        enter_exit_is_noop(mode, c10::impl::TorchDispatchModeKey::PROXY, g.dispatch_dict, flag_setter(g.layout_2_9, g.set_flag)) != 1) {
      return give_up(StockState);
    }
    PyObject* pre = PyObject_CallNoArgs(g.pre_dispatch_proxy);
    const bool none = pre == Py_None;
    Py_XDECREF(pre);
    if (!none) return give_up(StockState);
  }
  // the node's name: stock's _target_to_str of the graph's class
  {
    PyObject* graph = PyObject_GetAttr(tracer, n.graph);
    const bool stock_name = graph != nullptr && _PyType_Lookup(Py_TYPE(graph), n.target_to_str) == g.target_to_str &&
        instance_attr(graph, n.target_to_str) == nullptr;
    Py_XDECREF(graph);
    if (!stock_name) return give_up(StockMode);
  }
  if (g.check != nullptr) {
    PyObject* ok = PyObject_CallFunctionObjArgs(g.check, mode, func, args, kwargs, nullptr);
    if (ok == nullptr) return finish(Outcome::Error);
    Py_DECREF(ok);
  }
  // -- from here on, what stock does --
  Py_INCREF(tracer);
  if (count_call() < 0) {
    Py_DECREF(tracer);
    return finish(Outcome::Error);
  }
  PyObject* token = nullptr;
  PyObject* out = nullptr;
  bool ok = aten_enter(func, &token) == 0;
  if (ok && attempt) ok = resync_compile_internals_flag(g.dispatch_dict, flag_setter(g.layout_2_9, g.set_flag)) == 0;
  PyObject* proxy_args = nullptr;
  PyObject* proxy_kwargs = nullptr;
  if (ok) {
    size_t next = 0;
    proxy_args = rebuild(args, next, a, tracer);
    if (proxy_args != nullptr) {
      proxy_kwargs = PyDict_New();
      Py_ssize_t pos = 0;
      PyObject *k, *v;
      while (proxy_kwargs != nullptr && PyDict_Next(kwargs, &pos, &k, &v)) {
        PyObject* p = rebuild(v, next, a, tracer);
        if (p == nullptr || PyDict_SetItem(proxy_kwargs, k, p) < 0) Py_CLEAR(proxy_kwargs);
        Py_XDECREF(p);
      }
    }
    ok = proxy_kwargs != nullptr;
  }
  PyObject* proxy_out = nullptr;
  if (ok) {
    g_counts[Served]++;
    PyObject* argv[6] = {tracer, n.call_function, func, proxy_args, proxy_kwargs, f->name};
    proxy_out = PyObject_VectorcallMethod(n.create_proxy, argv, 5 | PY_VECTORCALL_ARGUMENTS_OFFSET, n.name_kw);
    ok = proxy_out != nullptr;
  }
  Py_XDECREF(proxy_args);
  Py_XDECREF(proxy_kwargs);
  if (ok) {
    PyObject* old = nullptr;
    ok = set_thunkify(tracer, Py_True, &old) == 0;
    if (ok) {
      out = call_op(func, args, empty ? nullptr : kwargs);
      ok = restore_thunkify(tracer, old, out != nullptr);
    }
  }
  if (ok) {
    const bool fault = g.fault > 0;
    if (fault) g.fault--;
    const int tracked = fault ? 1 : track_one(out, proxy_out, tracer);
    if (tracked < 0) {
      ok = false;
    } else if (tracked == 0) {
      g_counts[TrackedByStock]++;
      PyObject* argv[5] = {nullptr, out, proxy_out, Py_None, tracer};
      PyObject* r = PyObject_Vectorcall(g.track_tensor_tree, argv + 1, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, n.track_kw);
      ok = r != nullptr;
      Py_XDECREF(r);
    }
  }
  if (ok) {
    // _maybe_record_pointwise_barrier: nothing where decomp_layers or not emulate_precision_casts
    PyObject* layers = PyObject_GetAttr(mode, n.decomp_layers);
    const int in_decomp = layers ? PyObject_IsTrue(layers) : -1;
    Py_XDECREF(layers);
    int emulate = 0;
    if (in_decomp == 0) {
      PyObject* e = PyObject_GetAttr(mode, n.emulate);
      emulate = e ? PyObject_IsTrue(e) : -1;
      Py_XDECREF(e);
    }
    if (in_decomp < 0 || emulate < 0) {
      ok = false;
    } else if (in_decomp == 0 && emulate == 1) {
      PyObject* r = PyObject_CallFunctionObjArgs(g.pointwise_barrier, func, mode, nullptr);
      ok = r != nullptr;
      Py_XDECREF(r);
    }
  }
  Py_XDECREF(proxy_out);
  Py_DECREF(tracer);
  if (!aten_exit(token, ok) || !ok) {
    Py_XDECREF(out);
    return finish(Outcome::Error);
  }
  *result = out;
  return finish(Outcome::Served);
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
  PyObject* kw = nargs == 4 && args[3] != Py_None ? args[3] : nullptr;
  const Outcome o = serve(mode, args[0], a, kw, &r);
  Py_XDECREF(empty);
  if (o == Outcome::Stock) return call_stock(mode, args, nargs, kwnames);
  return o == Outcome::Served ? r : nullptr;
}

PyMethodDef g_def = {
    "__torch_dispatch__",
    reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(dispatch)),
    METH_FASTCALL | METH_KEYWORDS,
    "ProxyTorchDispatchMode.__torch_dispatch__ in C by fastfake for the plain path (stock's otherwise)."};

PyObject* item(PyObject* refs, const char* key) {
  PyObject* v = PyDict_GetItemString(refs, key); // borrowed
  if (v == nullptr && !PyErr_Occurred()) PyErr_Format(PyExc_KeyError, "fastfake: proxy_dispatch_setup needs '%s'", key);
  return v;
}

} // namespace

int proxy_dispatch_setup(PyObject* refs) {
  if (!PyDict_Check(refs)) {
    PyErr_SetString(PyExc_TypeError, "fastfake: proxy_dispatch_setup takes a dict");
    return -1;
  }
  (void)names();
  struct Slot {
    const char* key;
    PyObject** slot;
  };
  const Slot slots[] = {
      {"mode_type", &g.mode_type},         {"stock", &g.stock},
      {"facts", &g.facts},                 {"sym_proxy", &g.sym_proxy},
      {"module_dict", &g.module_dict},     {"stats_dict", &g.stats_dict},
      {"counter_key", &g.counter_key},     {"traceback_dict", &g.traceback_dict},
      {"has_preserved", &g.has_preserved}, {"original_aten", &g.original_aten},
      {"device_op", &g.device_op},         {"handled_types", &g.handled_types},
      {"fake_type", &g.fake_type},         {"proxy_type", &g.proxy_type},
      {"sym_types", &g.sym_types},         {"op_type", &g.op_type},
      {"target_to_str", &g.target_to_str}, {"dispatch_dict", &g.dispatch_dict},
      {"set_flag", &g.set_flag},           {"cia_key", &g.cia_key},
      {"pre_dispatch_proxy", &g.pre_dispatch_proxy},
      {"thunk_type", &g.thunk_type},       {"partial", &g.partial},
      {"sym_slot_proxy", &g.sym_slot_proxy}, {"sym_ops", &g.sym_ops},
      {"disabled_torch_function", &g.disabled_torch_function},
  };
  for (const Slot& s : slots) {
    PyObject* v = item(refs, s.key);
    if (v == nullptr) return -1;
    hold_ref(*s.slot, v);
  }
  PyObject* layout = PyDict_GetItemString(refs, "layout_2_9");
  g.layout_2_9 = layout == Py_True;
  // (2.13+: a ContextVar; 2.9: the global, None at setup, lives in the module's dict)
  const bool aten_ok = g.layout_2_9 ? g.original_aten == nullptr
                                    : g.original_aten != nullptr && PyContextVar_CheckExact(g.original_aten);
  if (!PyTuple_Check(g.handled_types) || !PyTuple_Check(g.sym_types) || !aten_ok ||
      !PyDict_Check(g.module_dict) || !PyDict_Check(g.stats_dict) || !PyDict_Check(g.traceback_dict) ||
      !PyTuple_Check(g.sym_ops) || PyTuple_GET_SIZE(g.sym_ops) != 4) {
    PyErr_SetString(PyExc_TypeError, "fastfake: proxy_dispatch_setup: unexpected kinds of objects");
    return -1;
  }
  PyObject* bound = item(refs, "module_names");
  if (bound == nullptr) return -1;
  if (!g.module_names.bind(bound)) {
    PyErr_SetString(PyExc_TypeError, "fastfake: proxy_dispatch_setup: module_names is a dict");
    return -1;
  }
  const Slot calls[] = {
      {"track_tensor_tree", &g.track_tensor_tree},
      {"set_proxy_slot", &g.set_proxy_slot},
      {"snapshot_fake", &g.snapshot_fake},
      {"_set_unbacked_bindings", &g.set_unbacked_bindings},
      {"_maybe_record_pointwise_barrier", &g.pointwise_barrier},
      {"_ProxyTensor", &g.proxy_tensor_type},
      {"_SymNodeDict", &g.symnode_dict_type},
      {"log", &g.log},
  };
  for (const Slot& s : calls) {
    PyObject* v2 = item(bound, s.key);
    if (v2 == nullptr) return -1;
    hold_ref(*s.slot, v2);
  }
  // what a release adds (fastfake/common/compat.py, proxy_dispatch_variant)
  PyObject* coor = PyDict_GetItemString(bound, "_coor_enabled");
  hold_ref(g.coor_enabled, coor);
  PyObject* pyobj = PyDict_GetItemString(refs, "pyobj_dispatcher");
  g.pyobj_dispatcher = pyobj == Py_True;
  clear_facts();
  return 0;
}

PyObject* proxy_dispatch_function() {
  if (g.mode_type == nullptr || !PyType_Check(g.mode_type)) {
    PyErr_SetString(PyExc_RuntimeError, "fastfake: proxy_dispatch_function() before proxy_dispatch_setup()");
    return nullptr;
  }
  return PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(g.mode_type), &g_def);
}

void proxy_dispatch_enable(bool on) {
  g.on = on;
}

void proxy_dispatch_set_check(PyObject* check) {
  hold_ref(g.check, check);
}

void proxy_dispatch_clear() {
  clear_facts();
}

std::map<std::string, uint64_t> proxy_dispatch_counts() {
  return counts_as_map(kCountNames, g_counts);
}

void proxy_dispatch_set_counts(const std::map<std::string, uint64_t>& counts) {
  counts_from_map(kCountNames, g_counts, counts);
}

void proxy_dispatch_inject_fault(int n) {
  g.fault = n;
}

void proxy_dispatch_inject_sym_fault(int n) {
  g.sym_fault = n;
}

} // namespace fastfake
