// A symbolic entry's recipe (Entry, SymShape, SymVal) and the seeds of a portable
// record as plain Python tuples, and back: what the store keeps on disk for the
// records that serve other ShapeEnvs (fastfake/store/symbolic.py encodes the
// tuples; nothing here reads a file). The Python objects a recipe holds (the op,
// devices, constants, a new SymNode's fields) pass through as they are; every other
// field is an int or a bool. Reading back checks every type and range and fails
// (false, no Python error left set) on anything else.
#include "cache/internal.h"

#include <torch/csrc/Device.h>

namespace fastfake {
namespace cache_detail {

namespace {

PyObject* py_int(long long v) {
  return PyLong_FromLongLong(v);
}

PyObject* py_ints(const std::vector<int64_t>& v) {
  PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(v.size()));
  if (t == nullptr) return nullptr;
  for (size_t i = 0; i < v.size(); ++i) {
    PyObject* x = py_int(v[i]);
    if (x == nullptr) {
      Py_DECREF(t);
      return nullptr;
    }
    PyTuple_SET_ITEM(t, static_cast<Py_ssize_t>(i), x);
  }
  return t;
}

PyObject* symval_to_py(const SymVal& v) {
  if (v.kind == SymVal::New && (v.fields == nullptr || !PyTuple_Check(v.fields))) return nullptr;
  return Py_BuildValue("(iLO)", static_cast<int>(v.kind), static_cast<long long>(v.v),
                       v.kind == SymVal::New ? v.fields : Py_None);
}

PyObject* symvals_to_py(const std::vector<SymVal>& vs) {
  PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(vs.size()));
  if (t == nullptr) return nullptr;
  for (size_t i = 0; i < vs.size(); ++i) {
    PyObject* x = symval_to_py(vs[i]);
    if (x == nullptr) {
      Py_DECREF(t);
      return nullptr;
    }
    PyTuple_SET_ITEM(t, static_cast<Py_ssize_t>(i), x);
  }
  return t;
}

PyObject* derived_to_py(const std::vector<std::pair<Derived, SymVal>>& d) {
  PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(d.size()));
  if (t == nullptr) return nullptr;
  for (size_t i = 0; i < d.size(); ++i) {
    PyObject* v = symval_to_py(d[i].second);
    PyObject* p = v != nullptr ? Py_BuildValue("(iN)", static_cast<int>(d[i].first), v) : nullptr;
    if (p == nullptr) {
      Py_DECREF(t);
      return nullptr;
    }
    PyTuple_SET_ITEM(t, static_cast<Py_ssize_t>(i), p);
  }
  return t;
}

PyObject* symshape_to_py(const SymShape& s) {
  PyObject* sizes = symvals_to_py(s.sizes);
  PyObject* strides = sizes != nullptr ? symvals_to_py(s.strides) : nullptr;
  PyObject* offset = strides != nullptr ? symval_to_py(s.offset) : nullptr;
  PyObject* nbytes = offset != nullptr ? symval_to_py(s.nbytes) : nullptr;
  PyObject* derived = nbytes != nullptr ? derived_to_py(s.derived) : nullptr;
  if (derived == nullptr) {
    Py_XDECREF(sizes);
    Py_XDECREF(strides);
    Py_XDECREF(offset);
    Py_XDECREF(nbytes);
    return nullptr;
  }
  return Py_BuildValue("(NNNNLN)", sizes, strides, offset, nbytes, static_cast<long long>(s.version), derived);
}

PyObject* out_to_py(const OutSpec& o) {
  PyObject* sizes = py_ints(o.sizes);
  PyObject* strides = sizes != nullptr ? py_ints(o.strides) : nullptr;
  PyObject* sym = nullptr;
  if (strides != nullptr) {
    sym = o.sym ? symshape_to_py(*o.sym) : Py_NewRef(Py_None);
  }
  if (sym == nullptr) {
    Py_XDECREF(sizes);
    Py_XDECREF(strides);
    return nullptr;
  }
  return Py_BuildValue(
      "(iOLiNNLOOOOON)", static_cast<int>(o.kind), o.constant != nullptr ? o.constant : Py_None,
      static_cast<long long>(o.idx), static_cast<int>(o.dtype), sizes, strides,
      static_cast<long long>(o.offset), o.device != nullptr ? o.device : Py_None, o.conj ? Py_True : Py_False,
      o.neg ? Py_True : Py_False, o.fresh_version ? Py_True : Py_False, o.share_version ? Py_True : Py_False,
      sym);
}

// ---- back ----

bool get_ll(PyObject* o, long long& out) {
  if (!PyLong_CheckExact(o)) return false;
  int overflow = 0;
  out = PyLong_AsLongLongAndOverflow(o, &overflow);
  if (overflow != 0 || (out == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return false;
  }
  return true;
}

bool get_bool(PyObject* o, bool& out) {
  if (o != Py_True && o != Py_False) return false;
  out = o == Py_True;
  return true;
}

bool tuple_of(PyObject* o, Py_ssize_t n) {
  return PyTuple_CheckExact(o) && (n < 0 || PyTuple_GET_SIZE(o) == n);
}

bool ints_from_py(PyObject* o, std::vector<int64_t>& out) {
  if (!tuple_of(o, -1)) return false;
  out.clear();
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); ++i) {
    long long v;
    if (!get_ll(PyTuple_GET_ITEM(o, i), v)) return false;
    out.push_back(v);
  }
  return true;
}

bool symval_from_py(PyObject* o, SymVal& out) {
  if (!tuple_of(o, 3)) return false;
  long long kind, v;
  if (!get_ll(PyTuple_GET_ITEM(o, 0), kind) || !get_ll(PyTuple_GET_ITEM(o, 1), v)) return false;
  PyObject* fields = PyTuple_GET_ITEM(o, 2);
  if (kind == SymVal::New) {
    if (!tuple_of(fields, 6)) return false;
  } else if ((kind != SymVal::Int && kind != SymVal::Input) || fields != Py_None) {
    return false;
  }
  if (kind == SymVal::Input && v < 0) return false;
  out.kind = static_cast<SymVal::Kind>(kind);
  out.v = v;
  if (kind == SymVal::New) out.fields = Py_NewRef(fields);
  return true;
}

bool symvals_from_py(PyObject* o, std::vector<SymVal>& out) {
  if (!tuple_of(o, -1)) return false;
  out.resize(static_cast<size_t>(PyTuple_GET_SIZE(o)));
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); ++i) {
    if (!symval_from_py(PyTuple_GET_ITEM(o, i), out[static_cast<size_t>(i)])) return false;
  }
  return true;
}

bool derived_from_py(PyObject* o, std::vector<std::pair<Derived, SymVal>>& out) {
  if (!tuple_of(o, -1)) return false;
  out.resize(static_cast<size_t>(PyTuple_GET_SIZE(o)));
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); ++i) {
    PyObject* p = PyTuple_GET_ITEM(o, i);
    long long d;
    if (!tuple_of(p, 2) || !get_ll(PyTuple_GET_ITEM(p, 0), d) || d < kNumel || d > kNonOverlappingAndDense) {
      return false;
    }
    out[static_cast<size_t>(i)].first = static_cast<Derived>(d);
    if (!symval_from_py(PyTuple_GET_ITEM(p, 1), out[static_cast<size_t>(i)].second)) return false;
  }
  return true;
}

bool symshape_from_py(PyObject* o, SymShape& s) {
  long long version;
  return tuple_of(o, 6) && symvals_from_py(PyTuple_GET_ITEM(o, 0), s.sizes) &&
      symvals_from_py(PyTuple_GET_ITEM(o, 1), s.strides) && s.sizes.size() == s.strides.size() &&
      symval_from_py(PyTuple_GET_ITEM(o, 2), s.offset) && symval_from_py(PyTuple_GET_ITEM(o, 3), s.nbytes) &&
      get_ll(PyTuple_GET_ITEM(o, 4), version) && (s.version = version, true) &&
      derived_from_py(PyTuple_GET_ITEM(o, 5), s.derived);
}

bool out_from_py(PyObject* o, OutSpec& out) {
  if (!tuple_of(o, 13)) return false;
  long long kind, idx, dtype, offset;
  if (!get_ll(PyTuple_GET_ITEM(o, 0), kind) || kind < OutSpec::Inplace || kind > OutSpec::Constant) return false;
  if (!get_ll(PyTuple_GET_ITEM(o, 2), idx) || !get_ll(PyTuple_GET_ITEM(o, 3), dtype) ||
      !get_ll(PyTuple_GET_ITEM(o, 6), offset)) {
    return false;
  }
  if (dtype < -1 || dtype >= static_cast<long long>(at::ScalarType::NumOptions)) return false;
  out.kind = static_cast<OutSpec::Kind>(kind);
  out.idx = idx;
  out.dtype = static_cast<at::ScalarType>(dtype);
  out.offset = offset;
  PyObject* constant = PyTuple_GET_ITEM(o, 1);
  if (constant != Py_None) {
    if (!PyLong_CheckExact(constant)) return false;
    out.constant = Py_NewRef(constant);
  }
  PyObject* device = PyTuple_GET_ITEM(o, 7);
  if (device != Py_None) {
    if (!THPDevice_Check(device)) return false;
    out.device = Py_NewRef(device);
  }
  if (!ints_from_py(PyTuple_GET_ITEM(o, 4), out.sizes) || !ints_from_py(PyTuple_GET_ITEM(o, 5), out.strides) ||
      !get_bool(PyTuple_GET_ITEM(o, 8), out.conj) || !get_bool(PyTuple_GET_ITEM(o, 9), out.neg) ||
      !get_bool(PyTuple_GET_ITEM(o, 10), out.fresh_version) ||
      !get_bool(PyTuple_GET_ITEM(o, 11), out.share_version)) {
    return false;
  }
  PyObject* sym = PyTuple_GET_ITEM(o, 12);
  if (sym != Py_None) {
    auto s = std::make_shared<SymShape>();
    if (!symshape_from_py(sym, *s)) return false;
    out.sym = std::move(s);
  }
  return true;
}

} // namespace

PyObject* entry_to_py(const Entry& e) {
  if (e.negative || e.item_memo != 0 || e.func == nullptr) return nullptr;
  PyObject* outs = PyTuple_New(static_cast<Py_ssize_t>(e.outs.size()));
  if (outs == nullptr) return nullptr;
  for (size_t i = 0; i < e.outs.size(); ++i) {
    PyObject* o = out_to_py(e.outs[i]);
    if (o == nullptr) {
      Py_DECREF(outs);
      return nullptr;
    }
    PyTuple_SET_ITEM(outs, static_cast<Py_ssize_t>(i), o);
  }
  return Py_BuildValue("(OOON)", e.tuple ? Py_True : Py_False, e.func, e.stock_bypasses ? Py_True : Py_False,
                       outs);
}

bool entry_from_py(PyObject* o, Entry& e) {
  if (!tuple_of(o, 4) || !get_bool(PyTuple_GET_ITEM(o, 0), e.tuple) ||
      !get_bool(PyTuple_GET_ITEM(o, 2), e.stock_bypasses)) {
    return false;
  }
  PyObject* outs = PyTuple_GET_ITEM(o, 3);
  if (!tuple_of(outs, -1) || PyTuple_GET_SIZE(outs) == 0) return false;
  e.func = Py_NewRef(PyTuple_GET_ITEM(o, 1));
  e.outs.resize(static_cast<size_t>(PyTuple_GET_SIZE(outs)));
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(outs); ++i) {
    if (!out_from_py(PyTuple_GET_ITEM(outs, i), e.outs[static_cast<size_t>(i)])) return false;
  }
  return true;
}

PyObject* seeds_to_py(const std::vector<Seed>& seeds) {
  PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(seeds.size()));
  if (t == nullptr) return nullptr;
  for (size_t i = 0; i < seeds.size(); ++i) {
    PyObject* d = seeds[i].values ? derived_to_py(seeds[i].values->derived) : nullptr;
    PyObject* p = d != nullptr ? Py_BuildValue("(nN)", seeds[i].arg, d) : nullptr;
    if (p == nullptr) {
      Py_DECREF(t);
      return nullptr;
    }
    PyTuple_SET_ITEM(t, static_cast<Py_ssize_t>(i), p);
  }
  return t;
}

bool seeds_from_py(PyObject* o, std::vector<Seed>& out) {
  if (!tuple_of(o, -1)) return false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); ++i) {
    PyObject* p = PyTuple_GET_ITEM(o, i);
    long long arg;
    if (!tuple_of(p, 2) || !get_ll(PyTuple_GET_ITEM(p, 0), arg) || arg < 0) return false;
    Seed sd;
    sd.arg = static_cast<Py_ssize_t>(arg);
    sd.values = std::make_shared<SymShape>();
    if (!derived_from_py(PyTuple_GET_ITEM(p, 1), sd.values->derived) || sd.values->derived.empty()) return false;
    out.push_back(std::move(sd));
  }
  return true;
}

} // namespace cache_detail
} // namespace fastfake
