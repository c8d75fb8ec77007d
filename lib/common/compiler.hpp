// Compiler hints shared by the fast path.
#pragma once

#include <atomic>
#include <cstdint>

namespace sluice {

inline constexpr std::size_t kCacheLine = 64;

#define SLUICE_LIKELY(x) __builtin_expect(!!(x), 1)
#define SLUICE_UNLIKELY(x) __builtin_expect(!!(x), 0)

// Per-lcore counters have a single writer (the owning lcore) and readers on the control/telemetry threads.
// Relaxed atomic_ref accesses compile to plain loads and stores on x86 (no lock prefix) and keep the
// cross-thread reads well defined.
inline void counter_add(uint64_t& counter, uint64_t n = 1) {
    std::atomic_ref<uint64_t> ref(counter);
    ref.store(ref.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

inline uint64_t counter_read(const uint64_t& counter) {
    return std::atomic_ref<const uint64_t>(counter).load(std::memory_order_relaxed);
}

}  // namespace sluice
