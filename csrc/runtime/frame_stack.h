// Python frame-stack chunks kept for reuse (fastfake/runtime/frame_stack.py).
#pragma once

#include <Python.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>

namespace fastfake {

// Put fastfake's arena allocator in front of the interpreter's (on) or the
// interpreter's back where fastfake's is still the current one (off; it keeps
// nothing from then on and hands the kept blocks back). Returns whether
// fastfake's is in place afterwards. Needs the GIL.
bool frame_stack_hook(bool on);

// Keep up to ``keep`` freed blocks of exactly ``chunk`` bytes and hand them to
// the next requests of that size (keep = 0: pass everything through, and give
// the kept blocks back to the interpreter's allocator).
void frame_stack_keep(size_t chunk, int keep);

// (fastfake's allocator is the current one, chunk size, blocks it may keep,
// blocks it keeps now).
std::tuple<bool, size_t, int, int> frame_stack_state();

// Count the requests passed to the interpreter's allocator per size from now on (on), or stop; either
// way the counts start empty. frame_stack_sizes() reads them.
void frame_stack_probe(bool on);
std::map<size_t, uint64_t> frame_stack_sizes();

std::map<std::string, uint64_t> frame_stack_counts();
void frame_stack_set_counts(const std::map<std::string, uint64_t>& counts);

} // namespace fastfake
