// FakeTensorMode.cache_info() as stock would report it (csrc/stock/counts.cpp).
#pragma once

#include "common/fastfake.h"

namespace fastfake {

struct StockCounts {
  bool enabled = true; // off while the install-time self-test runs
  bool non_fake_call = false; // serving a call whose real tensors were converted
  uint64_t hits = 0; // not yet added to FakeTensorMode.cache_hits
  uint64_t misses = 0; // not yet added to FakeTensorMode.cache_misses
  uint64_t non_fake_bypasses = 0; // not yet added to cache_bypasses["non-fake tensor"]
  uint64_t unsafe_view_bypasses = 0; // not yet added to cache_bypasses["unsafe view"]
  uint64_t sym_scalar_bypasses = 0; // not yet added to cache_bypasses["symbolic shape"]
  uint64_t entries = 0; // entries stock's cache would hold beyond its own
};
extern StockCounts g_stock_counts;
// A result-cache hit: stock would have hit too (stock bypasses its cache for a
// call with real tensor arguments). With `unsafe_view` (an entry stock's cache
// refuses, "unsafe view"): stock bypasses its cache for the call itself and runs
// its kernel, which dispatches one op of its own that stock's cache answers.
inline void stock_count_hit(bool unsafe_view = false) {
  if (!g_stock_counts.enabled) return;
  if (g_stock_counts.non_fake_call) {
    ++g_stock_counts.non_fake_bypasses;
  } else if (unsafe_view) {
    ++g_stock_counts.unsafe_view_bypasses;
  } else {
    ++g_stock_counts.hits;
  }
  if (unsafe_view) ++g_stock_counts.hits;
}
// An elementwise result built here for the call with this hash.
void stock_count_served(uint64_t call);
// Stock ran this call itself (and now holds an entry for it).
void stock_count_seen(uint64_t call);
// Take back the counts added since `before` (stock is about to count the call
// itself, when crosscheck re-runs it).
inline void stock_counts_restore(const StockCounts& before) {
  g_stock_counts.hits = before.hits;
  g_stock_counts.misses = before.misses;
  g_stock_counts.non_fake_bypasses = before.non_fake_bypasses;
  g_stock_counts.entries = before.entries;
}
// Stock's cache was cleared.
void stock_counts_clear();
size_t stock_counts_seen_size();

} // namespace fastfake
