#include <catch2/catch.hpp>

#include <cstring>
#include <random>

#include "packet/checksum.hpp"

using namespace sluice;

namespace {

// A random IPv4 header with a valid checksum.
std::array<uint8_t, 20> random_ipv4_header(std::mt19937& rng, bool ttl_one = false) {
    std::array<uint8_t, 20> h;
    for (auto& b : h) b = static_cast<uint8_t>(rng());
    h[0] = 0x45;
    if (ttl_one) h[8] = 1;  // decrements to 0: the word's high byte wraps
    h[10] = h[11] = 0;
    const uint16_t c = checksum_compute(h.data(), h.size());
    std::memcpy(&h[10], &c, 2);
    return h;
}

// Random bytes for iteration i, except every period-th one: all 0xff, every carry of a one's-complement sum at once.
template <std::size_t N>
void fill_for_iteration(uint8_t (&buffer)[N], std::mt19937& rng, int i, int period) {
    for (auto& b : buffer) b = static_cast<uint8_t>(rng());
    if (i % period == 0) std::memset(buffer, 0xff, N);
}

}  // namespace

TEST_CASE("checksum: a header with its checksum sums to zero", "[checksum]") {
    std::mt19937 rng(1);
    for (int i = 0; i < 1000; ++i) {
        auto h = random_ipv4_header(rng);
        REQUIRE(checksum_compute(h.data(), h.size()) == 0);
    }
}

TEST_CASE("checksum: RFC 1624 update equals a full recomputation", "[checksum]") {
    std::mt19937 rng(2);
    for (int i = 0; i < 20000; ++i) {
        auto h = random_ipv4_header(rng, i % 4 == 0);
        uint16_t old_word, new_word, checksum;
        std::memcpy(&old_word, &h[8], 2);
        std::memcpy(&checksum, &h[10], 2);
        h[8] = static_cast<uint8_t>(h[8] - 1);
        std::memcpy(&new_word, &h[8], 2);
        const uint16_t updated = checksum_update16(checksum, old_word, new_word);
        std::memcpy(&h[10], &updated, 2);
        INFO("iteration " << i);
        REQUIRE(checksum_compute(h.data(), h.size()) == 0);
    }
}

TEST_CASE("checksum: odd lengths pad with a zero byte", "[checksum]") {
    const uint8_t odd[3] = {0x12, 0x34, 0x56};
    const uint8_t even[4] = {0x12, 0x34, 0x56, 0x00};
    CHECK(checksum_compute(odd, 3) == checksum_compute(even, 4));
}

TEST_CASE("checksum: the IPv4 header sum by 32-bit words equals the 16-bit one", "[checksum]") {
    std::mt19937 rng(3);
    uint8_t header[60];
    for (int i = 0; i < 20000; ++i) {
        fill_for_iteration(header, rng, i, 3);
        if (i % 3 == 1) {  // valid, as the parser mostly sees
            header[10] = header[11] = 0;
            const uint16_t c = checksum_compute(header, 20);
            std::memcpy(&header[10], &c, 2);
        }
        const std::size_t length = 20 + 4 * (static_cast<std::size_t>(i) % 11);  // IHL 5..15
        INFO("iteration " << i << ", length " << length);
        REQUIRE(checksum_ipv4_header(header, length) == checksum_compute(header, length));
    }
    auto h = random_ipv4_header(rng);
    CHECK(checksum_ipv4_header(h.data(), h.size()) == 0);
}

TEST_CASE("checksum: updates of 4- and 16-byte fields by deltas equal a full recomputation", "[checksum]") {
    std::mt19937 rng(4);
    uint8_t buffer[40];
    for (int i = 0; i < 20000; ++i) {
        fill_for_iteration(buffer, rng, i, 5);
        if (i % 5 == 1) std::memset(buffer, 0, sizeof buffer);
        buffer[0] = buffer[1] = 0;  // the checksum's own place
        const uint16_t before = checksum_compute(buffer, sizeof buffer);
        std::memcpy(buffer, &before, 2);
        const std::size_t len = i % 2 ? 16 : 4;
        const std::size_t at = 4 + 4 * (static_cast<std::size_t>(i) % 5);
        uint8_t old_data[16], new_data[16];
        std::memcpy(old_data, buffer + at, len);
        for (std::size_t k = 0; k < len; ++k) new_data[k] = static_cast<uint8_t>(i % 7 == 0 ? 0xff : rng());
        // Two fields at once through one delta, as NAT's addresses: the second is the first field's neighbour.
        uint8_t old_next[4], new_next[4] = {0, 0, 0, static_cast<uint8_t>(i)};
        std::memcpy(old_next, buffer + at + len, 4);
        const uint64_t delta = checksum_delta(old_data, new_data, len) + checksum_delta(old_next, new_next, 4);
        std::memcpy(buffer + at, new_data, len);
        std::memcpy(buffer + at + len, new_next, 4);
        const uint16_t updated = checksum_apply_delta(before, delta);
        std::memcpy(buffer, &updated, 2);
        INFO("iteration " << i << ", length " << len);
        REQUIRE(checksum_compute(buffer, sizeof buffer) == 0);
        // The one-field form is the same arithmetic.
        CHECK(checksum_update_bytes(before, old_data, new_data, len) ==
              checksum_apply_delta(before, checksum_delta(old_data, new_data, len)));
    }
}
