// fastfake's learned records kept out of the cyclic collector.
//
// What fastfake learns during a compile (the ShapeEnv evaluations a record
// replays, signatures, the fields of SymNodes an entry rebuilds, validity
// tuples, SymNode templates) is kept in many small tuples and dicts, tens of
// thousands after a dynamic compile. Each is a tracked object: it adds to the
// counts that decide when CPython runs a full collection (when the objects
// promoted to the oldest generation since the last one exceed a quarter of
// those there) and to every walk of the generation it is in. Those containers
// hold only inert values (untrack.h) and are held only by fastfake, so they are
// on no reference cycle and the collector has nothing to find in them.
#include "runtime/untrack.h"

#include "common/counts.h"

namespace fastfake {
namespace {

enum Count : size_t { Tuples, Dicts, Left, NumCounts };
const char* const kCountNames[NumCounts] = {"tuples", "dicts", "left"};

// Deeper nesting, or more containers in one value, is not looked at (not inert).
constexpr int kMaxDepth = 48;
constexpr int kMaxVisits = 1 << 16;

struct State {
  bool on = false;
  PyObject* basic = nullptr; // owned: sympy.Basic
  uint64_t counts[NumCounts] = {};
};

State& state() {
  static State* s = new State();
  return *s;
}

bool is_inert_leaf(PyObject* o, PyObject* basic) {
  PyTypeObject* tp = Py_TYPE(o);
  if (!PyType_IS_GC(tp)) return true;
  if (PyType_Check(o)) {
    return (reinterpret_cast<PyTypeObject*>(o)->tp_flags & Py_TPFLAGS_IMMUTABLETYPE) != 0;
  }
  return basic != nullptr && PyType_IsSubtype(tp, reinterpret_cast<PyTypeObject*>(basic));
}

struct Walk {
  PyObject* basic;
  uint64_t* counts;
  int visits = 0;

  bool visit(PyObject* o, int depth) {
    PyTypeObject* tp = Py_TYPE(o);
    const bool tuple = tp == &PyTuple_Type;
    const bool frozen = tp == &PyFrozenSet_Type;
    if (!tuple && !frozen && tp != &PyList_Type && tp != &PyDict_Type) return is_inert_leaf(o, basic);
    if (depth >= kMaxDepth || ++visits > kMaxVisits) return false;
    bool all = true;
    if (tuple || tp == &PyList_Type) {
      // (a list is walked for the tuples in it; it is mutable, so never inert)
      const Py_ssize_t n = tuple ? PyTuple_GET_SIZE(o) : PyList_GET_SIZE(o);
      for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* item = tuple ? PyTuple_GET_ITEM(o, i) : PyList_GET_ITEM(o, i);
        all = visit(item, depth + 1) && all;
      }
      if (!tuple) return false;
    } else if (frozen) {
      PyObject* it = PyObject_GetIter(o);
      if (it == nullptr) {
        PyErr_Clear();
        return false;
      }
      while (PyObject* key = PyIter_Next(it)) {
        all = visit(key, depth + 1) && all; // (the set holds the key)
        Py_DECREF(key);
      }
      Py_DECREF(it);
      if (PyErr_Occurred()) {
        PyErr_Clear();
        return false;
      }
    } else {
      Py_ssize_t pos = 0;
      PyObject *k, *v;
      while (PyDict_Next(o, &pos, &k, &v)) {
        visit(k, depth + 1);
        visit(v, depth + 1);
      }
      return false;
    }
    // (counted whether or not CPython's collector untracked it first: it untracks
    // tuples of untracked items itself when a collection passes them, so a count
    // of this walk's own untrackings would follow the collector's timing)
    if (!all) {
      ++counts[Left];
      return false;
    }
    if (PyObject_GC_IsTracked(o)) PyObject_GC_UnTrack(o);
    ++counts[Tuples];
    return true;
  }
};

} // namespace

void untrack_set(bool on, PyObject* sympy_basic) {
  State& s = state();
  s.on = on && sympy_basic != nullptr;
  if (on && sympy_basic != nullptr && PyType_Check(sympy_basic)) {
    Py_INCREF(sympy_basic);
    Py_XSETREF(s.basic, sympy_basic);
  }
}

bool untrack_on() {
  return state().on;
}

bool untrack_inert(PyObject* o) {
  State& s = state();
  if (!s.on || o == nullptr) return false;
  Walk w{s.basic, s.counts};
  return w.visit(o, 0);
}

void untrack_owned_dict(PyObject* d) {
  State& s = state();
  if (!s.on || d == nullptr || !PyDict_CheckExact(d)) return;
  Walk w{s.basic, s.counts};
  Py_ssize_t pos = 0;
  PyObject *k, *v;
  while (PyDict_Next(d, &pos, &k, &v)) {
    if (!w.visit(k, 1) || !w.visit(v, 1)) return;
  }
  if (PyObject_GC_IsTracked(d)) PyObject_GC_UnTrack(d); // (CPython may have, as for tuples)
  ++s.counts[Dicts];
}

std::map<std::string, uint64_t> untrack_counts() {
  return counts_as_map(kCountNames, state().counts);
}

void untrack_set_counts(const std::map<std::string, uint64_t>& counts) {
  counts_from_map(kCountNames, state().counts, counts);
}

} // namespace fastfake
