// The result cache's internal types and the functions its translation units
// share (csrc/cache/); not part of the extension's interface (fastfake.h).
//
//   cache.cpp          LRU store, entry validity, try_cache()
//   cache_keys.cpp     keys: arguments, global state, SymNodes, ShapeEnv identities
//   cache_learn.cpp    reading stock's entry description into an Entry
//   cache_rebuild.cpp  building the outputs of a hit (static and symbolic)
//   cache_synth.cpp    recipes of the validation tensors stock builds on a miss
//   cache_portable.cpp symbolic entries reused in another ShapeEnv
//   item_memo.cpp      repeats of `.item()` answered from the argument's memo
#pragma once

#include "common/compat.h"
#include "common/fastfake.h"
#include "common/keys.h"
#include "cache/cache.h"
#include "stock/calls.h"
#include "stock/counts.h"

#include <c10/core/StorageImpl.h>
#include <c10/core/SymInt.h>

#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

namespace fastfake {
namespace cache_detail {

// ---------------------------------------------------------------------------
// A symbolic tensor caches derived quantities (numel, contiguity flags) in its
// c10::SymbolicShapeMeta once something asks for them. Stock's cache hit computes
// some of them while building the output (`set_` asks for is_contiguous and numel)
// inside fake dispatch, where no proxy mode traces the SymNode arithmetic; a
// tensor that computes them later (say in `.contiguous()` under make_fx) traces it
// and adds guards there. So outputs carry exactly the derived values stock's
// output carries. Reading the meta and seeding numel need c10 internals that
// differ by release: compat::shape_meta / compat::seed_numel (csrc/common/compat.h).
// ---------------------------------------------------------------------------
using compat::shape_meta;

// An int-like of a symbolic output.
struct SymVal {
  enum Kind : uint8_t { Int, Input, New } kind = Int;
  int64_t v = 0; // Int: the value; Input: the argument SymNode slot
  // New: owned tuple (expr, pytype, hint, constant, fx_node, optimized_summation)
  PyObject* fields = nullptr;
  // New: the instance dict SymNode's constructor built for these fields (with
  // `shape_env` None), once one was built (cache_rebuild.cpp's new_node); owned
  mutable PyObject* proto = nullptr;
  // New: the interned value id of `proto`'s fields, in generation `vid_gen`
  // (-1: not looked up, or not interned then)
  mutable long long vid = -1;
  mutable uint64_t vid_gen = 0;
  // New: the interning dict's size when `proto`'s value was last looked up and
  // not found there, in generation `miss_gen` (-1: none). The dict only grows
  // within a generation, so the same size means still not interned.
  mutable Py_ssize_t miss_size = -1;
  mutable uint64_t miss_gen = 0;
};

// Derived quantities cached in a SymbolicShapeMeta.
enum Derived : uint8_t {
  kNumel,
  kContiguous,
  kChannelsLastContiguous,
  kChannelsLast3dContiguous,
  kChannelsLast,
  kChannelsLast3d,
  kNonOverlappingAndDense,
};

struct SymShape {
  std::vector<SymVal> sizes, strides;
  SymVal offset, nbytes;
  int64_t version = 0; // the output's version counter
  std::vector<std::pair<Derived, SymVal>> derived; // what stock's output had computed
  ~SymShape() {
    for (auto* v : {&offset, &nbytes}) {
      Py_CLEAR(v->fields);
      Py_CLEAR(v->proto);
    }
    for (auto* vec : {&sizes, &strides}) {
      for (auto& v : *vec) {
        Py_CLEAR(v.fields);
        Py_CLEAR(v.proto);
      }
    }
    for (auto& d : derived) {
      Py_CLEAR(d.second.fields);
      Py_CLEAR(d.second.proto);
    }
  }
};

struct OutSpec {
  enum Kind : uint8_t { Inplace, None, Fresh, View, Constant } kind = None;
  // Constant: the int stock's entry holds (its constant_value; stock's hit returns an equal int)
  PyObject* constant = nullptr; // owned
  int64_t idx = -1; // in-place / view argument index
  at::ScalarType dtype = at::ScalarType::Undefined;
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
  PyObject* device = nullptr; // owned torch.device
  bool conj = false, neg = false;
  // The output has a version counter of its own (stock's uncached _unsafe_view:
  // an alias made by its kernel, not through set_, which bumps the version).
  bool fresh_version = false;
  // A view stock's kernel returned (a portable miss recipe): it shares the
  // version counter of the input it views.
  bool share_version = false;
  std::shared_ptr<SymShape> sym; // symbolic entries: how to build every int-like
};

struct Entry {
  bool negative = false;
  Stat reason = CacheBypassStock; // counted when a negative entry is hit
  // Served although stock bypasses its cache for the call ("unsafe view"): a hit
  // counts as stock's bypass, not as a stock hit.
  bool stock_bypasses = false;
  // Negative static entries of `.item()` (csrc/cache/item_memo.h's ItemMemo).
  uint8_t item_memo = 0;
  bool tuple = false;
  PyObject* func = nullptr; // owned: keeps the op id in the key valid
  std::vector<OutSpec> outs;
  // Symbolic entries: the ShapeEnv replacements this entry was checked against
  // (its version, and the replacement of every symbol the entry involves).
  long long env_version = -1;
  PyObject* validity = nullptr; // owned, opaque to C++ (fastfake.cache.learn)
  size_t bytes = 0; // what it holds (entry_bytes), set by store()

  void release() {
    Py_CLEAR(func);
    Py_CLEAR(validity);
    for (auto& o : outs) {
      Py_CLEAR(o.device);
      Py_CLEAR(o.constant);
    }
  }
};


// Key tags (numbers and strings use keys.h's).
enum : int64_t {
  kTensor = 101,
  kTuple,
  kList,
  kDict,
  kDtype,
  kDevice,
  kLayout,
  kMemFormat,
  kSymTensor,
  kSym, // a SymNode seen first here: its value id
  kSymRef, // a SymNode seen before in this key: its slot
  kSymGlobal,
  kSymScalar, // a SymFloat argument (cache_rerun.cpp): its node's value id
};

struct KeyCtx {
  PyObject* mode;
  Key key;
  std::vector<const c10::StorageImpl*> storages; // for the aliasing pattern
  Stat why = CacheBypassArgType;
  // symbolic arguments
  PyObject* shape_env = nullptr; // borrowed: the mode's
  bool symbolic = false;
  std::vector<PyObject*> nodes; // borrowed SymNodes, by first occurrence
  std::vector<uint32_t> node_pos; // where each of `nodes` put its value id in `key`
  std::vector<c10::SymInt> syms; // the same, as c10::SymInt (reused by outputs)
  // The op is one of fastfake.cache.rerun.SCALAR_OPS: a SymFloat argument enters the
  // key (stock bypasses its cache for it; only cache_rerun.cpp serves such keys).
  bool scalar_ok = false;
  int sym_scalars = 0; // SymFloat arguments in the key
};

// ---- cache.cpp ----
using Lru = std::list<std::pair<Key, Entry>>;
extern Lru& g_lru;
extern std::unordered_map<Key, Lru::iterator, KeyHash>& g_index;
void store(Key&& key, Entry&& e);
bool still_valid(const KeyCtx& ctx, Entry& e);
long long class_counter(PyObject* name);

// ---- keys.cpp (global_key: cache.h) ----
int64_t env_uid(PyObject* env);
c10::SymInt symint_from_node(PyObject* node);
bool encode(KeyCtx& ctx, PyObject* v, int depth);
// ShapeEnvSettings, its field names and its __eq__ / __hash__ where
// fastfake.common.compat.settings_fields proves those read nothing but the fields
// (nullptr: not proven); the key then holds a settings object of that class, while
// those are still its methods, as its fields' bits (-1: a field not a bool, or
// another class: its hash).
void set_settings_fields(PyObject* type, const std::vector<PyObject*>& names, PyObject* eq, PyObject* hash);
int64_t settings_bits(PyObject* settings);
bool symbolic_key(KeyCtx& ctx);
long long replacements_version(PyObject* env);
// A SymNode's interned value id (memo, else the interning dict, else
// fastfake.cache.learn.sym_vid); -1 where it has none.
long long node_vid(PyObject* node);
// The id fastfake.cache.learn.sym_vid interned for a value, given a dict holding its
// five fields (_expr, pytype, _hint, constant, fx_node: a SymNode's instance dict
// or a template); -1 where it has none yet or a field is missing (an error may
// be set). Ids hold until the interning dict is emptied, which bumps the
// generation (vids_cleared, called by the hook).
long long interned_value_vid(PyObject* dict);
void vids_cleared();
uint64_t vid_generation();
// What stock's key computation does to the ShapeEnv (reading every argument
// SymNode's `expr`); false with a Python error set if that raised.
bool touch_exprs(const KeyCtx& ctx);

// ---- cache_learn.cpp ----
bool learn_symval(const KeyCtx& ctx, const c10::SymInt& x, SymVal& out);
bool learn_derived(
    const KeyCtx& ctx,
    const c10::TensorImpl* impl,
    std::vector<std::pair<Derived, SymVal>>& out);
// The contiguity flags a symbolic tensor has memoised (numel aside), in the order
// of Derived.
std::vector<std::pair<Derived, const c10::SymBool*>> memoised_flags(const c10::SymbolicShapeMeta& m);
bool parse_entry(const KeyCtx& ctx, PyObject* desc, Entry& e);
// A bit per derived value (numel, contiguity flags) a symbolic FakeTensor argument
// has memoised, bit 31 for symbolic sizes; 0 for anything else. *ok = false when
// the values cannot be read. masks_of: one mask per element of the args tuple.
uint32_t derived_mask(const KeyCtx& ctx, PyObject* a, bool* ok);
bool masks_of(const KeyCtx& ctx, PyObject* args, std::vector<uint32_t>& out);
// What a kernel memoised on an argument tensor (`arg`: its index in the args
// tuple; only `values->derived` is used).
struct Seed {
  Py_ssize_t arg = -1;
  std::shared_ptr<SymShape> values;
};
// The derived values present now on the argument tensors whose bit was not in
// `before` (masks_of, taken before the kernel ran).
bool seeds_of(
    const KeyCtx& ctx,
    PyObject* args,
    const std::vector<uint32_t>& before,
    std::vector<Seed>& out);

// ---- entry_io.cpp ----
// A positive entry's recipe as a tuple of ints, bools and the Python objects it
// holds (the op, devices, constants, new SymNodes' fields), and back (false, no
// error left set, on anything that is not such a tuple; the caller releases `e`).
// Seeds the same way. What the store keeps (fastfake/store/symbolic.py).
PyObject* entry_to_py(const Entry& e);
bool entry_from_py(PyObject* o, Entry& e);
PyObject* seeds_to_py(const std::vector<Seed>& seeds);
bool seeds_from_py(PyObject* o, std::vector<Seed>& out);

// ---- cache_rebuild.cpp ----
// SymNode.clone proven to return its node (fastfake/symbolic/symnode_int.py), or None:
// symbolic sizes are then laid out with c10's own clones.
void set_symint_clone(PyObject* clone);
// SymNode.__init__ where it is one proven to build the same instance dict for the
// same fields in every ShapeEnv without translation validation, apart from
// `shape_env` (fastfake/common/compat.py's SYMNODE_INIT_SOURCES), else None: while it
// is SymNode's constructor, a recipe's new SymNodes are copies of the first
// one's dict.
void set_symnode_template(PyObject* init);
// Whether a template's new SymNodes carry the value id memo where the value is
// interned (default on); returns the previous setting.
bool set_template_vids(bool on);
// SymNode.is_int / is_float / is_bool where each is the proven `return
// self.pytype is <type>` (fastfake/core/install.py), else None: a recipe's new
// SymNodes then answer c10's kind questions without a Python call.
void set_symnode_kinds(PyObject* is_int, PyObject* is_float, PyObject* is_bool);
// impl->set_sizes_and_strides(sizes, strides, offset), laid out without c10's
// per-value Python calls where it may be; false with a Python error set.
bool set_symbolic_sizes(
    c10::TensorImpl* impl,
    c10::SymIntArrayRef sizes,
    c10::SymIntArrayRef strides,
    const c10::SymInt& offset);
// Memoise the recorded derived values on a symbolic tensor (as stock's kernel
// computed them); false (no error set) if the tensor has no symbolic sizes.
bool seed_derived(const KeyCtx& ctx, c10::TensorImpl* impl, const SymShape& m);
bool make_symint(const KeyCtx& ctx, const SymVal& v, c10::SymInt& out);
// The Python SymNode `SymNode(*fields[:1], shape_env, *fields[1:])` builds for a
// SymVal::New in this ShapeEnv (from the template where proven), or nullptr with
// an error set.
PyObject* new_py_node(const KeyCtx& ctx, const SymVal& v, bool* from_template = nullptr);
c10::Storage meta_storage(c10::SymInt nbytes);
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
    const c10::TensorImpl* version_of = nullptr);
PyObject* rebuild(PyObject* mode, PyObject* args, const KeyCtx& ctx, const Entry& e);

// ---- cache_portable.cpp ----
// Before stock runs a symbolic miss: fastfake.cache.portable's snapshot of the ShapeEnv
// (new reference), or nullptr when nothing will be recorded.
PyObject* portable_before(PyObject* mode, PyObject* args, PyObject* kwargs, const KeyCtx& ctx);
// After stock missed and `e` was learned: record it for other ShapeEnvs if it may.
void portable_learn(
    PyObject* mode,
    PyObject* func,
    PyObject* args,
    PyObject* kwargs,
    PyObject* out,
    PyObject* before,
    const KeyCtx& ctx,
    const Entry& e);
// A symbolic miss: the outputs stock's miss would return in this ShapeEnv, from an
// entry recorded in another one (new reference), or nullptr (no error set).
PyObject* portable_serve(
    PyObject* mode,
    PyObject* func,
    PyObject* args,
    PyObject* kwargs,
    const KeyCtx& ctx);

} // namespace cache_detail
} // namespace fastfake
