// Stock's dispatch-cache statistics for the calls served here.
//
// FakeTensorMode.cache_info() reports hits, misses, bypasses and the size of
// stock's cache; tools, compile-time metrics and PyTorch's own tests read them.
// A call fastfake serves never reaches stock's counters, so they are kept here
// as stock would have counted that call and added in by the patched
// FakeTensorMode.cache_info() (fastfake/stock/cache.py):
//   * a result-cache hit is rebuilt from an entry learned from stock's own cache
//     entry, so stock would have hit: one hit;
//   * an _unsafe_view served from an entry learned from stock's uncached result
//     (stock bypasses its cache for it, "unsafe view"): one such bypass, and the
//     hit of the op its kernel dispatches;
//   * a call with a SymFloat argument served from a rerun entry (stock bypasses
//     its cache for it, "symbolic shape"): one such bypass;
//   * a call whose non-fake tensor arguments were converted (real_inputs.cpp):
//     stock bypasses its cache for it ("non-fake tensor");
//   * an elementwise result is built without consulting stock's cache; stock
//     would have hit if the same call (exact metadata of every operand) reached
//     its cache since it was last cleared, else missed and added an entry. The
//     64-bit hashes of those calls are kept (bounded) to tell the two apart.
// Calls handed to stock are counted by stock itself. Clearing stock's cache
// (FakeTensorMode.cache_clear) clears this too.
#include "common/fastfake.h"
#include "stock/counts.h"

#include <unordered_set>

namespace fastfake {

StockCounts g_stock_counts;

namespace {
std::unordered_set<uint64_t> g_seen; // calls stock's cache would hold an entry for
} // namespace

void stock_count_served(uint64_t call) {
  if (!g_stock_counts.enabled) return;
  if (g_stock_counts.non_fake_call) {
    ++g_stock_counts.non_fake_bypasses; // stock never caches such a call
    return;
  }
  if (g_seen.count(call) != 0) {
    ++g_stock_counts.hits;
    return;
  }
  ++g_stock_counts.misses;
  ++g_stock_counts.entries;
  stock_count_seen(call);
}

void stock_count_seen(uint64_t call) {
  if (!g_stock_counts.enabled || g_stock_counts.non_fake_call) return;
  if (g_seen.size() >= g_config.cache_max_entries) {
    g_seen.clear(); // bounded: later repeats of forgotten calls count as misses
  }
  g_seen.insert(call);
}

void stock_counts_clear() {
  g_seen.clear();
  g_stock_counts.hits = g_stock_counts.misses = g_stock_counts.entries = 0;
  g_stock_counts.non_fake_bypasses = 0;
  g_stock_counts.unsafe_view_bypasses = 0;
  g_stock_counts.sym_scalar_bypasses = 0;
}

size_t stock_counts_seen_size() {
  return g_seen.size();
}

} // namespace fastfake
