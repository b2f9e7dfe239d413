// ProxyTorchDispatchMode.__torch_dispatch__ in C for the plain path
// (csrc/tracing/proxy_dispatch.cpp, fastfake/tracing/proxy_dispatch.py).
#pragma once

#include <Python.h>

#include <cstdint>
#include <map>
#include <string>

namespace fastfake {

// Binds what the fast path uses. `refs` is a dict of Python objects by name:
//   mode_type          ProxyTorchDispatchMode
//   stock              stock's __torch_dispatch__ (every call not served)
//   facts              facts(func) -> (name, schema name, overload name) | None
//   sym_proxy          sym_proxy(tracer, e): stock's fetch_sym_proxy(tracer)(e)
//   module_dict        torch.fx.experimental.proxy_tensor.__dict__
//   module_names       {name: value} of that dict the C path relies on: a served
//                      call needs each still bound to the same object
//   stats_dict         torch.utils._stats.__dict__ (simple_call_counter)
//   counter_key        stock's counter label ("ProxyTorchDispatchMode.__torch_dispatch__")
//   traceback_dict     torch.fx.traceback.__dict__
//   has_preserved      torch.fx.traceback.has_preserved_node_meta (stock's)
//   original_aten      proxy_tensor.ORIGINAL_ATEN (a ContextVar)
//   device_op          torch.ops.prim.device.default
//   handled_types      HANDLED_TYPES
//   fake_type          FakeTensor
//   proxy_type         torch.fx.Proxy
//   sym_types          (SymInt, SymFloat, SymBool)
//   op_type            OpOverload
//   target_to_str      torch.fx.Graph._target_to_str (stock's)
//   dispatch_dict      torch.utils._python_dispatch.__dict__
//   set_flag           the compile-internals flag's setter
//   cia_key            DispatchKey.CompositeImplicitAutograd
//   pre_dispatch_proxy callable: the pre-dispatch proxy mode (None where unset)
//   pyobj_dispatcher   (optional) True where OpOverload.__call__ asks the op's
//                      _pyobj_dispatcher first (2.14+)
//   layout_2_9         (optional) True for 2.9's layout: every op offered to
//                      decompose, the module's CURRENT_DECOMPOSITION_TABLE,
//                      ORIGINAL_ATEN a module global (original_aten None), no
//                      compile-internals flag (set_flag None)
// and, among module_names, "_coor_enabled" where proxy_call has the
// compile-on-one-rank device rewrite (2.14+).
// The names are checked by fastfake/tracing/proxy_dispatch.py; 0, or -1 with an
// error set. Needs the GIL.
int proxy_dispatch_setup(PyObject* refs);
// What ProxyTorchDispatchMode.__torch_dispatch__ becomes (a method descriptor).
// New reference.
PyObject* proxy_dispatch_function();
void proxy_dispatch_enable(bool on);
// crosscheck: check(mode, func, args, kwargs) before a served call (None: off).
void proxy_dispatch_set_check(PyObject* check);
// Forget every op's facts (read again on the next call).
void proxy_dispatch_clear();
std::map<std::string, uint64_t> proxy_dispatch_counts();
void proxy_dispatch_set_counts(const std::map<std::string, uint64_t>& counts);
// Testing only: the next n served calls leave their output untracked (no proxy
// slot, no node meta).
void proxy_dispatch_inject_fault(int n);
// Testing: the next n symbolic outputs tracked here leave their SymInts' slots unset.
void proxy_dispatch_inject_sym_fault(int n);

} // namespace fastfake
