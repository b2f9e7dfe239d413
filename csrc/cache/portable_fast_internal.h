// What the portable records' C++ admission and commit (cache_portable_fast.cpp)
// share with their key templates (cache_portable_keys.cpp): stock's key classes,
// their slots and the other references portable_fast_setup binds.
#pragma once

#include "cache/portable_fast.h"

#include <Python.h>

namespace fastfake {
namespace cache_detail {

struct Refs {
  PyTypeObject* stub = nullptr; // _PySymInputStub
  PyTypeObject* dst = nullptr; // _DeconstructedSymType
  PyTypeObject* key = nullptr; // _DispatchCacheKey
  PyObject* bypass_entry = nullptr; // _DispatchCacheBypassEntry
  PyObject* from_node = nullptr; // _DeconstructedSymNode.from_node
  PyObject* facts_match = nullptr; // fastfake.cache.facts.match
  PyObject* mode_class = nullptr; // FakeTensorMode
  PyObject* key_log = nullptr; // fastfake.cache.portable._KEY_LOG (a list)
  PyObject* open = nullptr; // fastfake.cache.portable._OPEN ([frames open])
  Py_ssize_t stub_value = -1, dst_ty = -1, dst_node = -1, key_key = -1, key_hash = -1;
  PyObject* s_hints = nullptr; // the backed hints' attribute (fastfake.common.compat)
  PyObject* s_ranges = nullptr;
  PyObject* s_size_like = nullptr;
  PyObject* s_replacements = nullptr;
  PyObject* s_axioms = nullptr;
  PyObject* s_divisible = nullptr;
  PyObject* s_floor_div = nullptr;
  PyObject* s_env_cache = nullptr;
  PyObject* s_lower = nullptr;
  PyObject* s_upper = nullptr;
  PyObject* s_extract = nullptr;
  PyObject* s_reason = nullptr;
  PyObject* s_cache = nullptr;
  PyObject* s_bypasses = nullptr;
  PyObject* verifier = nullptr;
  // _DeconstructedSymNode.extract where fastfake.common.compat.stub_extract proves it
  // `return SymNode(self._expr, shape_env, self.pytype, self._hint,
  // self.constant, self.fx_node)`, and the module dict its `SymNode` is read from
  PyObject* extract = nullptr;
  PyObject* extract_globals = nullptr;
  PyObject* s_symnode = nullptr;
  bool ready = false;
  bool on = true;
};
extern Refs g_pf;

// The offset of a writable object slot `tp` itself defines, or -1.
inline Py_ssize_t slot_offset(PyTypeObject* tp, const char* name) {
  return member_slot_offset(PyDict_GetItemString(tp->tp_dict, name), true); // (borrowed)
}

inline PyObject*& slot(PyObject* o, Py_ssize_t off) {
  return *reinterpret_cast<PyObject**>(reinterpret_cast<char*>(o) + off);
}

// A slot's value (borrowed), or nullptr.
inline PyObject* get_slot(PyObject* o, Py_ssize_t off) {
  return slot(o, off);
}

inline void set_slot(PyObject* o, Py_ssize_t off, PyObject* v) {
  Py_XSETREF(slot(o, off), Py_NewRef(v));
}

// An instance of a slots class as its `object.__new__` leaves it.
inline PyObject* alloc(PyTypeObject* tp) {
  return tp->tp_alloc(tp, 0);
}

// A stock key as stock stored it, parsed into a template for other ShapeEnvs
// (`own`: the call's own key, whose stubs may hold argument SymNodes only); false
// where it holds anything else tied to its ShapeEnv.
bool parse_template(const KeyCtx& ctx, PyObject* key, KeyTemplate& t, bool own);
// The key built for this ShapeEnv (new reference), or nullptr with an error.
PyObject* instantiate(const KeyCtx& ctx, const KeyTemplate& t);

} // namespace cache_detail
} // namespace fastfake
