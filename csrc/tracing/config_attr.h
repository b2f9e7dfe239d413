// Reads of torch's configuration modules in C (csrc/tracing/config_attr.cpp,
// fastfake/tracing/config_attr.py).
#pragma once

#include <Python.h>

#include <cstdint>
#include <map>
#include <string>

namespace fastfake {

// Binds what the fast path reads: the ConfigModule class, the _ConfigEntry class,
// stock's _UNSET_SENTINEL, and the functions stock's read goes through
// (ConfigModule.__getattr__, ._warn_if_deprecated, ._get_alias_val), which a
// module's class must still have for a read to be served. Needs the GIL.
void config_attr_setup(PyObject* module_type, PyObject* entry_type, PyObject* sentinel, PyObject* stock_getattr,
                       PyObject* warn, PyObject* alias_val);
// What ConfigModule.__getattribute__ becomes: a method descriptor of the
// ConfigModule class. New reference.
PyObject* config_attr_descriptor();
// Serving on / off (off: every read is module.__getattribute__'s, then stock's
// __getattr__, as without fastfake).
void config_attr_enable(bool on);
// crosscheck: check(module, name, served) after every served read (None: off).
void config_attr_set_check(PyObject* check);
std::map<std::string, uint64_t> config_attr_counts();
void config_attr_set_counts(const std::map<std::string, uint64_t>& counts);
// Testing only: the next n served reads of a bool answer its negation.
void config_attr_inject_fault(int n);

} // namespace fastfake
