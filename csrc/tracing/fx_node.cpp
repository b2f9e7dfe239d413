// make_fx's node creation in C: PythonKeyTracer.create_node for the plain call.
//
// Every node make_fx (AOTAutograd's trace, export) records goes through the
// tracer's `create_node` (torch/fx/experimental/proxy_tensor.py), which calls
// TracerBase.create_node (torch/fx/proxy.py), which calls Graph.create_node
// (torch/fx/graph.py): the raw-SymInt warning walk over the arguments, the node's
// name from the target's `__name__` in snake case made unique by the graph's
// namespace, the Node, its insertion and lookup-table entry; then the tracer's
// `node_name_to_scope`, and under preserved node meta (AOTAutograd) the stack
// trace, the copied meta fields of the node being run, the autograd sequence
// number (`_get_seq_nr`), the replayed node's fields; else the module stack; the
// debug log; then `_should_save_eager_input_vals`. Seven Python functions and a
// dozen attribute writes per node: 9,660 nodes in a `dynamic=True` GPT-2 compile,
// 8,400 of them SymInt operations that dead-code elimination removes at the end.
//
// This is that method while fastfake is installed, for the plain call: the tracer
// exactly PythonKeyTracer, a `call_function` node of a builtin or Python function
// that is no higher-order operator (so `_should_save_eager_input_vals` is False),
// or of an operator overload for which that predicate of its tags answers False
// (asked first instead of last), arguments of nodes and plain leaves
// in tuples, lists and dicts (no raw SymInt: stock warns), the graph, its
// namespace and lookup table of stock's classes, no owning module with creation
// hooks, no mutable-operation check, no recorded stack traces, and the names of
// the three modules the path stands for still stock's. It does stock's steps in
// stock's order with stock's values; Node itself, the insert point and the lookup
// table's insert are stock's own code, called. Two writes are made directly:
// `node.stack_trace = s` is `node.meta["stack_trace"] = s` (Node.__setattr__
// takes the node out of the lookup table and puts it back, a no-op for the node
// inserted last), and `Logger.debug` is skipped where the logger's own cache says
// DEBUG is off (what `isEnabledFor` answers). Anything else is stock's method,
// counted by reason. Which releases: fastfake/tracing/fx_node.py.
#include "tracing/fx_node.h"

#include "common/bindings.h"
#include "common/counts.h"
#include "common/logger.h"
#include "common/refs.h"
#include "tracing/leaves.h"


namespace fastfake {

namespace {

struct State {
  PyObject* stock = nullptr; // PythonKeyTracer.create_node (a function)
  PyObject* tracer_type = nullptr;
  PyObject* graph_type = nullptr;
  PyObject* namespace_type = nullptr;
  PyObject* table_type = nullptr;
  PyObject* node_type = nullptr;
  PyObject* immutable_dict = nullptr;
  PyObject* immutable_list = nullptr;
  PyObject* sym_types = nullptr; // tuple
  PyObject* unsafe_targets = nullptr; // tuple of classes: a target of one is stock's
  PyObject* special_targets = nullptr; // tuple of objects: stock's
  PyObject* op_overload = nullptr; // torch._ops.OpOverload
  PyObject* graph_dict = nullptr;
  NameBindings graph_names;
  PyObject* proxy_dict = nullptr;
  NameBindings proxy_names;
  PyObject* pt_dict = nullptr;
  NameBindings pt_names;
  PyObject* tb_dict = nullptr; // torch.fx.traceback's dict (its globals read per call)
  NameBindings tb_names;
  PyObject* fx_dict = nullptr; // torch.fx's dict ("traceback")
  PyObject* tb_module = nullptr;
  PyObject* autograd_dict = nullptr;
  PyObject* get_sequence_nr = nullptr;
  PyObject* copy_dispatch = nullptr; // copy._copy_dispatch
  PyObject* copy_immutable = nullptr;
  PyObject* dict_copy = nullptr;
  PyObject* list_copy = nullptr;
  PyObject* copy_copy = nullptr;
  PyObject* logger_type = nullptr;
  PyObject* check = nullptr;
  PyObject* parsed = nullptr; // candidate -> (base, digits or None)
  PyObject* snake = nullptr; // __name__ -> _snake_case(__name__)
  bool on = false;
  bool ready = false;
  int fault = 0;
};
State g;

struct Names {
  PyObject *call_function, *name_, *graph, *check_mutable_operations, *record_stack_traces, *owning_module_,
      *create_node_hooks, *graph_namespace, *used_names, *base_count, *obj_to_name, *lookup_table, *insert_,
      *insert, *len_, *node_name_to_scope, *scope, *module_path, *module_type, *module_stack, *meta,
      *should_preserve, *should_preserve_seq, *current_meta, *current_replay_node, *special_stack, *stack_trace,
      *is_gradient_acc, *autograd_backward, *copy_fields, *seq_nr, *in_grad_fn, *grad_fn_seq_nr,
      *is_functional_regenerated, *custom, *log, *annotation_log, *debug, *traceback,
      *name_regex, *snake_case, *illegal_names, *match, *group, *create_name, *fmt_create_node, *fmt_assign,
      *fmt_grad_fn, *fmt_meta_seq, *fmt_replay, *get, *nn_module_stack, *get_sequence_nr, *dunder_name, *should_save;
  PyObject* zero;
  PyObject* one;
};
Names s{};

enum Count : size_t {
  Served, Off, Arguments, Tracer, Kind, Target, State_, Graph, Hooks, Sym, Mutable, StackTraces, NumCounts
};
const char* const kCountNames[NumCounts] = {
    "served", "stock.off", "stock.arguments", "stock.tracer", "stock.kind", "stock.target", "stock.state",
    "stock.graph", "stock.hooks", "stock.sym", "stock.mutable", "stock.stack_traces"};
uint64_t g_counts[NumCounts] = {};

PyObject* call_stock(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, Count why) {
  g_counts[why]++;
  PyObject* small[8];
  const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  if (nargs + nkw + 1 > 8) {
    OwnedRef tuple(PyTuple_New(nargs));
    if (!tuple) return nullptr;
    for (Py_ssize_t i = 0; i < nargs; ++i) {
      Py_INCREF(args[i]);
      PyTuple_SET_ITEM(tuple.get(), i, args[i]);
    }
    OwnedRef kw;
    if (nkw) {
      kw.reset(PyDict_New());
      if (!kw) return nullptr;
      for (Py_ssize_t i = 0; i < nkw; ++i) {
        if (PyDict_SetItem(kw.get(), PyTuple_GET_ITEM(kwnames, i), args[nargs + i]) < 0) return nullptr;
      }
    }
    OwnedRef bound(PyMethod_New(g.stock, self));
    if (!bound) return nullptr;
    return PyObject_Call(bound.get(), tuple.get(), kw.get());
  }
  small[0] = self;
  for (Py_ssize_t i = 0; i < nargs + nkw; ++i) small[i + 1] = args[i];
  return PyObject_Vectorcall(g.stock, small, static_cast<size_t>(nargs + 1), kwnames);
}

bool is_type(PyObject* o, PyObject* type) {
  return reinterpret_cast<PyObject*>(Py_TYPE(o)) == type;
}

// The arguments' leaves, as Graph.create_node's walk (`pytree.tree_iter((args,
// kwargs))`) meets them: 1 nodes and plain leaves only, in tuples, lists, dicts
// and FX's immutable ones; 0 something else (stock's walk decides); 2 a raw sym
// value (stock warns).
int plain_arguments(PyObject* x, int depth) {
  if (depth > 8) return 0;
  if (is_type(x, g.node_type)) return 1;
  if (exact_sym(x, g.sym_types)) return 2;
  if (plain_leaf(x, g.sym_types)) return 1;
  if (PyTuple_CheckExact(x) || PyList_CheckExact(x) || is_type(x, g.immutable_list)) {
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(x);
    PyObject** items = PySequence_Fast_ITEMS(x);
    for (Py_ssize_t i = 0; i < n; ++i) {
      const int r = plain_arguments(items[i], depth + 1);
      if (r != 1) return r;
    }
    return 1;
  }
  if (PyDict_CheckExact(x) || is_type(x, g.immutable_dict)) {
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(x, &pos, &k, &v)) {
      const int r = plain_arguments(v, depth + 1);
      if (r != 1) return r;
    }
    return 1;
  }
  return 0;
}

// A name of a module's dict (borrowed; nullptr, no error, if absent).
PyObject* global(PyObject* dict, PyObject* name) {
  PyObject* v = PyDict_GetItemWithError(dict, name);
  if (v == nullptr) PyErr_Clear();
  return v;
}

// `logger.debug(fmt, *args)`, skipped where it would do nothing: an exact
// logging.Logger that is disabled or whose level cache says DEBUG is off
// (`isEnabledFor(DEBUG)`'s answer). 0 or -1.
int log_debug(PyObject* logger, PyObject* fmt, PyObject* a, PyObject* b = nullptr) {
  if (logger_debug_off(logger, g.logger_type)) return 0;
  PyObject* argv[4] = {logger, fmt, a, b};
  OwnedRef r(PyObject_VectorcallMethod(s.debug, argv, (b ? 4 : 3) | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr));
  return r ? 0 : -1;
}

// copy.copy(x): the dispatch table's answer for an exact immutable, dict or list
// type, else copy.copy itself. New reference.
PyObject* shallow_copy(PyObject* x) {
  PyObject* cls = reinterpret_cast<PyObject*>(Py_TYPE(x));
  PyObject* copier = PyDict_GetItemWithError(g.copy_dispatch, cls);
  if (copier == nullptr) PyErr_Clear();
  if (copier != nullptr && copier == g.copy_immutable) {
    Py_INCREF(x);
    return x;
  }
  if (copier != nullptr && copier == g.dict_copy && PyDict_CheckExact(x)) return PyDict_Copy(x);
  if (copier != nullptr && copier == g.list_copy && PyList_CheckExact(x)) {
    return PyList_GetSlice(x, 0, PyList_GET_SIZE(x));
  }
  return PyObject_CallOneArg(g.copy_copy, x);
}

// Graph._target_to_str for a callable target: `_snake_case(target.__name__)`,
// kept per name (a pure function of the string). New reference.
PyObject* target_to_str(PyObject* target) {
  OwnedRef op(PyObject_GetAttr(target, s.dunder_name));
  if (!op) return nullptr;
  if (PyUnicode_CheckExact(op.get())) {
    PyObject* hit = PyDict_GetItemWithError(g.snake, op.get());
    if (hit != nullptr) {
      Py_INCREF(hit);
      return hit;
    }
    if (PyErr_Occurred()) return nullptr;
  }
  PyObject* fn = global(g.graph_dict, s.snake_case);
  if (fn == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "fastfake: torch.fx.graph._snake_case is gone");
    return nullptr;
  }
  PyObject* r = PyObject_CallOneArg(fn, op.get());
  if (r != nullptr && PyUnicode_CheckExact(op.get()) && PyUnicode_CheckExact(r)) {
    if (PyDict_GET_SIZE(g.snake) >= 8192) PyDict_Clear(g.snake);
    if (PyDict_SetItem(g.snake, op.get(), r) < 0) PyErr_Clear();
  }
  return r;
}

// `_name_regex.match(candidate).group(1, 2)`, kept per candidate; None where it
// does not match. New reference.
PyObject* parse_name(PyObject* candidate) {
  PyObject* hit = PyDict_GetItemWithError(g.parsed, candidate);
  if (hit != nullptr) {
    Py_INCREF(hit);
    return hit;
  }
  if (PyErr_Occurred()) return nullptr;
  PyObject* regex = global(g.graph_dict, s.name_regex);
  if (regex == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "fastfake: torch.fx.graph._name_regex is gone");
    return nullptr;
  }
  OwnedRef m(PyObject_CallMethodOneArg(regex, s.match, candidate));
  if (!m) return nullptr;
  PyObject* r;
  if (m.get() == Py_None) {
    r = Py_NewRef(Py_None);
  } else {
    PyObject* argv[3] = {m.get(), s.one, nullptr};
    OwnedRef two(PyLong_FromLong(2));
    if (!two) return nullptr;
    argv[2] = two.get();
    r = PyObject_VectorcallMethod(s.group, argv, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr);
    if (r == nullptr) return nullptr;
  }
  if (PyDict_GET_SIZE(g.parsed) >= 8192) PyDict_Clear(g.parsed);
  if (PyDict_SetItem(g.parsed, candidate, r) < 0) PyErr_Clear();
  return r;
}

// _Namespace.create_name(candidate, None). New reference.
PyObject* create_name(PyObject* ns, PyObject* used, PyObject* base_count, PyObject* candidate) {
  OwnedRef parsed(parse_name(candidate));
  if (!parsed) return nullptr;
  auto stock_name = [&]() { return PyObject_CallMethodObjArgs(ns, s.create_name, candidate, Py_None, nullptr); };
  if (!PyTuple_CheckExact(parsed.get()) || PyTuple_GET_SIZE(parsed.get()) != 2) return stock_name();
  PyObject* base = PyTuple_GET_ITEM(parsed.get(), 0);
  PyObject* digits = PyTuple_GET_ITEM(parsed.get(), 1);
  if (!PyUnicode_CheckExact(base)) return stock_name();
  const int in_used = PySet_Contains(used, candidate);
  if (in_used < 0) return nullptr;
  long long num = 0;
  OwnedRef name(candidate, true);
  if (digits == Py_None || in_used) {
    PyObject* have = PyDict_GetItemWithError(base_count, base);
    if (have == nullptr && PyErr_Occurred()) return nullptr;
    if (have != nullptr) {
      if (!PyLong_CheckExact(have)) return stock_name();
      int overflow = 0;
      num = PyLong_AsLongLongAndOverflow(have, &overflow);
      if (overflow || (num == -1 && PyErr_Occurred()) || num > (1LL << 60)) {
        PyErr_Clear();
        return stock_name();
      }
    }
    PyObject* illegal_names = global(g.graph_dict, s.illegal_names);
    if (illegal_names == nullptr || !PyDict_CheckExact(illegal_names)) return stock_name();
    PyObject* illegal = PyDict_GetItemWithError(illegal_names, candidate);
    if (illegal == nullptr && PyErr_Occurred()) return nullptr;
    if (illegal != nullptr && illegal != Py_None) { // `_illegal_names.get(candidate, None) is not None`
      num += 1;
      name.reset(PyUnicode_FromFormat("%U_%lld", base, num));
      if (!name) return nullptr;
    }
  } else {
    if (!PyUnicode_CheckExact(digits)) return stock_name();
    OwnedRef n(PyLong_FromUnicodeObject(digits, 10));
    if (!n) return nullptr;
    int overflow = 0;
    num = PyLong_AsLongLongAndOverflow(n.get(), &overflow);
    if (overflow || num > (1LL << 60)) {
      PyErr_Clear();
      return stock_name();
    }
  }
  for (;;) {
    const int c = PySet_Contains(used, name.get());
    if (c < 0) return nullptr;
    if (!c) break;
    num += 1;
    name.reset(PyUnicode_FromFormat("%U_%lld", base, num));
    if (!name) return nullptr;
  }
  if (PySet_Add(used, name.get()) < 0) return nullptr;
  OwnedRef n(PyLong_FromLongLong(num));
  if (!n || PyDict_SetItem(base_count, base, n.get()) < 0) return nullptr;
  return Py_NewRef(name.get());
}

// `_get_seq_nr(node_name)` (torch/fx/proxy.py). New reference (None: none).
PyObject* get_seq_nr(PyObject* current_meta, PyObject* node_name, PyObject* annotation_log) {
  OwnedRef seq(Py_NewRef(Py_None));
  PyObject* in_grad_fn = PyDict_GetItemWithError(current_meta, s.in_grad_fn);
  if (in_grad_fn == nullptr && PyErr_Occurred()) return nullptr;
  int gt = 0;
  if (in_grad_fn != nullptr) {
    gt = PyObject_RichCompareBool(in_grad_fn, s.zero, Py_GT);
    if (gt < 0) return nullptr;
  }
  PyObject* preserve_seq = global(g.tb_dict, s.should_preserve_seq);
  if (preserve_seq == nullptr) {
    PyErr_SetString(PyExc_NameError, "name '_should_preserve_node_meta' is not defined");
    return nullptr;
  }
  if (gt) {
    if (log_debug(annotation_log, s.fmt_grad_fn, node_name) < 0) return nullptr;
    OwnedRef nrs(PyObject_GetItem(current_meta, s.grad_fn_seq_nr));
    if (!nrs) return nullptr;
    OwnedRef minus_one(PyLong_FromLong(-1));
    if (!minus_one) return nullptr;
    seq.reset(PyObject_GetItem(nrs.get(), minus_one.get()));
    if (!seq) return nullptr;
  } else {
    const int p = PyObject_IsTrue(preserve_seq);
    if (p < 0) return nullptr;
    if (p) {
      if (log_debug(annotation_log, s.fmt_meta_seq, node_name) < 0) return nullptr;
      PyObject* v = PyDict_GetItemWithError(current_meta, s.seq_nr);
      if (v == nullptr && PyErr_Occurred()) return nullptr;
      seq.reset(Py_NewRef(v ? v : Py_None));
    } else {
      OwnedRef nr(PyObject_CallNoArgs(g.get_sequence_nr));
      if (!nr) return nullptr;
      seq.reset(PyNumber_Subtract(nr.get(), s.one));
      if (!seq) return nullptr;
    }
  }
  preserve_seq = global(g.tb_dict, s.should_preserve_seq);
  const int p = preserve_seq ? PyObject_IsTrue(preserve_seq) : 0;
  if (p < 0) return nullptr;
  if (!p) {
    PyObject* replay = global(g.tb_dict, s.current_replay_node);
    if (replay != nullptr && replay != Py_None) {
      OwnedRef rm(PyObject_GetAttr(replay, s.meta));
      if (!rm) return nullptr;
      const int has = PySequence_Contains(rm.get(), s.seq_nr);
      if (has < 0) return nullptr;
      if (has) {
        if (log_debug(annotation_log, s.fmt_replay, node_name) < 0) return nullptr;
        seq.reset(PyObject_GetItem(rm.get(), s.seq_nr));
        if (!seq) return nullptr;
      }
    }
  }
  return Py_NewRef(seq.get());
}

// What stays the same for the call's whole plain path, read before anything is
// changed; false (nothing changed) where it is not stock's plain state.
bool names_unchanged() {
  if (!g.graph_names.hold(g.graph_dict) || !g.proxy_names.hold(g.proxy_dict) || !g.pt_names.hold(g.pt_dict) ||
      !g.tb_names.hold(g.tb_dict)) {
    return false;
  }
  if (global(g.fx_dict, s.traceback) != g.tb_module) return false;
  return true;
}

// TracerBase.create_node's part after the graph's (names, scope, meta, log).
// 0 or -1.
int tracer_part(PyObject* tracer, PyObject* node, PyObject* current_meta, PyObject* copy_fields,
                PyObject* annotation_log, PyObject* log) {
  OwnedRef node_name(PyObject_GetAttr(node, s.name_));
  if (!node_name) return -1;
  {
    OwnedRef scopes(PyObject_GetAttr(tracer, s.node_name_to_scope));
    if (!scopes) return -1;
    OwnedRef scope(PyObject_GetAttr(tracer, s.scope));
    if (!scope) return -1;
    OwnedRef path(PyObject_GetAttr(scope.get(), s.module_path));
    if (!path) return -1;
    OwnedRef type(PyObject_GetAttr(scope.get(), s.module_type));
    if (!type) return -1;
    OwnedRef pair(PyTuple_Pack(2, path.get(), type.get()));
    if (!pair || PyObject_SetItem(scopes.get(), node_name.get(), pair.get()) < 0) return -1;
  }
  OwnedRef meta(PyObject_GetAttr(node, s.meta));
  if (!meta) return -1;
  if (!PyDict_CheckExact(meta.get())) {
    PyErr_SetString(PyExc_RuntimeError, "fastfake: a new node's meta is no dict");
    return -1;
  }
  if (current_meta != nullptr) {
    PyObject* stack = PyDict_GetItemWithError(current_meta, s.stack_trace);
    if (stack == nullptr && PyErr_Occurred()) return -1;
    const int truthy = stack ? PyObject_IsTrue(stack) : 0;
    if (truthy < 0) return -1;
    if (truthy) {
      OwnedRef keep(stack, true);
      if (PyDict_SetItem(meta.get(), s.stack_trace, stack) < 0) return -1; // node.stack_trace = stack
      PyObject* special = global(g.tb_dict, s.special_stack);
      if (special == nullptr) {
        PyErr_SetString(PyExc_AttributeError, "torch.fx.traceback has no GRADIENT_ACC_SPECIAL_STACK");
        return -1;
      }
      const int in = PySequence_Contains(stack, special);
      if (in < 0) return -1;
      if (in) {
        if (PyDict_SetItem(meta.get(), s.is_gradient_acc, Py_True) < 0) return -1;
        if (PyDict_SetItem(meta.get(), s.autograd_backward, Py_True) < 0) return -1;
      }
    }
    const Py_ssize_t nf = PyList_GET_SIZE(copy_fields);
    for (Py_ssize_t i = 0; i < nf && i < PyList_GET_SIZE(copy_fields); ++i) {
      OwnedRef field(PyList_GET_ITEM(copy_fields, i), true);
      PyObject* v = PyDict_GetItemWithError(current_meta, field.get());
      if (v == nullptr) {
        if (PyErr_Occurred()) return -1;
        continue;
      }
      OwnedRef c(shallow_copy(v));
      if (!c || PyObject_SetItem(meta.get(), field.get(), c.get()) < 0) return -1;
    }
    OwnedRef seq(get_seq_nr(current_meta, node_name.get(), annotation_log));
    if (!seq) return -1;
    if (seq.get() != Py_None) {
      if (log_debug(annotation_log, s.fmt_assign, seq.get(), node_name.get()) < 0) return -1;
      if (g.fault > 0) {
        g.fault--; // (testing: the node without its sequence number)
      } else if (PyDict_SetItem(meta.get(), s.seq_nr, seq.get()) < 0) {
        return -1;
      }
    }
    PyObject* replay = global(g.tb_dict, s.current_replay_node);
    if (replay != nullptr && replay != Py_None) {
      OwnedRef keep(replay, true);
      if (PyDict_SetItem(meta.get(), s.is_functional_regenerated, Py_True) < 0) return -1;
      OwnedRef rm(PyObject_GetAttr(replay, s.meta));
      if (!rm) return -1;
      for (PyObject* key : {s.custom, s.stack_trace}) {
        const int has = PySequence_Contains(rm.get(), key);
        if (has < 0) return -1;
        if (has) {
          OwnedRef v(PyObject_CallMethodOneArg(rm.get(), s.get, key));
          if (!v || PyDict_SetItem(meta.get(), key, v.get()) < 0) return -1;
        }
      }
    }
    PyObject* backward = PyDict_GetItemWithError(current_meta, s.autograd_backward);
    if (backward == nullptr && PyErr_Occurred()) return -1;
    if (backward != nullptr) {
      OwnedRef keep(backward, true);
      const int t = PyObject_IsTrue(backward);
      if (t < 0) return -1;
      if (t && PyDict_SetItem(meta.get(), s.autograd_backward, Py_True) < 0) return -1;
    }
  } else {
    OwnedRef stack(PyObject_GetAttr(tracer, s.module_stack));
    if (!stack) return -1;
    const int t = PyObject_IsTrue(stack.get());
    if (t < 0) return -1;
    if (t) {
      OwnedRef c(shallow_copy(stack.get()));
      if (!c || PyDict_SetItem(meta.get(), s.nn_module_stack, c.get()) < 0) return -1;
    }
  }
  return log_debug(log, s.fmt_create_node, node);
}

PyObject* create_node(PyObject* self, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (!g.on || !g.ready) return call_stock(self, args, nargs, kwnames, Off);
  if (kwnames != nullptr || nargs < 4 || nargs > 6) return call_stock(self, args, nargs, kwnames, Arguments);
  if (!is_type(self, g.tracer_type)) return call_stock(self, args, nargs, kwnames, Tracer);
  PyObject* kind = args[0];
  PyObject* target = args[1];
  PyObject* fargs = args[2];
  PyObject* fkwargs = args[3];
  PyObject* name = nargs > 4 ? args[4] : Py_None;
  PyObject* type_expr = nargs > 5 ? args[5] : Py_None;
  if (!PyUnicode_CheckExact(kind) || PyUnicode_Compare(kind, s.call_function) != 0) {
    if (PyErr_Occurred()) PyErr_Clear();
    return call_stock(self, args, nargs, kwnames, Kind);
  }
  if ((name != Py_None && !PyUnicode_CheckExact(name)) || !PyTuple_CheckExact(fargs) || !PyDict_CheckExact(fkwargs)) {
    return call_stock(self, args, nargs, kwnames, Arguments);
  }
  // a builtin or Python function that is no operator or HOP (_should_save_eager_input_vals
  // is False), or an operator overload for which stock's predicate answers False
  const bool op_overload = is_type(target, g.op_overload);
  if (!op_overload) {
    if (!(Py_IS_TYPE(target, &PyCFunction_Type) || Py_IS_TYPE(target, &PyFunction_Type)) ||
        one_of(g.special_targets, target)) {
      return call_stock(self, args, nargs, kwnames, Target);
    }
    const int unsafe = PyObject_IsInstance(target, g.unsafe_targets);
    if (unsafe != 0) {
      if (unsafe < 0) PyErr_Clear();
      return call_stock(self, args, nargs, kwnames, Target);
    }
  }
  if (!names_unchanged()) return call_stock(self, args, nargs, kwnames, State_);
  if (op_overload) {
    // (a pure predicate of the op and its tags: asked here instead of after the node)
    PyObject* pred = global(g.pt_dict, s.should_save);
    if (pred == nullptr) return call_stock(self, args, nargs, kwnames, State_);
    OwnedRef pair(PyTuple_Pack(2, fargs, fkwargs));
    if (!pair) return nullptr;
    OwnedRef saves(PyObject_CallFunctionObjArgs(pred, target, pair.get(), nullptr));
    if (!saves) {
      PyErr_Clear();
      return call_stock(self, args, nargs, kwnames, Target);
    }
    if (saves.get() != Py_False) return call_stock(self, args, nargs, kwnames, Target);
  }
  {
    const int r = plain_arguments(fargs, 0);
    const int k = r == 1 ? plain_arguments(fkwargs, 0) : r;
    if (k != 1) return call_stock(self, args, nargs, kwnames, k == 2 ? Sym : Arguments);
  }
  // the tracer's fields and the graph's parts the path relies on
  OwnedRef flag(PyObject_GetAttr(self, s.check_mutable_operations));
  if (!flag) return nullptr;
  int t = PyObject_IsTrue(flag.get());
  if (t != 0) {
    if (t < 0) return nullptr;
    return call_stock(self, args, nargs, kwnames, Mutable);
  }
  OwnedRef records(PyObject_GetAttr(self, s.record_stack_traces));
  if (!records) return nullptr;
  t = PyObject_IsTrue(records.get());
  if (t != 0) {
    if (t < 0) return nullptr;
    return call_stock(self, args, nargs, kwnames, StackTraces);
  }
  OwnedRef graph(PyObject_GetAttr(self, s.graph));
  if (!graph) return nullptr;
  if (!is_type(graph.get(), g.graph_type)) return call_stock(self, args, nargs, kwnames, Graph);
  OwnedRef owning(PyObject_GetAttr(graph.get(), s.owning_module_));
  if (!owning) return nullptr;
  if (owning.get() != Py_None) {
    // `getattr(owning_module, "_create_node_hooks", None) is not None`
    OwnedRef hooks(PyObject_GetAttr(owning.get(), s.create_node_hooks));
    if (!hooks) {
      if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return nullptr;
      PyErr_Clear();
    } else if (hooks.get() != Py_None) {
      return call_stock(self, args, nargs, kwnames, Hooks);
    }
  }
  OwnedRef ns(PyObject_GetAttr(graph.get(), s.graph_namespace));
  if (!ns) return nullptr;
  OwnedRef table(PyObject_GetAttr(graph.get(), s.lookup_table));
  if (!table) return nullptr;
  if (!is_type(ns.get(), g.namespace_type) || !is_type(table.get(), g.table_type)) {
    return call_stock(self, args, nargs, kwnames, Graph);
  }
  OwnedRef used(PyObject_GetAttr(ns.get(), s.used_names));
  OwnedRef base_count(PyObject_GetAttr(ns.get(), s.base_count));
  OwnedRef obj_to_name(PyObject_GetAttr(ns.get(), s.obj_to_name));
  if (!used || !base_count || !obj_to_name) return nullptr;
  if (!PyAnySet_CheckExact(used.get()) || !PyDict_CheckExact(base_count.get()) ||
      !PyDict_CheckExact(obj_to_name.get())) {
    return call_stock(self, args, nargs, kwnames, Graph);
  }
  // preserved node meta: the current meta a dict and the copied fields a list
  PyObject* preserve = global(g.tb_dict, s.should_preserve);
  PyObject* current_meta = nullptr;
  PyObject* copy_fields = global(g.proxy_dict, s.copy_fields);
  if (preserve == nullptr || copy_fields == nullptr || !PyList_CheckExact(copy_fields)) {
    return call_stock(self, args, nargs, kwnames, State_);
  }
  t = PyObject_IsTrue(preserve);
  if (t < 0) return nullptr;
  if (t) {
    current_meta = global(g.tb_dict, s.current_meta);
    if (current_meta == nullptr || !PyDict_CheckExact(current_meta)) return call_stock(self, args, nargs, kwnames, State_);
  }
  PyObject* log = global(g.proxy_dict, s.log);
  PyObject* annotation_log = global(g.proxy_dict, s.annotation_log);
  PyObject* seq_fn = global(g.autograd_dict, s.get_sequence_nr);
  if (log == nullptr || annotation_log == nullptr || seq_fn != g.get_sequence_nr) {
    return call_stock(self, args, nargs, kwnames, State_);
  }
  OwnedRef keep_meta(current_meta, true);
  OwnedRef keep_fields(copy_fields, true);
  OwnedRef keep_logs(log, true);
  OwnedRef keep_alog(annotation_log, true);

  OwnedRef expected;
  if (g.check != nullptr) {
    PyObject* argv[7] = {self, kind, target, fargs, fkwargs, name, type_expr};
    expected.reset(PyObject_Vectorcall(g.check, argv, 7, nullptr));
    if (!expected) return nullptr;
  }

  // Graph.create_node
  OwnedRef kwargs_value;
  if (PyDict_GET_SIZE(fkwargs) == 0) {
    kwargs_value.reset(PyObject_CallNoArgs(g.immutable_dict));
    if (!kwargs_value) return nullptr;
  } else {
    kwargs_value.reset(Py_NewRef(fkwargs));
  }
  OwnedRef candidate(name != Py_None ? Py_NewRef(name) : target_to_str(target));
  if (!candidate) return nullptr;
  OwnedRef unique;
  if (PyUnicode_CheckExact(candidate.get())) {
    unique.reset(create_name(ns.get(), used.get(), base_count.get(), candidate.get()));
  } else {
    unique.reset(PyObject_CallMethodObjArgs(ns.get(), s.create_name, candidate.get(), Py_None, nullptr));
  }
  if (!unique) return nullptr;
  PyObject* argv[7] = {graph.get(), unique.get(), kind, target, fargs, kwargs_value.get(), type_expr};
  OwnedRef node(PyObject_Vectorcall(g.node_type, argv, 7, nullptr));
  if (!node) return nullptr;
  PyObject* had = PyDict_SetDefault(obj_to_name.get(), node.get(), unique.get());
  if (had == nullptr) return nullptr;
  if (had != unique.get()) {
    PyErr_SetString(PyExc_AssertionError, "obj is already associated");
    return nullptr;
  }
  {
    OwnedRef insert(PyObject_GetAttr(graph.get(), s.insert_));
    if (!insert) return nullptr;
    OwnedRef r(PyObject_CallOneArg(insert.get(), node.get()));
    if (!r) return nullptr;
    OwnedRef r2(PyObject_CallMethodOneArg(table.get(), s.insert, node.get()));
    if (!r2) return nullptr;
    OwnedRef len(PyObject_GetAttr(graph.get(), s.len_));
    if (!len) return nullptr;
    OwnedRef len1(PyNumber_Add(len.get(), s.one));
    if (!len1 || PyObject_SetAttr(graph.get(), s.len_, len1.get()) < 0) return nullptr;
  }
  // TracerBase.create_node (PythonKeyTracer's own part adds nothing here)
  if (tracer_part(self, node.get(), current_meta, copy_fields, annotation_log, log) < 0) return nullptr;
  g_counts[Served]++;
  if (expected) {
    OwnedRef ok(PyObject_CallOneArg(expected.get(), node.get()));
    if (!ok) return nullptr;
  }
  return Py_NewRef(node.get());
}

PyMethodDef g_def = {
    "create_node", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(create_node)),
    METH_FASTCALL | METH_KEYWORDS,
    "PythonKeyTracer.create_node in C (fastfake; the plain call)."};

PyObject* intern(const char* name) {
  return PyUnicode_InternFromString(name);
}

} // namespace

bool fx_node_setup(PyObject* objects) {
  g.ready = false;
  if (s.call_function == nullptr) {
    s.call_function = intern("call_function");
    s.name_ = intern("name");
    s.graph = intern("graph");
    s.check_mutable_operations = intern("check_mutable_operations");
    s.record_stack_traces = intern("record_stack_traces");
    s.owning_module_ = intern("_owning_module");
    s.create_node_hooks = intern("_create_node_hooks");
    s.graph_namespace = intern("_graph_namespace");
    s.used_names = intern("_used_names");
    s.base_count = intern("_base_count");
    s.obj_to_name = intern("_obj_to_name");
    s.lookup_table = intern("_find_nodes_lookup_table");
    s.insert_ = intern("_insert");
    s.insert = intern("insert");
    s.len_ = intern("_len");
    s.node_name_to_scope = intern("node_name_to_scope");
    s.scope = intern("scope");
    s.module_path = intern("module_path");
    s.module_type = intern("module_type");
    s.module_stack = intern("module_stack");
    s.meta = intern("meta");
    s.should_preserve = intern("should_preserve_node_meta");
    s.should_preserve_seq = intern("_should_preserve_node_meta");
    s.current_meta = intern("current_meta");
    s.current_replay_node = intern("current_replay_node");
    s.special_stack = intern("GRADIENT_ACC_SPECIAL_STACK");
    s.stack_trace = intern("stack_trace");
    s.is_gradient_acc = intern("is_gradient_acc");
    s.autograd_backward = intern("autograd_backward");
    s.copy_fields = intern("_COPY_META_FIELDS");
    s.seq_nr = intern("seq_nr");
    s.in_grad_fn = intern("in_grad_fn");
    s.grad_fn_seq_nr = intern("grad_fn_seq_nr");
    s.is_functional_regenerated = intern("is_functional_regenerated");
    s.custom = intern("custom");
    s.log = intern("log");
    s.annotation_log = intern("annotation_log");
    s.debug = intern("debug");
    s.traceback = intern("traceback");
    s.name_regex = intern("_name_regex");
    s.snake_case = intern("_snake_case");
    s.illegal_names = intern("_illegal_names");
    s.match = intern("match");
    s.group = intern("group");
    s.create_name = intern("create_name");
    s.fmt_create_node = intern("create_node %s");
    s.fmt_assign = intern("Assigning new_seq_nr %s to %s");
    s.fmt_grad_fn = intern("%s: seq_nr from current_meta grad_fn_seq_nr");
    s.fmt_meta_seq = intern("%s: seq_nr from current_meta seq_nr");
    s.fmt_replay = intern("%s: seq_nr from replay_node");
    s.get = intern("get");
    s.dunder_name = intern("__name__");
    s.should_save = intern("_should_save_eager_input_vals");
    s.nn_module_stack = intern("nn_module_stack");
    s.get_sequence_nr = intern("_get_sequence_nr");
    s.zero = PyLong_FromLong(0);
    s.one = PyLong_FromLong(1);
  }
  if (!PyDict_Check(objects)) return false;
  bool ok = take_object(objects, "stock", g.stock) && take_object(objects, "tracer_type", g.tracer_type) &&
      take_object(objects, "graph_type", g.graph_type) && take_object(objects, "namespace_type", g.namespace_type) &&
      take_object(objects, "table_type", g.table_type) && take_object(objects, "node_type", g.node_type) &&
      take_object(objects, "immutable_dict", g.immutable_dict) && take_object(objects, "immutable_list", g.immutable_list) &&
      take_object(objects, "sym_types", g.sym_types) && take_object(objects, "unsafe_targets", g.unsafe_targets) &&
      take_object(objects, "special_targets", g.special_targets) && take_object(objects, "op_overload", g.op_overload) && take_object(objects, "graph_dict", g.graph_dict) &&
      take_object(objects, "proxy_dict", g.proxy_dict) && take_object(objects, "pt_dict", g.pt_dict) &&
      take_object(objects, "tb_dict", g.tb_dict) && take_object(objects, "fx_dict", g.fx_dict) &&
      take_object(objects, "tb_module", g.tb_module) && take_object(objects, "autograd_dict", g.autograd_dict) &&
      take_object(objects, "get_sequence_nr", g.get_sequence_nr) && take_object(objects, "copy_dispatch", g.copy_dispatch) &&
      take_object(objects, "copy_immutable", g.copy_immutable) && take_object(objects, "dict_copy", g.dict_copy) &&
      take_object(objects, "list_copy", g.list_copy) && take_object(objects, "copy_copy", g.copy_copy) &&
      take_object(objects, "logger_type", g.logger_type);
  if (!ok) return false;
  for (const char* key : {"graph_names", "proxy_names", "pt_names", "tb_names"}) {
    PyObject* names = PyDict_GetItemString(objects, key);
    NameBindings& b = key[0] == 'g' ? g.graph_names : key[1] == 'r' ? g.proxy_names : key[1] == 't' ? g.pt_names
                                                                                                      : g.tb_names;
    if (!b.bind(names)) return false;
  }
  if (!PyTuple_Check(g.sym_types) || !PyTuple_Check(g.unsafe_targets) || !PyTuple_Check(g.special_targets) ||
      !PyDict_Check(g.copy_dispatch) || !PyDict_Check(g.graph_dict) || !PyDict_Check(g.proxy_dict) ||
      !PyDict_Check(g.pt_dict) || !PyDict_Check(g.tb_dict) || !PyDict_Check(g.fx_dict) ||
      !PyDict_Check(g.autograd_dict)) {
    return false;
  }
  if (g.parsed == nullptr) g.parsed = PyDict_New();
  if (g.snake == nullptr) g.snake = PyDict_New();
  g.ready = g.parsed != nullptr && g.snake != nullptr;
  return g.ready;
}

PyObject* fx_node_method() {
  if (!g.ready) {
    PyErr_SetString(PyExc_RuntimeError, "fastfake: fx_node_method() before fx_node_setup()");
    return nullptr;
  }
  return PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(g.tracer_type), &g_def);
}

void fx_node_enable(bool on) {
  g.on = on;
}

void fx_node_set_check(PyObject* before) {
  hold_ref(g.check, before);
}

void fx_node_clear() {
  if (g.parsed) PyDict_Clear(g.parsed);
  if (g.snake) PyDict_Clear(g.snake);
}

std::map<std::string, uint64_t> fx_node_counts() {
  return counts_as_map(kCountNames, g_counts);
}

void fx_node_set_counts(const std::map<std::string, uint64_t>& counts) {
  counts_from_map(kCountNames, g_counts, counts);
}

void fx_node_inject_fault(int n) {
  g.fault = n;
}

} // namespace fastfake
