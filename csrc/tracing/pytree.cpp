// torch.utils._pytree's tree_map_only / tree_map / tree_leaves / tree_iter in C.
//
// FunctionalTensorMode.__torch_dispatch__ unwraps every op's arguments and wraps
// its outputs with `pytree.tree_map_only(...)`, and AOTAutograd and FakeTensorMode
// map over arguments with `pytree.tree_map` / `tree_leaves`: per op, a recursive
// Python flatten (TreeSpec objects, a registry lookup and a namedtuple test per
// node), a `functools.wraps` closure and a recursive unflatten.
//
// Stock (torch/utils/_pytree.py, every supported release):
//   tree_map_only(pred, func, tree) = tree_map(map_only(pred)(func), tree)
//   tree_map(func, tree)            = spec.unflatten(map(func, leaves)) where
//                                      leaves, spec = tree_flatten(tree)
//   tree_leaves(tree)               = list(tree_iter(tree))
//   tree_iter(tree)                 = a generator flattening the tree as it is
//                                      consumed (here: an iterator over the leaves)
// with a node being a value whose type (namedtuple classes counted as
// `namedtuple`) is in SUPPORTED_NODES, and tuple / list / dict flattened into
// their items / items / values (keys kept as the context) and rebuilt as
// tuple(values) / list(values) / dict(zip(keys, values)).
//
// The C path takes a call only when the tree's containers are exactly tuple,
// list and dict (their registry entries still those seen at setup) and every
// other value is a leaf the registry cannot claim: not a tuple, list or dict
// subclass (namedtuples, torch.Size, OrderedDict, immutable_list, ...), of a
// type whose metaclass hashes and compares as `type` does (so the registry
// lookup runs no Python) and not in SUPPORTED_NODES. It then does what stock
// does in stock's order: the whole tree flattened first (no Python runs), then
// `pred` (isinstance with a type or a tuple of types) and `func` per leaf in
// order, then the containers rebuilt from what the flattening saw (fresh
// tuples, lists and dicts; the dict keys in their order, inserted one by one as
// `dict(zip(...))` does). Anything else -- keyword arguments, `is_leaf`, more
// trees, another predicate (a callable, a union), a `func` that is not a
// function, builtin or bound method (stock's `functools.wraps` reads its
// attributes), a deeper tree than 64 levels -- calls stock's function with the
// same arguments, counted by reason. Errors raised by `pred` or `func`
// propagate as stock's would, after the same calls.
#include "tracing/pytree.h"

#include "common/counts.h"
#include "tracing/sequence.h"

#include <vector>

namespace fastfake {

namespace {

PyObject* g_supported = nullptr;
PyObject* g_defs[3] = {nullptr, nullptr, nullptr}; // tuple, list, dict NodeDefs
PyObject* g_stock[4] = {nullptr, nullptr, nullptr, nullptr}; // map_only, map, leaves, iter
PyObject* g_check = nullptr;
// FX's immutable_list / immutable_dict and their registry entries (nullptr: not
// offered); flattened like list / dict by tree_leaves and tree_iter only
PyObject* g_fx_types[2] = {nullptr, nullptr};
PyObject* g_fx_defs[2] = {nullptr, nullptr};
PyObject* g_values = nullptr; // "values", "keys": the methods stock's dict flatten calls
PyObject* g_keys = nullptr;
int g_fault = 0;
constexpr int kMaxDepth = 64;

enum Count : size_t {
  MapOnlyServed,
  MapServed,
  LeavesServed,
  IterServed,
  StockArguments,
  StockPredicate,
  StockFunction,
  StockNode,
  StockRegistry,
  StockDepth,
  NumCounts
};
const char* const kCountNames[NumCounts] = {"map_only.served", "map.served", "leaves.served", "iter.served",
                                            "stock.arguments", "stock.predicate", "stock.function",
                                            "stock.node", "stock.registry", "stock.depth"};
uint64_t g_counts[NumCounts] = {};

enum Kind : int32_t { Leaf = 0, Tuple = 1, List = 2, Dict = 3 };

struct Flat {
  std::vector<PyObject*> leaves; // borrowed while the tree is alive; owned below
  std::vector<int32_t> spec; // preorder: kind, then for containers the count
  std::vector<PyObject*> keys; // owned: each dict's keys, in order
  ~Flat() {
    for (PyObject* k : keys) Py_DECREF(k);
  }
};

// FX's immutable_list (i = 0) or immutable_dict (i = 1) flattens, as stock's
// registry entry does (`_list_flatten`: the list itself, iterated; `_dict_flatten`:
// `list(d.values()), list(d.keys())`), exactly as a list / dict: the entry is the
// one seen at setup and the class still inherits the iteration and the methods
// stock's flatten calls.
bool fx_container_is_stock(int i) {
  PyTypeObject* t = reinterpret_cast<PyTypeObject*>(g_fx_types[i]);
  PyObject* d = PyDict_GetItemWithError(g_supported, g_fx_types[i]);
  if (d != g_fx_defs[i]) {
    PyErr_Clear();
    return false;
  }
  if (i == 0) return t->tp_iter == PyList_Type.tp_iter;
  return t->tp_iter == PyDict_Type.tp_iter && _PyType_Lookup(t, g_values) == _PyType_Lookup(&PyDict_Type, g_values) &&
         _PyType_Lookup(t, g_keys) == _PyType_Lookup(&PyDict_Type, g_keys);
}

// 1: flattened; 0: not plain (`why` says why; no Python ran); -1 never (no errors
// can happen: only C-level reads). `fx`: FX's immutable_list / immutable_dict count
// as list / dict (for the leaves; a map would rebuild them as their own types).
int flatten(PyObject* x, Flat& f, int depth, Count* why, bool fx = false) {
  if (depth > kMaxDepth) {
    *why = StockDepth;
    return 0;
  }
  PyTypeObject* t = Py_TYPE(x);
  if (fx && g_fx_types[0] != nullptr) {
    PyObject* tt = reinterpret_cast<PyObject*>(t);
    if (tt == g_fx_types[0] || tt == g_fx_types[1]) {
      if (!fx_container_is_stock(tt == g_fx_types[0] ? 0 : 1)) {
        *why = StockNode;
        return 0;
      }
      t = tt == g_fx_types[0] ? &PyList_Type : &PyDict_Type;
    }
  }
  if (t == &PyTuple_Type || t == &PyList_Type) {
    // (no Python runs while the items are flattened, so a list cannot change under it)
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(x);
    PyObject** items = PySequence_Fast_ITEMS(x);
    f.spec.push_back(t == &PyTuple_Type ? Tuple : List);
    f.spec.push_back(static_cast<int32_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      if (flatten(items[i], f, depth + 1, why, fx) == 0) return 0;
    }
    return 1;
  }
  if (t == &PyDict_Type) {
    const Py_ssize_t n = PyDict_GET_SIZE(x);
    PyObject* keys = PyList_New(n);
    if (keys == nullptr) {
      PyErr_Clear();
      *why = StockNode;
      return 0;
    }
    f.keys.push_back(keys);
    f.spec.push_back(Dict);
    f.spec.push_back(static_cast<int32_t>(n));
    Py_ssize_t pos = 0, i = 0;
    PyObject *k, *v;
    // (the values' flattening runs no Python, so the dict cannot change under it)
    while (PyDict_Next(x, &pos, &k, &v)) {
      Py_INCREF(k);
      PyList_SET_ITEM(keys, i++, k);
      if (flatten(v, f, depth + 1, why, fx) == 0) return 0;
    }
    return 1;
  }
  if (PyTuple_Check(x) || PyList_Check(x) || PyDict_Check(x)) {
    *why = StockNode; // namedtuples, structseqs, torch.Size, OrderedDict, defaultdict, immutable_*
    return 0;
  }
  PyTypeObject* meta = Py_TYPE(reinterpret_cast<PyObject*>(t));
  if (meta->tp_hash != PyType_Type.tp_hash || meta->tp_richcompare != PyType_Type.tp_richcompare) {
    *why = StockNode; // looking the type up could run Python
    return 0;
  }
  const int registered = PyDict_Contains(g_supported, reinterpret_cast<PyObject*>(t));
  if (registered != 0) {
    if (registered < 0) PyErr_Clear();
    *why = StockNode;
    return 0;
  }
  f.spec.push_back(Leaf);
  f.leaves.push_back(x);
  return 1;
}

bool registry_unchanged() {
  if (g_supported == nullptr || !PyDict_CheckExact(g_supported)) return false;
  PyObject* types[3] = {reinterpret_cast<PyObject*>(&PyTuple_Type), reinterpret_cast<PyObject*>(&PyList_Type),
                        reinterpret_cast<PyObject*>(&PyDict_Type)};
  for (int i = 0; i < 3; ++i) {
    if (PyDict_GetItemWithError(g_supported, types[i]) != g_defs[i]) {
      PyErr_Clear();
      return false;
    }
  }
  return true;
}

// Rebuilds the tree from `f.spec` with `values` (one new reference per leaf,
// consumed). New reference or nullptr with an error.
PyObject* build(const Flat& f, std::vector<PyObject*>& values, size_t& s, size_t& leaf, size_t& key, bool fault) {
  const int32_t kind = f.spec[s++];
  if (kind == Leaf) {
    PyObject* v = values[leaf];
    values[leaf++] = nullptr;
    return v;
  }
  const int32_t n = f.spec[s++];
  if (kind == Dict) {
    PyObject* keys = f.keys[key++];
    PyObject* out = PyDict_New();
    if (out == nullptr) return nullptr;
    for (int32_t i = 0; i < n; ++i) {
      PyObject* v = build(f, values, s, leaf, key, fault);
      if (v == nullptr || PyDict_SetItem(out, PyList_GET_ITEM(keys, i), v) < 0) {
        Py_XDECREF(v);
        Py_DECREF(out);
        return nullptr;
      }
      Py_DECREF(v);
    }
    return out;
  }
  return new_sequence(kind == Tuple && !fault, n, [&](Py_ssize_t) { return build(f, values, s, leaf, key, fault); });
}

PyObject* to_stock(int which, Count why, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  g_counts[why]++;
  return PyObject_Vectorcall(g_stock[which], args, nargsf, kwnames);
}

bool plain_function(PyObject* func) {
  return PyFunction_Check(func) || PyCFunction_Check(func) || PyMethod_Check(func);
}

bool plain_predicate(PyObject* pred) {
  if (PyType_Check(pred)) return true;
  if (!PyTuple_CheckExact(pred)) return false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(pred); ++i) {
    if (!PyType_Check(PyTuple_GET_ITEM(pred, i))) return false;
  }
  return true;
}

void release(std::vector<PyObject*>& values) {
  for (PyObject*& v : values) Py_CLEAR(v);
}

// crosscheck (when on) of a served result; consumes `out` if the check raises.
PyObject* checked(PyObject* tree, PyObject* out, bool leaves_only) {
  if (g_check == nullptr || out == nullptr) return out;
  PyObject* r = PyObject_CallFunctionObjArgs(g_check, tree, out, leaves_only ? Py_True : Py_False, nullptr);
  if (r == nullptr) {
    Py_DECREF(out);
    return nullptr;
  }
  Py_DECREF(r);
  return out;
}

// pred == nullptr: tree_map (func on every leaf); else tree_map_only.
PyObject* map_tree(PyObject* pred, PyObject* func, PyObject* tree, Flat& f) {
  // own the leaves: pred and func may drop the tree's references to them
  for (PyObject* v : f.leaves) Py_INCREF(v);
  std::vector<PyObject*> values;
  values.reserve(f.leaves.size());
  PyObject* err = nullptr;
  for (PyObject* leaf : f.leaves) {
    PyObject* v;
    if (pred != nullptr) {
      const int hit = PyObject_IsInstance(leaf, pred);
      if (hit < 0) {
        err = leaf;
        break;
      }
      if (hit) {
        v = PyObject_CallOneArg(func, leaf);
      } else {
        Py_INCREF(leaf);
        v = leaf;
      }
    } else {
      v = PyObject_CallOneArg(func, leaf);
    }
    if (v == nullptr) {
      err = leaf;
      break;
    }
    values.push_back(v);
  }
  PyObject* out = nullptr;
  if (err == nullptr) {
    if (!registry_unchanged()) {
      // (func changed the registry: stock rebuilds through whatever it holds now)
      release(values);
      for (PyObject* v : f.leaves) Py_DECREF(v);
      PyErr_SetString(PyExc_RuntimeError,
                      "fastfake: torch.utils._pytree.SUPPORTED_NODES changed while a tree was mapped");
      return nullptr;
    }
    const bool fault = g_fault > 0;
    if (fault) g_fault--;
    size_t s = 0, leaf = 0, key = 0;
    out = build(f, values, s, leaf, key, fault);
  }
  release(values);
  out = checked(tree, out, false);
  for (PyObject* v : f.leaves) Py_DECREF(v);
  return out;
}

// tree_map_only(type_or_types_or_pred, /, func, tree, is_leaf=None)
PyObject* fast_map_only(PyObject*, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  const Py_ssize_t n = PyVectorcall_NARGS(nargsf);
  if (kwnames != nullptr || !(n == 3 || (n == 4 && args[3] == Py_None))) return to_stock(0, StockArguments, args, nargsf, kwnames);
  if (!registry_unchanged()) return to_stock(0, StockRegistry, args, nargsf, kwnames);
  if (!plain_predicate(args[0])) return to_stock(0, StockPredicate, args, nargsf, kwnames);
  if (!plain_function(args[1])) return to_stock(0, StockFunction, args, nargsf, kwnames);
  Flat f;
  Count why = StockNode;
  if (flatten(args[2], f, 0, &why) == 0) return to_stock(0, why, args, nargsf, kwnames);
  PyObject* out = map_tree(args[0], args[1], args[2], f);
  if (out != nullptr) g_counts[MapOnlyServed]++;
  return out;
}

// tree_map(func, tree, *rests, is_leaf=None)
PyObject* fast_map(PyObject*, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  const Py_ssize_t n = PyVectorcall_NARGS(nargsf);
  if (kwnames != nullptr || n != 2) return to_stock(1, StockArguments, args, nargsf, kwnames);
  if (!registry_unchanged()) return to_stock(1, StockRegistry, args, nargsf, kwnames);
  Flat f;
  Count why = StockNode;
  if (flatten(args[1], f, 0, &why) == 0) return to_stock(1, why, args, nargsf, kwnames);
  PyObject* out = map_tree(nullptr, args[0], args[1], f);
  if (out != nullptr) g_counts[MapServed]++;
  return out;
}

// tree_leaves(tree, is_leaf=None) (which = 2) and tree_iter(tree, is_leaf=None)
// (which = 3: an iterator over the same list; stock's generator would flatten as
// it is consumed, which for a plain tree runs no Python either).
PyObject* leaves_of(int which, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  const Py_ssize_t n = PyVectorcall_NARGS(nargsf);
  if (kwnames != nullptr || !(n == 1 || (n == 2 && args[1] == Py_None))) {
    return to_stock(which, StockArguments, args, nargsf, kwnames);
  }
  if (!registry_unchanged()) return to_stock(which, StockRegistry, args, nargsf, kwnames);
  Flat f;
  Count why = StockNode;
  if (flatten(args[0], f, 0, &why, true) == 0) return to_stock(which, why, args, nargsf, kwnames);
  PyObject* out = PyList_New(static_cast<Py_ssize_t>(f.leaves.size()));
  if (out == nullptr) return nullptr;
  const bool fault = g_fault > 0 && f.leaves.size() > 1;
  if (fault) g_fault--;
  for (size_t i = 0; i < f.leaves.size(); ++i) {
    PyObject* v = f.leaves[fault ? f.leaves.size() - 1 - i : i];
    Py_INCREF(v);
    PyList_SET_ITEM(out, static_cast<Py_ssize_t>(i), v);
  }
  out = checked(args[0], out, true);
  if (out == nullptr) return nullptr;
  if (which == 3) {
    PyObject* it = PyObject_GetIter(out);
    Py_DECREF(out);
    if (it != nullptr) g_counts[IterServed]++;
    return it;
  }
  g_counts[LeavesServed]++;
  return out;
}

PyObject* fast_leaves(PyObject*, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  return leaves_of(2, args, nargsf, kwnames);
}

PyObject* fast_iter(PyObject*, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  return leaves_of(3, args, nargsf, kwnames);
}

PyMethodDef g_defs_py[4] = {
    {"tree_map_only", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(fast_map_only)),
     METH_FASTCALL | METH_KEYWORDS, "torch.utils._pytree.tree_map_only in C (fastfake; plain trees)."},
    {"tree_map", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(fast_map)),
     METH_FASTCALL | METH_KEYWORDS, "torch.utils._pytree.tree_map in C (fastfake; plain trees)."},
    {"tree_leaves", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(fast_leaves)),
     METH_FASTCALL | METH_KEYWORDS, "torch.utils._pytree.tree_leaves in C (fastfake; plain trees)."},
    {"tree_iter", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(fast_iter)),
     METH_FASTCALL | METH_KEYWORDS, "torch.utils._pytree.tree_iter in C (fastfake; plain trees)."},
};

} // namespace

void pytree_setup(PyObject* supported_nodes, PyObject* tuple_def, PyObject* list_def, PyObject* dict_def,
                  PyObject* stock_map_only, PyObject* stock_map, PyObject* stock_leaves, PyObject* stock_iter) {
  Py_INCREF(supported_nodes);
  Py_XSETREF(g_supported, supported_nodes);
  PyObject* defs[3] = {tuple_def, list_def, dict_def};
  PyObject* stock[4] = {stock_map_only, stock_map, stock_leaves, stock_iter};
  for (int i = 0; i < 4; ++i) {
    if (i < 3) {
      Py_INCREF(defs[i]);
      Py_XSETREF(g_defs[i], defs[i]);
    }
    Py_INCREF(stock[i]);
    Py_XSETREF(g_stock[i], stock[i]);
  }
}

void pytree_setup_fx(PyObject* list_type, PyObject* dict_type, PyObject* list_def, PyObject* dict_def) {
  PyObject* in[4] = {list_type, dict_type, list_def, dict_def};
  PyObject** out[4] = {&g_fx_types[0], &g_fx_types[1], &g_fx_defs[0], &g_fx_defs[1]};
  const bool on = list_type != Py_None && dict_type != Py_None && PyType_Check(list_type) && PyType_Check(dict_type);
  for (int i = 0; i < 4; ++i) {
    PyObject* v = on ? in[i] : nullptr;
    Py_XINCREF(v);
    Py_XSETREF(*out[i], v);
  }
  if (g_values == nullptr) {
    g_values = PyUnicode_InternFromString("values");
    g_keys = PyUnicode_InternFromString("keys");
  }
}

PyObject* pytree_functions() {
  PyObject* out = PyTuple_New(4);
  if (out == nullptr) return nullptr;
  for (int i = 0; i < 4; ++i) {
    PyObject* fn = PyCFunction_New(&g_defs_py[i], nullptr);
    if (fn == nullptr) {
      Py_DECREF(out);
      return nullptr;
    }
    PyTuple_SET_ITEM(out, i, fn);
  }
  return out;
}

void pytree_set_check(PyObject* check) {
  PyObject* c = check == Py_None ? nullptr : check;
  Py_XINCREF(c);
  Py_XSETREF(g_check, c);
}

std::map<std::string, uint64_t> pytree_counts() {
  return counts_as_map(kCountNames, g_counts);
}

void pytree_set_counts(const std::map<std::string, uint64_t>& counts) {
  counts_from_map(kCountNames, g_counts, counts);
}

void pytree_inject_fault(int n) {
  g_fault = n;
}

} // namespace fastfake
