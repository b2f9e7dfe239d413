// The name -> count maps of the extension's fixed counter sets: what stats()
// reads (and the self-test restores) through a table entry's
// "ext:<get>,<set>" (fastfake/core/accelerations.py).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

namespace fastfake {

template <size_t N>
std::map<std::string, uint64_t> counts_as_map(const char* const (&names)[N], const uint64_t (&values)[N]) {
  std::map<std::string, uint64_t> out;
  for (size_t i = 0; i < N; ++i) out[names[i]] = values[i];
  return out;
}

// Every counter of the set from `in` (0 where `in` has no entry).
template <size_t N>
void counts_from_map(const char* const (&names)[N], uint64_t (&values)[N],
                     const std::map<std::string, uint64_t>& in) {
  for (size_t i = 0; i < N; ++i) {
    auto it = in.find(names[i]);
    values[i] = it == in.end() ? 0 : it->second;
  }
}

} // namespace fastfake
