// make_fx's node creation in C (csrc/tracing/fx_node.cpp, fastfake/tracing/fx_node.py).
#pragma once

#include <Python.h>

#include <cstdint>
#include <map>
#include <string>

namespace fastfake {

// Binds what the C method reads and calls, from a dict the Python side builds
// (fastfake/tracing/fx_node.py `_objects`): stock's PythonKeyTracer.create_node,
// the classes the plain path is proven for, the module dicts and the (name,
// value) pairs of them it stands for (checked per call), the loggers and the
// helpers it calls. False (and nothing served) if an entry is missing or of the
// wrong kind. Needs the GIL.
bool fx_node_setup(PyObject* objects);
// What PythonKeyTracer.create_node becomes (a method descriptor of the class).
// New reference.
PyObject* fx_node_method();
void fx_node_enable(bool on);
// crosscheck: before(tracer, kind, target, args, kwargs, name, type_expr) is
// called before every served call and answers a callable, called with the node
// made (None: off).
void fx_node_set_check(PyObject* before);
// The names kept for the candidates seen (a pure function of the candidate).
void fx_node_clear();
std::map<std::string, uint64_t> fx_node_counts();
void fx_node_set_counts(const std::map<std::string, uint64_t>& counts);
// Testing only: the next n served nodes lose their `seq_nr`.
void fx_node_inject_fault(int n);

} // namespace fastfake
