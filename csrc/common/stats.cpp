// Counters behind fastfake.stats(): plain integers bumped on the hot path.
#include "common/fastfake.h"

namespace fastfake {

uint64_t g_stats[kNumStats] = {};
Config g_config;
PyRefs g_py;

static const char* kStatNames[] = {
#define FASTFAKE_NAME(e, s) s,
    FASTFAKE_FOR_EACH_STAT(FASTFAKE_NAME)
#undef FASTFAKE_NAME
};

const char* stat_name(int s) {
  return kStatNames[s];
}

void reset_stats() {
  for (auto& v : g_stats) {
    v = 0;
  }
}

} // namespace fastfake
