// The proxy mode's SymNode dispatch, in C.
//
// Under make_fx (AOTAutograd's trace, export) every SymNode operation on traced
// SymInts -- `SymNode.<op>` built by `_make_node_magic` / `_make_user_magic`
// (torch/fx/experimental/sym_node.py) -- finds a proxy mode and calls
// `proxy_tensor.handle_sym_dispatch(op, args, {})`: `get_proxy_mode()` (the
// pre-dispatch state's slot and the dispatch mode of key PROXY), a
// `disable_proxy_modes_tracing()` context (a contextmanager over the generator
// `_disable_infra_mode`: `_unset_infra_mode` takes the mode off the stack,
// `_push_mode` puts it back in a `finally`), then `mode.__sym_dispatch__(op, [],
// args, {})`: the multiply-by-one peephole, `out = op(*args)` with tracing off,
// `_sym_register(self.tracer, op, args, out)`. Seven Python frames and a
// generator around each of the 7,996 operations of a dynamic=True GPT-2 compile.
//
// This is `handle_sym_dispatch` while fastfake is installed. The plain call --
// positional (op, args, kwargs), an exact tuple of arguments, an exact empty
// kwargs dict, no pre-dispatch proxy mode, a post-dispatch mode exactly
// ProxyTorchDispatchMode whose `__sym_dispatch__` is stock's, an exact int or
// bool where the peephole compares with 1, and every module name the path stands
// for still stock's -- is done here in stock's order: the mode taken off the
// stack by torch._C._unset_dispatch_mode (the binding `_unset_infra_mode`
// calls), the peephole or `op(*args)` and `_sym_register` (read from the module
// per call, as stock does), then in every case the mode put back as `_push_mode`
// does (torch._C._push_on_torch_dispatch_stack for a mode with no `_dispatch_key`,
// stock's `_push_mode` otherwise); an error of the body survives the push, an
// error of the push wins (chained, as a `finally` does). Everything else is
// stock's function, counted by reason. Which releases: fastfake/tracing/sym_dispatch.py.
#include "tracing/sym_dispatch.h"

#include "common/bindings.h"
#include "common/counts.h"
#include "common/refs.h"

namespace fastfake {

namespace {

struct State {
  PyObject* stock = nullptr; // handle_sym_dispatch
  PyObject* pt_dict = nullptr; // proxy_tensor's module dict
  PyObject* ops_dict = nullptr; // torch._ops's
  PyObject* pd_dict = nullptr; // torch.utils._python_dispatch's
  PyObject* c_dict = nullptr; // torch._C's
  PyObject* operator_dict = nullptr;
  NameBindings pt_names, ops_names, pd_names, c_names, operator_names;
  PyObject* proxy_key = nullptr; // torch._C._TorchDispatchModeKey.PROXY
  PyObject* mode_type = nullptr; // ProxyTorchDispatchMode
  PyObject* sym_dispatch = nullptr; // its stock __sym_dispatch__ (the function)
  PyObject* state = nullptr; // torch._ops._mode_stack_state_for_pre_dispatch
  PyObject* state_type = nullptr; // _ModeStackStateForPreDispatch
  PyObject* state_get = nullptr; // its stock `get`
  PyObject* mul = nullptr; // operator.mul
  PyObject* get_mode = nullptr; // torch._C._get_dispatch_mode
  PyObject* unset_mode = nullptr; // torch._C._unset_dispatch_mode
  PyObject* push_stack = nullptr; // torch._C._push_on_torch_dispatch_stack
  PyObject* push_mode = nullptr; // _python_dispatch._push_mode (stock's)
  PyObject* len_stack = nullptr; // torch._C._len_torch_dispatch_stack (crosscheck)
  PyObject* check = nullptr;
  bool ready = false;
  bool on = false;
  int fault = 0;
};
State g;

struct Names {
  PyObject* infra_modes; // _ModeStackStateForPreDispatch__infra_modes
  PyObject* get;
  PyObject* sym_dispatch;
  PyObject* tracer;
  PyObject* dispatch_key;
  PyObject* sym_register;
};
Names s{};

enum Count : size_t { Served, Peephole, Off, Arguments, State_, PreDispatch, Mode, NumCounts };
const char* const kCountNames[NumCounts] = {
    "served", "peephole", "stock.off", "stock.arguments", "stock.state", "stock.pre_dispatch", "stock.mode"};
uint64_t g_counts[NumCounts] = {};

PyObject* call_stock(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, Count why) {
  g_counts[why]++;
  return PyObject_Vectorcall(g.stock, args, static_cast<size_t>(nargs), kwnames);
}

bool names_unchanged() {
  return g.pt_names.hold(g.pt_dict) && g.ops_names.hold(g.ops_dict) && g.pd_names.hold(g.pd_dict) &&
      g.c_names.hold(g.c_dict) && g.operator_names.hold(g.operator_dict);
}

// The pre-dispatch state's proxy slot (`_get_dispatch_mode_pre_dispatch(PROXY)`:
// `mode_stack_state_for_pre_dispatch().get(0)`), borrowed: 1 None, 0 a mode, -1
// where it cannot be read as stock's `get` reads it (no error set).
int no_pre_dispatch_mode() {
  if (reinterpret_cast<PyObject*>(Py_TYPE(g.state)) != g.state_type ||
      _PyType_Lookup(reinterpret_cast<PyTypeObject*>(g.state_type), s.get) != g.state_get) {
    return -1;
  }
  OwnedRef modes(PyObject_GetAttr(g.state, s.infra_modes));
  if (!modes || !PyList_CheckExact(modes.get()) || PyList_GET_SIZE(modes.get()) < 1) {
    PyErr_Clear();
    return -1;
  }
  return PyList_GET_ITEM(modes.get(), 0) == Py_None ? 1 : 0;
}

// `isinstance(x, int) and x == 1` for an exact int or bool: 1 / 0; -1 for an int
// subclass (its == is its own: stock's).
int is_int_one(PyObject* x) {
  if (!PyLong_Check(x)) return 0;
  if (!PyLong_CheckExact(x) && !PyBool_Check(x)) return -1;
  int overflow = 0;
  const long v = PyLong_AsLongAndOverflow(x, &overflow);
  if (v == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return -1;
  }
  return overflow == 0 && v == 1 ? 1 : 0;
}

// `_push_mode(mode)`: a mode with no `_dispatch_key` (hasattr false) or None
// goes on the torch dispatch stack; any other is stock's function. 0 or -1.
int push_back(PyObject* mode) {
  PyObject* k = PyObject_GetAttr(mode, s.dispatch_key);
  if (k == nullptr) {
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
    PyErr_Clear();
  }
  OwnedRef key(k);
  OwnedRef r(key && key.get() != Py_None ? PyObject_CallOneArg(g.push_mode, mode)
                                         : PyObject_CallOneArg(g.push_stack, mode));
  return r ? 0 : -1;
}

// The body under the context: the peephole (`peep`: 0 none, else the index of
// the argument returned) or `op(*args)` and `_sym_register(self.tracer, op,
// args, out)`. New reference or nullptr.
PyObject* body(PyObject* mode, PyObject* func, PyObject* fargs, int peep) {
  if (peep != 0) {
    PyObject* r = PyTuple_GET_ITEM(fargs, peep - 1);
    Py_INCREF(r);
    return r;
  }
  OwnedRef out(PyObject_Call(func, fargs, nullptr));
  if (!out) return nullptr;
  PyObject* reg = PyDict_GetItemWithError(g.pt_dict, s.sym_register); // (a global, read per call)
  if (reg == nullptr) {
    if (!PyErr_Occurred()) PyErr_Format(PyExc_NameError, "name '%U' is not defined", s.sym_register);
    return nullptr;
  }
  Py_INCREF(reg);
  OwnedRef reg_ref(reg);
  OwnedRef tracer(PyObject_GetAttr(mode, s.tracer));
  if (!tracer) return nullptr;
  if (g.fault > 0) {
    g.fault--;
  } else {
    PyObject* argv[4] = {tracer.get(), func, fargs, out.get()};
    OwnedRef r(PyObject_Vectorcall(reg, argv, 4, nullptr));
    if (!r) return nullptr;
  }
  PyObject* o = out.get();
  Py_INCREF(o);
  return o;
}

PyObject* handle_sym_dispatch(PyObject* /*self*/, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (!g.on || !g.ready) return call_stock(args, nargs, kwnames, Off);
  if (kwnames != nullptr || nargs != 3) return call_stock(args, nargs, kwnames, Arguments);
  PyObject* func = args[0];
  PyObject* fargs = args[1];
  PyObject* kwargs = args[2];
  if (!PyTuple_CheckExact(fargs) || !PyDict_CheckExact(kwargs) || PyDict_GET_SIZE(kwargs) != 0) {
    return call_stock(args, nargs, kwnames, Arguments);
  }
  if (!names_unchanged()) return call_stock(args, nargs, kwnames, State_);
  // get_proxy_mode(): the pre-dispatch slot, then the mode of key PROXY
  const int no_pre = no_pre_dispatch_mode();
  if (no_pre < 0) return call_stock(args, nargs, kwnames, State_);
  if (no_pre == 0) return call_stock(args, nargs, kwnames, PreDispatch);
  PyObject* mode;
  {
    OwnedRef m(PyObject_CallOneArg(g.get_mode, g.proxy_key));
    if (!m) return nullptr;
    if (reinterpret_cast<PyObject*>(Py_TYPE(m.get())) != g.mode_type ||
        _PyType_Lookup(reinterpret_cast<PyTypeObject*>(g.mode_type), s.sym_dispatch) != g.sym_dispatch) {
      return call_stock(args, nargs, kwnames, Mode); // (None: stock raises; another mode: its own)
    }
    // `mode.__sym_dispatch__` is the class's function (no instance attribute)
    OwnedRef bound(PyObject_GetAttr(m.get(), s.sym_dispatch));
    if (!bound || !PyMethod_Check(bound.get()) || PyMethod_GET_FUNCTION(bound.get()) != g.sym_dispatch ||
        PyMethod_GET_SELF(bound.get()) != m.get()) {
      PyErr_Clear();
      return call_stock(args, nargs, kwnames, Mode);
    }
    mode = m.get();
    Py_INCREF(mode);
  }
  OwnedRef mode_ref(mode);
  // __sym_dispatch__'s peephole, decided before anything runs: `func is
  // operator.mul` and an exact int or bool 1 as args[1], else as args[0]
  int peep = 0;
  if (func == g.mul) {
    if (PyTuple_GET_SIZE(fargs) < 2) return call_stock(args, nargs, kwnames, Arguments);
    const int one1 = is_int_one(PyTuple_GET_ITEM(fargs, 1));
    const int one0 = one1 == 1 ? 0 : is_int_one(PyTuple_GET_ITEM(fargs, 0));
    if (one1 < 0 || one0 < 0) return call_stock(args, nargs, kwnames, Arguments);
    peep = one1 == 1 ? 1 : one0 == 1 ? 2 : 0; // (args[1] is 1: args[0]; args[0] is 1: args[1])
  }
  Py_ssize_t depth = -1;
  if (g.check != nullptr) {
    // (the dispatch stack's length before, for crosscheck)
    OwnedRef r(PyObject_CallNoArgs(g.len_stack));
    if (!r) return nullptr;
    depth = PyLong_AsSsize_t(r.get());
    if (depth == -1 && PyErr_Occurred()) return nullptr;
  }
  // disable_proxy_modes_tracing(): the mode off the stack
  OwnedRef unset(PyObject_CallOneArg(g.unset_mode, g.proxy_key));
  if (!unset) return nullptr;
  OwnedRef out(body(mode, func, fargs, peep));
  // finally: `if mode_unset is not None: _push_mode(mode_unset)`
  if (unset.get() != Py_None) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (push_back(unset.get()) < 0) {
      if (type != nullptr) _PyErr_ChainExceptions(type, value, tb);
      return nullptr;
    }
    PyErr_Restore(type, value, tb);
  }
  if (!out) return nullptr;
  g_counts[Served]++;
  if (peep != 0) g_counts[Peephole]++;
  if (g.check != nullptr) {
    OwnedRef depth_obj(PyLong_FromSsize_t(depth));
    if (!depth_obj) return nullptr;
    PyObject* argv[5] = {mode, func, fargs, out.get(), depth_obj.get()};
    OwnedRef r(PyObject_Vectorcall(g.check, argv, 5, nullptr));
    if (!r) return nullptr;
  }
  PyObject* o = out.get();
  Py_INCREF(o);
  return o;
}

PyMethodDef g_def = {
    "handle_sym_dispatch",
    reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(handle_sym_dispatch)),
    METH_FASTCALL | METH_KEYWORDS,
    "torch.fx.experimental.proxy_tensor.handle_sym_dispatch in C (fastfake; the plain call)."};

PyObject* intern(const char* name) {
  return PyUnicode_InternFromString(name);
}

} // namespace

bool sym_dispatch_setup(PyObject* objects) {
  g.ready = false;
  if (s.get == nullptr) {
    s.infra_modes = intern("_ModeStackStateForPreDispatch__infra_modes");
    s.get = intern("get");
    s.sym_dispatch = intern("__sym_dispatch__");
    s.tracer = intern("tracer");
    s.dispatch_key = intern("_dispatch_key");
    s.sym_register = intern("_sym_register");
  }
  if (!PyDict_Check(objects)) return false;
  const bool ok = take_object(objects, "stock", g.stock) && take_object(objects, "pt_dict", g.pt_dict) &&
      take_object(objects, "ops_dict", g.ops_dict) && take_object(objects, "pd_dict", g.pd_dict) &&
      take_object(objects, "c_dict", g.c_dict) && take_object(objects, "operator_dict", g.operator_dict) &&
      take_object(objects, "proxy_key", g.proxy_key) && take_object(objects, "mode_type", g.mode_type) &&
      take_object(objects, "sym_dispatch", g.sym_dispatch) && take_object(objects, "state", g.state) &&
      take_object(objects, "state_type", g.state_type) && take_object(objects, "state_get", g.state_get) &&
      take_object(objects, "mul", g.mul) && take_object(objects, "get_mode", g.get_mode) &&
      take_object(objects, "unset_mode", g.unset_mode) && take_object(objects, "push_stack", g.push_stack) &&
      take_object(objects, "push_mode", g.push_mode) && take_object(objects, "len_stack", g.len_stack);
  if (!ok) return false;
  if (!g.pt_names.bind(PyDict_GetItemString(objects, "pt_names")) ||
      !g.ops_names.bind(PyDict_GetItemString(objects, "ops_names")) ||
      !g.pd_names.bind(PyDict_GetItemString(objects, "pd_names")) ||
      !g.c_names.bind(PyDict_GetItemString(objects, "c_names")) ||
      !g.operator_names.bind(PyDict_GetItemString(objects, "operator_names"))) {
    return false;
  }
  if (!PyDict_Check(g.pt_dict) || !PyDict_Check(g.ops_dict) || !PyDict_Check(g.pd_dict) ||
      !PyDict_Check(g.c_dict) || !PyDict_Check(g.operator_dict) || !PyType_Check(g.mode_type) ||
      !PyType_Check(g.state_type)) {
    return false;
  }
  g.ready = true;
  return true;
}

PyObject* sym_dispatch_function() {
  if (!g.ready) {
    PyErr_SetString(PyExc_RuntimeError, "fastfake: sym_dispatch_function() before sym_dispatch_setup()");
    return nullptr;
  }
  return PyCFunction_New(&g_def, nullptr);
}

void sym_dispatch_enable(bool on) {
  g.on = on;
}

void sym_dispatch_set_check(PyObject* check) {
  hold_ref(g.check, check);
}

std::map<std::string, uint64_t> sym_dispatch_counts() {
  return counts_as_map(kCountNames, g_counts);
}

void sym_dispatch_set_counts(const std::map<std::string, uint64_t>& counts) {
  counts_from_map(kCountNames, g_counts, counts);
}

void sym_dispatch_inject_fault(int n) {
  g.fault = n;
}

} // namespace fastfake
