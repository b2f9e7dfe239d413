// Recipes of the validation tensors stock builds on a symbolic miss
// (fastfake/cache/learn.py, _SYNTH_MEMO): what an output built from given sizes /
// strides / offset carries beyond them, and building it again from a recipe.
#include "cache/internal.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Layout.h>
#include <torch/csrc/MemoryFormat.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/tensor/python_tensor.h>
#include <torch/csrc/utils/python_symnode.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/SymInt.h>

#include <cstring>
#include <list>
#include <unordered_map>

namespace fastfake {
namespace cache_detail {
namespace {

// ---------------------------------------------------------------------------
// Stock's synthesised outputs on a miss (see fastfake/cache/learn.py, _SYNTH_MEMO).
// A recipe is what an output built from given sizes / strides / offset carries
// beyond them: its storage size (fresh outputs) and the derived values stock's
// construction computed, as ints or SymNode value tuples.
// ---------------------------------------------------------------------------
PyObject* symval_to_py(const SymVal& v) {
  if (v.kind == SymVal::Int) return PyLong_FromLongLong(v.v);
  if (v.kind == SymVal::New) {
    Py_INCREF(v.fields);
    return v.fields;
  }
  Py_RETURN_NONE;
}

bool symval_from_py(PyObject* o, SymVal& v) {
  if (PyLong_CheckExact(o)) {
    v.kind = SymVal::Int;
    v.v = PyLong_AsLongLong(o);
    return !(v.v == -1 && PyErr_Occurred());
  }
  if (PyTuple_Check(o) && PyTuple_GET_SIZE(o) == 6) {
    v.kind = SymVal::New;
    Py_INCREF(o);
    v.fields = o;
    return true;
  }
  PyErr_SetString(PyExc_TypeError, "fastfake: bad SymNode recipe value");
  return false;
}

} // namespace
} // namespace cache_detail

using namespace cache_detail;

PyObject* synth_recipe(PyObject* synth, bool fresh) {
  if (!is_fake_exact(synth)) Py_RETURN_NONE;
  PyObject* mode = instance_attr(synth, g_py.s_fake_mode);
  PyObject* env = mode ? instance_attr(mode, g_py.s_shape_env) : nullptr;
  if (env == nullptr || env == Py_None) Py_RETURN_NONE;
  KeyCtx ctx{mode, {}, {}, CacheBypassArgType};
  ctx.shape_env = env;
  const at::Tensor& t = THPVariable_Unpack(synth);
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (impl->layout() != at::kStrided || !impl->has_storage()) Py_RETURN_NONE;
  SymShape sym;
  SymVal nbytes;
  if (fresh && !learn_symval(ctx, impl->storage().sym_nbytes(), sym.nbytes)) {
    PyErr_Clear();
    Py_RETURN_NONE;
  }
  if (!learn_derived(ctx, impl, sym.derived)) {
    PyErr_Clear();
    Py_RETURN_NONE;
  }
  const int64_t version = t.is_inference() ? 0 : static_cast<int64_t>(impl->version_counter().current_version());
  PyObject* derived = PyTuple_New(static_cast<Py_ssize_t>(sym.derived.size()));
  if (derived == nullptr) return nullptr;
  for (size_t i = 0; i < sym.derived.size(); ++i) {
    PyObject* v = symval_to_py(sym.derived[i].second);
    PyObject* pair = v ? Py_BuildValue("(iN)", static_cast<int>(sym.derived[i].first), v) : nullptr;
    if (pair == nullptr) {
      Py_DECREF(derived);
      return nullptr;
    }
    PyTuple_SET_ITEM(derived, static_cast<Py_ssize_t>(i), pair);
  }
  PyObject* nb = fresh ? symval_to_py(sym.nbytes) : (Py_INCREF(Py_None), Py_None);
  if (nb == nullptr) {
    Py_DECREF(derived);
    return nullptr;
  }
  return Py_BuildValue("(NNL)", nb, derived, static_cast<long long>(version));
}

PyObject* synth_build(
    PyObject* mode,
    PyObject* dtype,
    PyObject* device,
    PyObject* sizes,
    PyObject* strides,
    PyObject* offset,
    PyObject* base,
    PyObject* recipe) {
  PyObject* env = instance_attr(mode, g_py.s_shape_env);
  if (env == nullptr || env == Py_None || !THPDtype_Check(dtype) || !THPDevice_Check(device) ||
      !PyTuple_Check(sizes) || !PyTuple_Check(strides) || !PyTuple_Check(recipe) ||
      PyTuple_GET_SIZE(recipe) != 3) {
    PyErr_SetString(PyExc_TypeError, "fastfake: bad synth_build arguments");
    return nullptr;
  }
  KeyCtx ctx{mode, {}, {}, CacheBypassArgType};
  ctx.shape_env = env;
  auto to_symint = [&](PyObject* o, c10::SymInt& out) -> bool {
    if (PyLong_CheckExact(o)) {
      out = c10::SymInt(PyLong_AsLongLong(o));
      return !PyErr_Occurred();
    }
    PyObject* node = (g_py.symint_type && Py_TYPE(o) == reinterpret_cast<PyTypeObject*>(g_py.symint_type))
        ? instance_attr(o, g_py.s_node) : nullptr;
    if (node == nullptr) {
      PyErr_SetString(PyExc_TypeError, "fastfake: expected int or SymInt");
      return false;
    }
    try {
      out = symint_from_node(node);
    } catch (const std::exception& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
      return false;
    }
    return true;
  };
  c10::SymDimVector sz(PyTuple_GET_SIZE(sizes)), st(PyTuple_GET_SIZE(strides));
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(sizes); ++i) {
    if (!to_symint(PyTuple_GET_ITEM(sizes, i), sz[i])) return nullptr;
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(strides); ++i) {
    if (!to_symint(PyTuple_GET_ITEM(strides, i), st[i])) return nullptr;
  }
  c10::SymInt off;
  if (!to_symint(offset, off)) return nullptr;
  SymShape m;
  PyObject* derived = PyTuple_GET_ITEM(recipe, 1);
  if (!PyTuple_Check(derived)) {
    PyErr_SetString(PyExc_TypeError, "fastfake: bad recipe");
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(derived); ++i) {
    PyObject* pair = PyTuple_GET_ITEM(derived, i);
    m.derived.emplace_back(static_cast<Derived>(PyLong_AsLong(PyTuple_GET_ITEM(pair, 0))), SymVal{});
    if (!symval_from_py(PyTuple_GET_ITEM(pair, 1), m.derived.back().second)) return nullptr;
  }
  m.version = PyLong_AsLongLong(PyTuple_GET_ITEM(recipe, 2));
  c10::Storage storage;
  if (base != Py_None) {
    if (!THPVariable_Check(base)) {
      PyErr_SetString(PyExc_TypeError, "fastfake: view base is not a tensor");
      return nullptr;
    }
    storage = THPVariable_Unpack(base).storage();
  } else {
    SymVal nb;
    c10::SymInt nbytes;
    const bool ok = symval_from_py(PyTuple_GET_ITEM(recipe, 0), nb) && make_symint(ctx, nb, nbytes);
    Py_CLEAR(nb.fields);
    if (!ok) return nullptr;
    storage = meta_storage(std::move(nbytes));
  }
  PyObject* out = build_symbolic(ctx, mode, std::move(storage),
                                 reinterpret_cast<THPDtype*>(dtype)->scalar_type, device, sz, st,
                                 off, m, /*conj=*/false, /*neg=*/false);
  if (out != nullptr) {
    bump(CacheSymSynthReuse);
  } else if (!PyErr_Occurred()) {
    bump(CacheSymUnrebuildable); // not symbolic once rebuilt: the caller builds it as stock
    Py_RETURN_NONE;
  }
  return out;
}

} // namespace fastfake
