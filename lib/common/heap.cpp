#include "common/heap.hpp"

#include <malloc.h>

namespace sluice {
namespace {

// glibc's ceiling for the mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX): rte_acl's 8 MiB pool blocks come
// from the heap below it.
constexpr int kMmapThreshold = 32 << 20;
// Never trim the heap's top (the largest value mallopt takes).
constexpr int kTrimThreshold = 0x7fffffff;

}  // namespace

bool retain_freed_heap() {
    // Fixing either one also turns off glibc's own adjustment of both as blocks are freed.
    const bool mmap_set = mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1;
    const bool trim_set = mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1;
    return mmap_set && trim_set;
}

}  // namespace sluice
