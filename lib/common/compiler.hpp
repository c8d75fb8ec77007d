// Compiler hints shared by the fast path.
#pragma once

#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>

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

// Writes the bytes of value (a small struct of fields, 4 or 8 bytes) at dst with one store. A load of that word
// right after can take it from the store buffer; a load that several narrower stores must make up cannot, and waits
// until they retire (it showed as the hot spot of whichever function read the word). Byte order does not matter:
// the bytes land as value lays them out. Give T scalar members only: with an array member GCC 12 builds the word in
// memory and reloads it, which is the very stall this avoids.
template <class T>
inline void store_as_one_word(void* dst, const T& value) {
    static_assert(std::is_trivially_copyable_v<T> && (sizeof(T) == 4 || sizeof(T) == 8));
    using Word = std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>;
    const Word word = std::bit_cast<Word>(value);
    std::memcpy(dst, &word, sizeof word);
}

}  // namespace sluice
