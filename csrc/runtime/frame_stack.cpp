// Python frame-stack chunks kept for reuse.
//
// CPython 3.11 and 3.12 (and 3.13 / 3.14 before gh-142183's fix) keep a thread's
// frames in a stack of 16 KiB chunks and hand a chunk back to the arena
// allocator -- munmap -- as soon as the stack drops below it, mapping a fresh one
// when it grows again. A deep call stack that goes up and down across a chunk
// boundary pays an mmap, a munmap, page faults and a TLB shootdown per crossing.
// Tracing stacks do (fastfake/runtime/frame_stack.py has the figures).
//
// The hook sits in front of the interpreter's arena allocator
// (PyObject_SetArenaAllocator): freed blocks of the chunk size, up to ``keep``
// of them, are kept and returned by the next requests of that size; everything
// else goes to the interpreter's allocator unchanged. Every block it hands out
// came from that allocator with the same size, so any block may later be freed
// through either. Kept blocks hold stale bytes: the interpreter's arena
// allocator may be malloc-based, so no caller relies on zeroed blocks.
//
// Arena calls are made with the GIL held; a mutex guards the state anyway (a
// free-threaded interpreter, a thread state cleared at shutdown).
#include "runtime/frame_stack.h"

#include "common/counts.h"

#include <array>
#include <mutex>

namespace fastfake {
namespace {

constexpr int kMaxKeep = 8;

enum Count : size_t { Reused, Kept, Released, Flushed, NumCounts };
const char* const kCountNames[NumCounts] = {"reused", "kept", "released", "flushed"};

struct State {
  std::mutex mu;
  PyObjectArenaAllocator orig{};
  bool hooked = false;
  bool probing = false;  // sizes counted only while the probe runs
  size_t chunk = 0;
  int keep = 0;
  int n = 0;
  std::array<void*, kMaxKeep> blocks{};
  std::map<size_t, uint64_t> sizes;
  uint64_t counts[NumCounts] = {};
};

State& state() {
  static State* s = new State();  // never destroyed: arena calls run until exit
  return *s;
}

void* hook_alloc(void*, size_t size) {
  State& s = state();
  PyObjectArenaAllocator orig;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (size == s.chunk && s.n > 0) {
      ++s.counts[Reused];
      return s.blocks[--s.n];
    }
    if (s.probing) ++s.sizes[size];
    orig = s.orig;
  }
  return orig.alloc(orig.ctx, size);
}

void hook_free(void*, void* ptr, size_t size) {
  State& s = state();
  PyObjectArenaAllocator orig;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (size == s.chunk && s.n < s.keep) {
      s.blocks[s.n++] = ptr;
      ++s.counts[Kept];
      return;
    }
    if (size == s.chunk && s.keep > 0) ++s.counts[Released];
    orig = s.orig;
  }
  orig.free(orig.ctx, ptr, size);
}

// Hand every kept block back to the interpreter's allocator (under s.mu).
void flush_locked(State& s) {
  while (s.n > 0) {
    void* p = s.blocks[--s.n];
    s.orig.free(s.orig.ctx, p, s.chunk);
    ++s.counts[Flushed];
  }
}

bool is_current() {
  PyObjectArenaAllocator now;
  PyObject_GetArenaAllocator(&now);
  return now.alloc == hook_alloc;
}

} // namespace

bool frame_stack_hook(bool on) {
  State& s = state();
  if (on) {
    if (!s.hooked && !is_current()) {
      {
        std::lock_guard<std::mutex> lock(s.mu);
        PyObject_GetArenaAllocator(&s.orig);
      }
      PyObjectArenaAllocator mine{nullptr, hook_alloc, hook_free};
      PyObject_SetArenaAllocator(&mine);
    }
    s.hooked = true;
    return true;
  }
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.keep = 0;
    flush_locked(s);
    s.chunk = 0;
  }
  if (s.hooked && is_current()) {
    // Blocks handed out through the hook came from this allocator: it frees them.
    PyObject_SetArenaAllocator(&s.orig);
    s.hooked = false;
  }
  // (another allocator went in front of fastfake's: it stays, passing through)
  return s.hooked;
}

void frame_stack_keep(size_t chunk, int keep) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (keep < 0) keep = 0;
  if (keep > kMaxKeep) keep = kMaxKeep;
  if (chunk != s.chunk || keep < s.n) flush_locked(s);
  s.chunk = keep > 0 ? chunk : 0;
  s.keep = keep;
}

std::tuple<bool, size_t, int, int> frame_stack_state() {
  State& s = state();
  const bool current = is_current();
  std::lock_guard<std::mutex> lock(s.mu);
  return {current, s.chunk, s.keep, s.n};
}

std::map<size_t, uint64_t> frame_stack_sizes() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.sizes;
}

void frame_stack_probe(bool on) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.sizes.clear();
  s.probing = on;
}

std::map<std::string, uint64_t> frame_stack_counts() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return counts_as_map(kCountNames, s.counts);
}

void frame_stack_set_counts(const std::map<std::string, uint64_t>& counts) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  counts_from_map(kCountNames, s.counts, counts);
}

} // namespace fastfake
