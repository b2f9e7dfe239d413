// Building integer keys from Python values: shared by the elementwise signatures
// (elementwise/elementwise.cpp) and the result-cache keys (cache/keys.cpp).
#pragma once

#include <Python.h>

#include <c10/core/Device.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace fastfake {

using Key = std::vector<int64_t>;

struct KeyHash {
  size_t operator()(const Key& v) const noexcept {
    uint64_t h = 1469598103934665603ULL;
    for (int64_t x : v) {
      h ^= static_cast<uint64_t>(x) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    }
    return static_cast<size_t>(h);
  }
};

// Tags of the values below (each key family adds its own for tensors etc.).
enum : int64_t {
  kKeyNone = 1001,
  kKeyBool,
  kKeyInt,
  kKeyFloat,
  kKeyComplex,
  kKeyStr,
};

// A device as one key item: type and index (index -1, "no index", becomes 0).
inline int64_t device_code(const c10::Device& d) {
  return (static_cast<int64_t>(d.type()) << 8) | (d.index() + 1);
}

inline int64_t float_bits(double d) {
  int64_t bits;
  static_assert(sizeof(bits) == sizeof(d));
  std::memcpy(&bits, &d, sizeof(d));
  return bits;
}

enum class NumberKey { Ok, NotANumber, Symbolic };

// Appends an exact Python bool / int / float / complex (type and bit-exact
// value). SymInt / SymFloat / SymBool report Symbolic; anything else (numpy
// scalars, ints beyond 64 bits, ...) NotANumber. Never leaves a Python error set.
inline NumberKey push_number(PyObject* v, Key& key) {
  if (PyBool_Check(v)) {
    key.push_back(kKeyBool);
    key.push_back(v == Py_True);
    return NumberKey::Ok;
  }
  if (PyLong_CheckExact(v)) {
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow != 0 || (x == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      return NumberKey::NotANumber;
    }
    key.push_back(kKeyInt);
    key.push_back(x);
    return NumberKey::Ok;
  }
  if (PyFloat_CheckExact(v)) {
    key.push_back(kKeyFloat);
    key.push_back(float_bits(PyFloat_AS_DOUBLE(v)));
    return NumberKey::Ok;
  }
  if (PyComplex_CheckExact(v)) {
    key.push_back(kKeyComplex);
    key.push_back(float_bits(PyComplex_RealAsDouble(v)));
    key.push_back(float_bits(PyComplex_ImagAsDouble(v)));
    return NumberKey::Ok;
  }
  const char* tn = Py_TYPE(v)->tp_name;
  return (std::strncmp(tn, "Sym", 3) == 0 || std::strstr(tn, ".Sym") != nullptr)
      ? NumberKey::Symbolic
      : NumberKey::NotANumber;
}

// Appends a str by its UTF-8 bytes. Returns false (no error set) if it has none.
inline bool push_str(PyObject* s, Key& key) {
  Py_ssize_t len = 0;
  const char* c = PyUnicode_AsUTF8AndSize(s, &len);
  if (c == nullptr) {
    PyErr_Clear();
    return false;
  }
  key.push_back(kKeyStr);
  key.push_back(len);
  int64_t chunk = 0;
  for (Py_ssize_t i = 0; i < len; ++i) {
    chunk = (chunk << 8) | static_cast<unsigned char>(c[i]);
    if ((i & 7) == 7) {
      key.push_back(chunk);
      chunk = 0;
    }
  }
  key.push_back(chunk);
  return true;
}

} // namespace fastfake
