// Building the outputs of a cache hit as stock's hit builds them: fresh meta
// tensors, views on the current input's storage, symbolic sizes from recipes.
#include "cache/internal.h"
#include "symbolic/symnode_int.h"
#include "runtime/untrack.h"

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

// ---------------------------------------------------------------------------
// New SymNodes. A recipe's new SymNode is what stock's `_DeconstructedSymNode
// .extract(shape_env)` builds: `SymNode(expr, shape_env, pytype, hint, constant,
// fx_node)`, whose constructor runs in Python (~1 us). Where that constructor is
// one fastfake knows (set_symnode_template: it stores its arguments and a few
// constants, and reads the ShapeEnv only for a missing hint and for translation
// validation), the instance dict it builds for the same fields is the same in
// every ShapeEnv without translation validation, apart from `shape_env`. The
// first node built for a recipe value is built by the constructor and its dict
// kept (with `shape_env` None); later ones are a new SymNode instance with a copy
// of that dict and their ShapeEnv.
// ---------------------------------------------------------------------------
namespace {
PyObject* g_init_proven = nullptr; // SymNode.__init__, one fastfake knows
bool g_template_vids = true; // template nodes carry their value id memo
PyObject* g_s_shape_env = nullptr;
PyObject* g_s_init = nullptr;
PyObject* g_kind_methods[3] = {nullptr, nullptr, nullptr}; // is_int, is_float, is_bool
PyObject* g_kind_names[3] = {nullptr, nullptr, nullptr};

bool kind_names_ready() {
  if (g_kind_names[0] == nullptr) {
    g_kind_names[0] = PyUnicode_InternFromString("is_int");
    g_kind_names[1] = PyUnicode_InternFromString("is_float");
    g_kind_names[2] = PyUnicode_InternFromString("is_bool");
  }
  return g_kind_names[0] != nullptr && g_kind_names[1] != nullptr && g_kind_names[2] != nullptr;
}

// The dict to keep from a node the constructor built, or nullptr (no error set)
// when it holds a container (which copies would share) or no `shape_env`.
PyObject* template_of(PyObject* node) {
  PyObject* d = PyObject_GenericGetDict(node, nullptr);
  if (d == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  PyObject* copy = PyDict_Copy(d);
  Py_DECREF(d);
  if (copy == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  // (and none of the methods new_node looks up on the class, so that its nodes'
  // own dicts need not be searched for them)
  bool ok = PyDict_GetItemWithError(copy, g_s_shape_env) != nullptr && kind_names_ready();
  for (PyObject* name : g_kind_names) ok = ok && PyDict_GetItemWithError(copy, name) == nullptr;
  Py_ssize_t pos = 0;
  PyObject *k, *val;
  while (ok && PyDict_Next(copy, &pos, &k, &val)) {
    ok = !PyList_Check(val) && !PyDict_Check(val) && !PyAnySet_Check(val);
  }
  if (!ok || PyDict_SetItem(copy, g_s_shape_env, Py_None) < 0) {
    PyErr_Clear();
    Py_DECREF(copy);
    return nullptr;
  }
  untrack_owned_dict(copy); // (only read: from_template_dict, template_vid)
  return copy;
}

// The value id of a template's fields where the hook has interned them (the
// same objects in every copy, so the id holds for every node made from it while
// the interning dict keeps them; looked up once per generation), else -1.
long long template_vid(const SymVal& v) {
  const uint64_t gen = vid_generation();
  if (v.vid >= 0 && v.vid_gen == gen) return v.vid;
  if (g_py.sym_vids == nullptr || !PyDict_Check(g_py.sym_vids)) return -1;
  const Py_ssize_t size = PyDict_GET_SIZE(g_py.sym_vids);
  if (v.miss_size == size && v.miss_gen == gen) return -1; // (nothing interned since)
  const long long vid = interned_value_vid(v.proto);
  if (vid < 0) {
    PyErr_Clear();
    v.miss_size = size;
    v.miss_gen = gen;
    return -1; // (not interned yet: the node's first key interns it)
  }
  v.vid = vid;
  v.vid_gen = vid_generation();
  return vid;
}

// A new SymNode from a template: the attributes the constructor set, in its
// order, with this ShapeEnv, and the value id memo `fastfake.cache.learn.sym_vid`
// would set on it (`_fastfake_vid`, its last attribute) where the value is
// already interned, so the node's first key does not look it up. Set one by one
// as the constructor's `self.<name> = ...` sets them (so the node keeps its
// attributes in the object, as a node the constructor built does, without a dict
// object of its own for the cyclic collector to track). A new reference, or nullptr.
PyObject* from_template_dict(const KeyCtx& ctx, const SymVal& v) {
  PyObject* proto = v.proto;
  // (object.__new__(SymNode), as the constructor's call starts: new_node checked
  // that SymNode has no __new__ of its own)
  static PyObject* no_args = PyTuple_New(0);
  if (no_args == nullptr) return nullptr;
  auto* tp = reinterpret_cast<PyTypeObject*>(g_py.symnode_type);
  PyObject* node = tp->tp_new(tp, no_args, nullptr);
  if (node == nullptr) return nullptr;
  Py_ssize_t pos = 0;
  PyObject *k, *val;
  while (PyDict_Next(proto, &pos, &k, &val)) {
    const bool env = k == g_s_shape_env || (PyUnicode_CheckExact(k) && PyUnicode_Compare(k, g_s_shape_env) == 0);
    if (PyObject_GenericSetAttr(node, k, env ? ctx.shape_env : val) < 0) {
      Py_DECREF(node);
      return nullptr;
    }
  }
  const long long vid = g_template_vids ? template_vid(v) : -1;
  if (vid >= 0) {
    PyObject* id = PyLong_FromLongLong(vid);
    if (id == nullptr || PyObject_GenericSetAttr(node, g_py.s_fastfake_vid, id) < 0) {
      Py_XDECREF(id);
      Py_DECREF(node);
      return nullptr;
    }
    Py_DECREF(id);
  }
  return node;
}
} // namespace

// A Python SymNode whose kind (int / float / bool) is known from its pytype where
// SymNode.is_int / is_float / is_bool are the proven `return self.pytype is ...`
// (set_symnode_kinds): c10's SymInt / SymBool constructors then ask it without a
// Python call. Everything else is PythonSymNodeImpl's.
class KnownKindSymNode final : public torch::impl::PythonSymNodeImpl {
 public:
  KnownKindSymNode(py::object node, char kind) : PythonSymNodeImpl(std::move(node)), kind_(kind) {}
  bool is_int() override {
    return kind_ == 'i';
  }
  bool is_float() override {
    return kind_ == 'f';
  }
  bool is_bool() override {
    return kind_ == 'b';
  }

 private:
  char kind_;
};

namespace {

// 'i' / 'f' / 'b' for a SymNode of that pytype whose class still has the proven
// kind methods, as attribute access finds them (the type's attribute cache), and
// the instance none of its own (known for a node made from a template), else 0.
char known_kind(PyObject* node, PyObject* pytype, bool from_template) {
  if (g_kind_methods[0] == nullptr) return 0;
  for (int i = 0; i < 3; ++i) {
    if (!from_template && instance_attr(node, g_kind_names[i]) != nullptr) return 0;
    if (_PyType_Lookup(Py_TYPE(node), g_kind_names[i]) != g_kind_methods[i]) return 0;
  }
  if (pytype == reinterpret_cast<PyObject*>(&PyLong_Type)) return 'i';
  if (pytype == reinterpret_cast<PyObject*>(&PyFloat_Type)) return 'f';
  if (pytype == reinterpret_cast<PyObject*>(&PyBool_Type)) return 'b';
  return 0;
}
} // namespace

void set_symnode_kinds(PyObject* is_int, PyObject* is_float, PyObject* is_bool) {
  if (!kind_names_ready()) {
    PyErr_Clear();
    return;
  }
  PyObject* fns[3] = {is_int, is_float, is_bool};
  const bool on = is_int != Py_None && is_float != Py_None && is_bool != Py_None;
  for (int i = 0; i < 3; ++i) {
    PyObject* f = on ? fns[i] : nullptr;
    Py_XINCREF(f);
    Py_XSETREF(g_kind_methods[i], f);
  }
}

void set_symnode_template(PyObject* init) {
  if (g_s_shape_env == nullptr) {
    g_s_shape_env = PyUnicode_InternFromString("shape_env");
    g_s_init = PyUnicode_InternFromString("__init__");
  }
  PyObject* i = init == Py_None || g_s_init == nullptr ? nullptr : init;
  Py_XINCREF(i);
  Py_XSETREF(g_init_proven, i);
}

bool set_template_vids(bool on) {
  const bool was = g_template_vids;
  g_template_vids = on;
  return was;
}

PyObject* new_py_node(const KeyCtx& ctx, const SymVal& v, bool* from_template) {
  if (from_template != nullptr) *from_template = false;
  PyObject* f = v.fields;
  // (a missing hint is computed from the ShapeEnv; translation validation keeps
  // an FX node: the constructor then)
  auto* tp = reinterpret_cast<PyTypeObject*>(g_py.symnode_type);
  const bool templated = g_init_proven != nullptr && PyTuple_GET_ITEM(f, 2) != Py_None &&
      instance_attr(ctx.shape_env, g_py.s_translation_validation) == Py_False &&
      tp->tp_new == PyBaseObject_Type.tp_new &&
      _PyType_Lookup(tp, g_s_init) == g_init_proven; // (what the call would run)
  if (templated && v.proto != nullptr) {
    if (from_template != nullptr) *from_template = true;
    return from_template_dict(ctx, v);
  }
  PyObject* argv[7] = {PyTuple_GET_ITEM(f, 0), ctx.shape_env, PyTuple_GET_ITEM(f, 1),
                       PyTuple_GET_ITEM(f, 2), PyTuple_GET_ITEM(f, 3),
                       PyTuple_GET_ITEM(f, 4), PyTuple_GET_ITEM(f, 5)};
  PyObject* node = PyObject_Vectorcall(g_py.symnode_type, argv, 7, nullptr);
  if (node != nullptr && templated) v.proto = template_of(node);
  return node;
}

c10::SymNode new_node(const KeyCtx& ctx, const SymVal& v) {
  PyObject* f = v.fields;
  bool templated = false;
  PyObject* node = new_py_node(ctx, v, &templated);
  if (node == nullptr) return c10::SymNode();
  if (const char kind = known_kind(node, PyTuple_GET_ITEM(f, 1), templated)) {
    return c10::SymNode(c10::make_intrusive<KnownKindSymNode>(py::reinterpret_steal<py::object>(node), kind));
  }
  return c10::SymNode(c10::make_intrusive<torch::impl::PythonSymNodeImpl>(
      py::reinterpret_steal<py::object>(node)));
}

// The SymInt for one recorded int-like: a plain int, the current call's SymNode
// at a slot, or a new SymNode with the recorded value (as stock's
// _DeconstructedSymNode.extract builds it). Python error set on failure.
bool make_symint(const KeyCtx& ctx, const SymVal& v, c10::SymInt& out) {
  switch (v.kind) {
    case SymVal::Int:
      out = c10::SymInt(v.v);
      return true;
    case SymVal::Input:
      if (v.v < 0 || static_cast<size_t>(v.v) >= ctx.syms.size()) {
        PyErr_SetString(PyExc_RuntimeError, "fastfake cache: SymNode slot out of range");
        return false;
      }
      out = ctx.syms[static_cast<size_t>(v.v)];
      return true;
    case SymVal::New: {
      c10::SymNode node = new_node(ctx, v);
      if (!node) return false;
      try {
        out = c10::SymInt(std::move(node));
      } catch (const std::exception& e) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
        return false;
      }
      return true;
    }
  }
  return false;
}

bool make_symbool(const KeyCtx& ctx, const SymVal& v, c10::SymBool& out) {
  if (v.kind == SymVal::Int) {
    out = c10::SymBool(v.v != 0);
    return true;
  }
  if (v.kind != SymVal::New) {
    PyErr_SetString(PyExc_RuntimeError, "fastfake cache: bad SymBool recipe");
    return false;
  }
  c10::SymNode node = new_node(ctx, v);
  if (!node) return false;
  out = c10::SymBool(std::move(node));
  return true;
}

// Seed the derived quantities stock's output had computed.
bool seed_derived(const KeyCtx& ctx, c10::TensorImpl* impl, const SymShape& m) {
  if (m.derived.empty()) return true;
  c10::SymbolicShapeMeta* meta = shape_meta(impl);
  if (meta == nullptr) {
    // The recorded values rebuilt a tensor without symbolic sizes (e.g. the call's
    // SymNodes now hold constants) while stock's output had computed derived
    // values: not an output this entry proves. No error set: the caller hands the
    // call to stock (cache.symbolic.unrebuildable).
    return false;
  }
  for (const auto& [d, v] : m.derived) {
    if (d == kNumel) {
      c10::SymInt n;
      if (!make_symint(ctx, v, n)) return false;
      compat::seed_numel(meta, std::move(n));
      continue;
    }
    c10::SymBool b;
    if (!make_symbool(ctx, v, b)) return false;
    switch (d) {
      case kContiguous: meta->assume_contiguous(std::move(b)); break;
      case kChannelsLastContiguous: meta->assume_channels_last_contiguous(std::move(b)); break;
      case kChannelsLast3dContiguous: meta->assume_channels_last_3d_contiguous(std::move(b)); break;
      case kChannelsLast: meta->assume_channels_last(std::move(b)); break;
      case kChannelsLast3d: meta->assume_channels_last_3d(std::move(b)); break;
      case kNonOverlappingAndDense: meta->assume_non_overlapping_and_dense(std::move(b)); break;
      case kNumel: break;
    }
  }
  return true;
}

// ---------------------------------------------------------------------------
// Laying out symbolic sizes without c10's per-value Python calls.
//
// TensorImpl::set_sizes_and_strides stores a clone of every SymInt; for a Python
// SymNode, SymInt::clone() calls `maybe_as_int()` (an int if the node's expression
// is a number), then `clone()` (stock's returns the node itself) and wraps the
// result in a new PythonSymNodeImpl, whose SymInt constructor asks `is_int()`:
// three Python calls through pybind per value, ~1 us each, five or more values per
// output. Where `maybe_as_int` is fastfake's C function and `clone` the function
// proven to return its node (fastfake/symbolic/symnode_int.py), the same values are laid
// out here: set_sizes_and_strides with placeholders (a C++ SymNodeImpl whose
// clone and int value make no call; the same symbolic layout, numel and contiguity
// left to be computed), then each value stored as the clone would be -- the int if
// `maybe_as_int` (called once, as c10's first call: the second would find the
// node's `expr` memo) gives one, else the SymInt itself, on the same Python node.
// ---------------------------------------------------------------------------
namespace {

class Placeholder final : public c10::SymNodeImpl {
 public:
  bool is_int() override {
    return true;
  }
  bool is_bool() override {
    return false;
  }
  bool is_float() override {
    return false;
  }
  bool is_nested_int() const override {
    return false;
  }
  std::optional<int64_t> constant_int() override {
    return std::nullopt;
  }
  std::optional<int64_t> maybe_as_int() override {
    return std::nullopt;
  }
  c10::SymNode clone() override {
    return c10::SymNode::reclaim_copy(this);
  }
  std::string str() override {
    return "fastfake-placeholder";
  }
};

const c10::SymInt& placeholder() {
  static const c10::SymInt* p = new c10::SymInt(c10::SymNode(c10::make_intrusive<Placeholder>()));
  return *p;
}

PyObject* g_clone_proven = nullptr; // SymNode.clone, proven to return its node
PyObject* g_s_clone = nullptr;

// Whether `node.clone()` is the proven function (found on the class, not the instance).
bool clone_is_identity(PyObject* node) {
  if (g_clone_proven == nullptr || Py_TYPE(node) != reinterpret_cast<PyTypeObject*>(g_py.symnode_type)) {
    return false;
  }
  return class_attr(node, g_s_clone) == g_clone_proven;
}

// The value SymInt::clone() gives for `x` (1), or 0 when it must be c10's own
// clone (no error), or -1 with a Python error.
int cloned(const c10::SymInt& x, c10::SymInt& out) {
  if (!x.is_heap_allocated()) {
    out = x;
    return 1;
  }
  auto* impl = dynamic_cast<torch::impl::PythonSymNodeImpl*>(x.toSymNodeImplUnowned());
  if (impl == nullptr) return 0;
  PyObject* node = impl->getPyObj().ptr();
  if (!clone_is_identity(node)) return PyErr_Occurred() ? -1 : 0;
  PyObject* r = symnode_int_direct(node);
  if (r == nullptr) return PyErr_Occurred() ? -1 : 0;
  if (r == Py_None) {
    Py_DECREF(r);
    out = x;
    return 1;
  }
  const long long v = PyLong_AsLongLong(r);
  Py_DECREF(r);
  if (v == -1 && PyErr_Occurred()) return -1;
  out = c10::SymInt(static_cast<int64_t>(v));
  return 1;
}

} // namespace

void set_symint_clone(PyObject* clone) {
  if (g_s_clone == nullptr) g_s_clone = PyUnicode_InternFromString("clone");
  PyObject* c = clone == Py_None ? nullptr : clone;
  Py_XINCREF(c);
  Py_XSETREF(g_clone_proven, c);
}

// impl->set_sizes_and_strides(sizes, strides, offset), without the Python calls of
// c10's clones where the values can be laid out here (see above). False with a
// Python error set.
bool set_symbolic_sizes(
    c10::TensorImpl* impl,
    c10::SymIntArrayRef sizes,
    c10::SymIntArrayRef strides,
    const c10::SymInt& offset) {
  bool heap = offset.is_heap_allocated();
  for (const auto& x : sizes) heap = heap || x.is_heap_allocated();
  for (const auto& x : strides) heap = heap || x.is_heap_allocated();
  if (heap && g_clone_proven != nullptr) {
    c10::SymDimVector s(sizes.size()), t(strides.size());
    c10::SymInt o;
    int r = 1;
    for (size_t i = 0; r == 1 && i < sizes.size(); ++i) r = cloned(sizes[i], s[i]);
    for (size_t i = 0; r == 1 && i < strides.size(); ++i) r = cloned(strides[i], t[i]);
    if (r == 1) r = cloned(offset, o);
    if (r < 0) return false;
    if (r == 1) {
      const c10::SymInt& p = placeholder();
      c10::SymDimVector ps(sizes.size(), p), pt(strides.size(), p);
      impl->set_sizes_and_strides(ps, pt, p);
      c10::SymbolicShapeMeta* meta = shape_meta(impl);
      if (meta == nullptr || meta->sizes_.size() != s.size() || meta->strides_.size() != t.size()) {
        PyErr_SetString(PyExc_RuntimeError, "fastfake: symbolic sizes were not laid out");
        return false;
      }
      for (size_t i = 0; i < s.size(); ++i) meta->sizes_[i] = std::move(s[i]);
      for (size_t i = 0; i < t.size(); ++i) meta->strides_[i] = std::move(t[i]);
      meta->storage_offset_ = std::move(o);
      return true;
    }
    // (the values read so far were read as c10's clone reads them first; its
    // second reads find the nodes' `expr` memo)
  }
  impl->set_sizes_and_strides(sizes, strides, offset);
  return true;
}

// A new meta storage of `nbytes` bytes (a SymInt: symbolic sizes need no allocation).
c10::Storage meta_storage(c10::SymInt nbytes) {
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), std::move(nbytes), c10::GetAllocator(c10::kMeta),
      /*resizable=*/true));
}

// A FakeTensor with the given storage, sizes / strides / offset, the derived values
// and version of `m`, and the conj / neg bits; no SymNode arithmetic.
PyObject* build_symbolic(
    const KeyCtx& ctx,
    PyObject* mode,
    c10::Storage storage,
    at::ScalarType dtype,
    PyObject* device,
    c10::SymIntArrayRef sizes,
    c10::SymIntArrayRef strides,
    const c10::SymInt& offset,
    const SymShape& m,
    bool conj,
    bool neg,
    const c10::TensorImpl* version_of) {
  at::Tensor t;
  try {
    t = at::detail::make_tensor<c10::TensorImpl>(
        std::move(storage), c10::DispatchKeySet(c10::DispatchKey::Meta),
        c10::scalarTypeToTypeMeta(dtype));
    c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    if (!set_symbolic_sizes(impl, sizes, strides, offset)) return nullptr;
    if (!seed_derived(ctx, impl, m)) return nullptr;
    if (conj) impl->_set_conj(true);
    if (neg) impl->_set_neg(true);
    if (version_of != nullptr) {
      impl->set_version_counter(version_of->version_counter());
    } else {
      for (int64_t i = 0; i < m.version; ++i) impl->bump_version();
    }
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  return make_fake_tensor(mode, std::move(t), device);
}

// A symbolic output without replaying stock's SymNode arithmetic: storage of the
// recorded size (fresh) or the current view input's storage, the recorded sizes /
// strides / offset, and the derived values stock's output had computed.
PyObject* rebuild_symbolic(PyObject* mode, PyObject* args, const KeyCtx& ctx, const OutSpec& s) {
  const SymShape& m = *s.sym;
  c10::SymDimVector sizes(m.sizes.size()), strides(m.strides.size());
  c10::SymInt offset, nbytes;
  for (size_t i = 0; i < m.sizes.size(); ++i) {
    if (!make_symint(ctx, m.sizes[i], sizes[i])) return nullptr;
  }
  for (size_t i = 0; i < m.strides.size(); ++i) {
    if (!make_symint(ctx, m.strides[i], strides[i])) return nullptr;
  }
  if (!make_symint(ctx, m.offset, offset)) return nullptr;
  c10::Storage storage;
  const c10::TensorImpl* version_of = nullptr;
  if (s.kind == OutSpec::View) {
    if (s.idx < 0 || s.idx >= PyTuple_GET_SIZE(args) ||
        !is_fake_exact(PyTuple_GET_ITEM(args, s.idx))) {
      PyErr_SetString(PyExc_RuntimeError, "fastfake cache: view argument is not a FakeTensor");
      return nullptr;
    }
    const at::Tensor& base = THPVariable_Unpack(PyTuple_GET_ITEM(args, s.idx));
    storage = base.storage();
    if (s.share_version) version_of = base.unsafeGetTensorImpl();
  } else {
    if (!make_symint(ctx, m.nbytes, nbytes)) return nullptr;
    storage = meta_storage(std::move(nbytes));
  }
  return build_symbolic(ctx, mode, std::move(storage), s.dtype, s.device, sizes, strides, offset,
                        m, s.conj, s.neg, version_of);
}

// Mirrors FakeTensorMode._get_output_tensor_from_cache_entry.
PyObject* rebuild_one(PyObject* mode, PyObject* args, const KeyCtx& ctx, const OutSpec& s) {
  switch (s.kind) {
    case OutSpec::None:
      Py_RETURN_NONE;
    case OutSpec::Constant:
      Py_INCREF(s.constant);
      return s.constant;
    case OutSpec::Inplace: {
      if (s.idx < 0 || s.idx >= PyTuple_GET_SIZE(args)) {
        PyErr_SetString(PyExc_RuntimeError, "fastfake cache: in-place index out of range");
        return nullptr;
      }
      PyObject* a = PyTuple_GET_ITEM(args, s.idx);
      Py_INCREF(a);
      return a;
    }
    case OutSpec::Fresh:
    case OutSpec::View:
      break;
  }
  if (s.sym) {
    return rebuild_symbolic(mode, args, ctx, s);
  }
  at::Tensor empty = at::detail::empty_strided_meta(s.sizes, s.strides, s.dtype);
  if (s.conj) empty._set_conj(true);
  if (s.neg) empty._set_neg(true);
  if (s.kind == OutSpec::View) {
    if (s.idx < 0 || s.idx >= PyTuple_GET_SIZE(args) ||
        !is_fake_exact(PyTuple_GET_ITEM(args, s.idx))) {
      PyErr_SetString(PyExc_RuntimeError, "fastfake cache: view argument is not a FakeTensor");
      return nullptr;
    }
    const at::Tensor& base = THPVariable_Unpack(PyTuple_GET_ITEM(args, s.idx));
    // stock: empty.set_(view_arg.untyped_storage(), offset, shape, stride) under
    // in_kernel_invocation_manager (Python dispatch off, Meta included).
    c10::impl::ExcludeDispatchKeyGuard no_python(c10::DispatchKeySet(
        {c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot}));
    empty.set_(base.storage(), s.offset, s.sizes, s.strides);
    if (s.fresh_version) {
      empty.unsafeGetTensorImpl()->set_version_counter(c10::VariableVersion(0));
    }
  }
  return make_fake_tensor(mode, std::move(empty), s.device);
}

PyObject* rebuild(PyObject* mode, PyObject* args, const KeyCtx& ctx, const Entry& e) {
  if (!e.tuple) {
    return e.outs.empty() ? nullptr : rebuild_one(mode, args, ctx, e.outs[0]);
  }
  PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(e.outs.size()));
  if (t == nullptr) return nullptr;
  for (size_t i = 0; i < e.outs.size(); ++i) {
    PyObject* o = rebuild_one(mode, args, ctx, e.outs[i]);
    if (o == nullptr) {
      Py_DECREF(t);
      return nullptr;
    }
    PyTuple_SET_ITEM(t, static_cast<Py_ssize_t>(i), o);
  }
  return t;
}

} // namespace cache_detail
} // namespace fastfake
