// fastfake: every difference between the torch releases the extension is built
// against, named by what differs. Nothing else in csrc/ tests a torch version.
//
// Supported: torch 2.9 (torch_xla 2.9), 2.13, 2.14, 2.15. Python-level differences
// (attribute names, stock signatures) live in fastfake/common/compat.py and reach C++
// through _C.setup(); only what must be decided at compile time is here.
#pragma once

#include <Python.h>

#include <ATen/ATen.h>
#include <c10/core/SymbolicShapeMeta.h>
#include <c10/core/TensorImpl.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/version.h>

#include <memory>

#define FASTFAKE_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||           \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

#if !FASTFAKE_TORCH_AT_LEAST(2, 9)
#error "fastfake needs torch 2.9 or newer"
#endif

namespace fastfake {
namespace compat {

// A code object's bytecode (co_code, without the interpreter's specialisations)
// and variable names (co_varnames): new references, nullptr with the error set.
// CPython 3.11 computes both (PyCode_GetCode / PyCode_GetVarnames); 3.10 holds
// them as attributes.
inline PyObject* code_bytes(PyObject* code) {
#if PY_VERSION_HEX >= 0x030B0000
  return PyCode_GetCode(reinterpret_cast<PyCodeObject*>(code));
#else
  return PyObject_GetAttrString(code, "co_code");
#endif
}

inline PyObject* code_varnames(PyObject* code) {
#if PY_VERSION_HEX >= 0x030B0000
  return PyCode_GetVarnames(reinterpret_cast<PyCodeObject*>(code));
#else
  return PyObject_GetAttrString(code, "co_varnames");
#endif
}

// Whether `obj.<name>` calls the plain Python function `func` its class has under
// that name (the instance does not shadow it), for an object whose class keeps
// its instances' attributes in the object (see below), answered without making
// its dict object: 1 or 0, -1 where this does not apply (the caller reads the
// instance dict). The generic lookup binds `func` where the instance has no
// attribute of the name (a method object, dropped); an instance holding that very
// binding calls `func` on itself too. Runs no Python code; leaves no error set.
inline int managed_method_unshadowed(PyObject* obj, PyObject* name, PyObject* func) {
#if PY_VERSION_HEX >= 0x030B0000
  PyTypeObject* tp = Py_TYPE(obj);
  if (func == nullptr || !PyFunction_Check(func) || !(tp->tp_flags & Py_TPFLAGS_MANAGED_DICT) ||
      tp->tp_getattro != PyObject_GenericGetAttr) {
    return -1;
  }
  PyObject* r = nullptr;
#if PY_VERSION_HEX >= 0x030D0000
  const int found = PyObject_GetOptionalAttr(obj, name, &r);
#else
  const int found = _PyObject_LookupAttr(obj, name, &r);
#endif
  if (found <= 0) {
    PyErr_Clear();
    return -1;
  }
  const int unshadowed = PyMethod_Check(r) && PyMethod_GET_FUNCTION(r) == func && PyMethod_GET_SELF(r) == obj;
  Py_DECREF(r);
  return unshadowed;
#else
  (void)obj;
  (void)name;
  (void)func;
  return -1;
#endif
}

// An instance attribute of an object whose class keeps its instances' attributes
// in the object (Py_TPFLAGS_MANAGED_DICT: every Python class without __slots__ on
// CPython 3.11+), read without making the dict object that _PyObject_GetDictPtr
// makes (and that the cyclic collector then tracks) for such an instance: 1 and
// the borrowed value, 0 where the instance has none, -1 where this read does not
// apply (another kind of class, a class with its own attribute lookup or an
// attribute of that name, which generic lookup would prefer or fall back to): the
// caller reads the instance dict. Runs no Python code; never leaves an error set.
//
// With `or_class_value`, a class attribute of that name that is a plain value (no
// descriptor) does not stop the read: the answer is then what `obj.<name>` gives,
// the instance's own value or else the class's.
inline int managed_instance_attr(PyObject* obj, PyObject* name, PyObject** out, bool or_class_value = false) {
#if PY_VERSION_HEX >= 0x030B0000
  PyTypeObject* tp = Py_TYPE(obj);
  if (!(tp->tp_flags & Py_TPFLAGS_MANAGED_DICT) || tp->tp_getattro != PyObject_GenericGetAttr) return -1;
  PyObject* in_class = _PyType_Lookup(tp, name);
  if (in_class != nullptr && (!or_class_value || Py_TYPE(in_class)->tp_descr_get != nullptr)) return -1;
  PyObject* r = nullptr;
#if PY_VERSION_HEX >= 0x030D0000
  const int found = PyObject_GetOptionalAttr(obj, name, &r);
#else
  const int found = _PyObject_LookupAttr(obj, name, &r);
#endif
  if (found <= 0) {
    PyErr_Clear();
    return 0;
  }
  Py_DECREF(r); // (the instance, or the class, holds it)
  *out = r;
  return 1;
#else
  (void)obj;
  (void)name;
  (void)out;
  (void)or_class_value;
  return -1;
#endif
}

// The release the extension was compiled against ("2.13"), for the Python
// layer to refuse a mismatched import clearly.
inline const char* built_for() {
#define FASTFAKE_STR2(x) #x
#define FASTFAKE_STR(x) FASTFAKE_STR2(x)
  return FASTFAKE_STR(TORCH_VERSION_MAJOR) "." FASTFAKE_STR(TORCH_VERSION_MINOR) "." FASTFAKE_STR(
      TORCH_VERSION_PATCH);
#undef FASTFAKE_STR
#undef FASTFAKE_STR2
}

// ---------------------------------------------------------------------------
// Wrapping a TensorImpl into an instance of a Tensor subclass (FakeTensor).
// 2.10+ export THPVariable_Wrap(tensor, type). 2.9 exports only the one-argument
// form, which wraps into torch.Tensor; the fresh object is then re-typed to the
// subclass with the same check CPython applies to `obj.__class__ = cls`
// (FakeTensor adds no slots, so the layouts are identical) — what
// Tensor._make_subclass's object is, without its detach().
// ---------------------------------------------------------------------------
inline PyObject* wrap_as(const at::Tensor& t, PyTypeObject* type) {
#if FASTFAKE_TORCH_AT_LEAST(2, 10)
  return THPVariable_Wrap(t, type);
#else
  PyObject* obj = THPVariable_Wrap(t);
  if (obj == nullptr) return nullptr;
  if (Py_TYPE(obj) != type && PyObject_SetAttrString(obj, "__class__", reinterpret_cast<PyObject*>(type)) < 0) {
    Py_DECREF(obj);
    return nullptr;
  }
  return obj;
#endif
}

// ---------------------------------------------------------------------------
// The SymbolicShapeMeta of a TensorImpl (numel / contiguity values it has
// computed), and seeding numel on it. 2.15 has a public const accessor for the
// ExtraMeta; before it, the private member is reached through the
// explicit-instantiation rule ([temp.spec]: access checking does not apply to
// explicit instantiations). SymbolicShapeMeta::set_numel is private on every
// supported release.
// ---------------------------------------------------------------------------
namespace rob {
template <typename Tag, typename Tag::type M>
struct Robber {
  friend typename Tag::type get(Tag) {
    return M;
  }
};
#if !FASTFAKE_TORCH_AT_LEAST(2, 15)
struct ExtraMetaField {
  using type = std::unique_ptr<c10::ExtraMeta> c10::TensorImpl::*;
  friend type get(ExtraMetaField);
};
template struct Robber<ExtraMetaField, &c10::TensorImpl::extra_meta_>;
#endif
struct SetNumel {
  using type = void (c10::SymbolicShapeMeta::*)(c10::SymInt) const;
  friend type get(SetNumel);
};
template struct Robber<SetNumel, &c10::SymbolicShapeMeta::set_numel>;
} // namespace rob

inline c10::SymbolicShapeMeta* shape_meta(const c10::TensorImpl* impl) {
#if FASTFAKE_TORCH_AT_LEAST(2, 15)
  c10::ExtraMeta* em = impl->maybe_get_extra_meta();
  return em ? em->symbolic_shape_meta_.get() : nullptr;
#else
  const auto& em = impl->*get(rob::ExtraMetaField{});
  return em ? em->symbolic_shape_meta_.get() : nullptr;
#endif
}

inline void seed_numel(const c10::SymbolicShapeMeta* meta, c10::SymInt n) {
  (meta->*get(rob::SetNumel{}))(std::move(n));
}

} // namespace compat
} // namespace fastfake
