#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "lb/maglev.hpp"
#include "lb/nat_ports.hpp"

using namespace sluice;

namespace {

std::vector<MaglevBackend> backends(std::size_t n, uint32_t weight = 1) {
    std::vector<MaglevBackend> v;
    for (std::size_t i = 0; i < n; ++i) v.push_back({"10.1.0." + std::to_string(10 + i) + ":8080", weight});
    return v;
}

std::vector<std::size_t> shares(const std::vector<uint16_t>& table, std::size_t n) {
    std::vector<std::size_t> count(n, 0);
    for (uint16_t b : table) {
        REQUIRE(b < n);
        ++count[b];
    }
    return count;
}

constexpr std::size_t kGoldenChecksum = 0xb7c024657b211a3bULL;  // 5 backends, 65537 slots

}  // namespace

TEST_CASE("maglev: the table size must be prime", "[maglev]") {
    CHECK(is_prime(65537));
    CHECK(is_prime(251));
    CHECK_FALSE(is_prime(65536));
    CHECK_FALSE(is_prime(1));
    CHECK_FALSE(is_prime(9));
    CHECK(is_prime(kMaxMaglevTableSize));
}

TEST_CASE("maglev: equal weights fill the table within 1% of an equal share", "[maglev]") {
    for (std::size_t n : {2u, 3u, 7u, 10u, 100u}) {
        const auto table = build_maglev_table(backends(n), kDefaultMaglevTableSize);
        REQUIRE(table.size() == kDefaultMaglevTableSize);
        const double expected = double(kDefaultMaglevTableSize) / double(n);
        for (std::size_t c : shares(table, n)) CHECK(std::abs(double(c) - expected) <= 0.01 * expected + 1);
    }
}

TEST_CASE("maglev: weights give proportional shares within 1%", "[maglev]") {
    std::vector<MaglevBackend> v = backends(4);
    const uint32_t weights[] = {1, 2, 3, 10};
    uint32_t total = 0;
    for (std::size_t i = 0; i < 4; ++i) total += (v[i].weight = weights[i]);
    const auto count = shares(build_maglev_table(v, kDefaultMaglevTableSize), 4);
    for (std::size_t i = 0; i < 4; ++i) {
        const double expected = double(kDefaultMaglevTableSize) * weights[i] / total;
        CHECK(std::abs(double(count[i]) - expected) <= 0.01 * expected + 1);
    }
}

TEST_CASE("maglev: weight 0 takes no slot; all zero leaves the table empty", "[maglev]") {
    std::vector<MaglevBackend> v = backends(3);
    v[1].weight = 0;
    const auto count = shares(build_maglev_table(v, 251), 3);
    CHECK(count[1] == 0);
    CHECK(count[0] + count[2] == 251);
    for (auto& b : v) b.weight = 0;
    for (uint16_t slot : build_maglev_table(v, 251)) CHECK(slot == kMaglevNoBackend);
}

TEST_CASE("maglev: the table is a pure function of names, weights and size", "[maglev]") {
    // Two independent builds (as two sluice instances with one config) agree slot by slot, and the order the
    // backends are listed in does not matter for who owns a slot.
    const auto a = build_maglev_table(backends(5), kDefaultMaglevTableSize);
    const auto b = build_maglev_table(backends(5), kDefaultMaglevTableSize);
    CHECK(a == b);
    // A golden value: the permutation hash (FNV-1a + splitmix finaliser) must never change between releases, or
    // a rolling upgrade of a fleet would send established DSR flows to other backends.
    std::size_t checksum = 0;
    for (std::size_t i = 0; i < a.size(); ++i) checksum = checksum * 31 + a[i];
    CHECK(checksum == kGoldenChecksum);
}

TEST_CASE("maglev: removing one of N backends moves about 1/N of the slots", "[maglev]") {
    // The paper (section 5.3) measures somewhat more than the minimum disruption; we allow up to 1.5x of 1/N for the
    // slots that did not belong to the removed backend to move.
    for (std::size_t n : {5u, 10u, 50u}) {
        auto v = backends(n);
        const auto before = build_maglev_table(v, kDefaultMaglevTableSize);
        const std::size_t removed = n / 2;
        v.erase(v.begin() + static_cast<long>(removed));
        const auto after = build_maglev_table(v, kDefaultMaglevTableSize);
        std::size_t moved_other = 0, own = 0;
        for (std::size_t s = 0; s < before.size(); ++s) {
            if (before[s] == removed) {
                ++own;
                continue;
            }
            const std::size_t old_name = before[s];
            const std::size_t new_name = after[s] >= removed ? after[s] + 1u : after[s];
            if (old_name != new_name) ++moved_other;
        }
        const double moved_share = double(moved_other + own) / double(before.size());
        INFO("n=" << n << " moved " << moved_share);
        CHECK(moved_share >= 1.0 / double(n) * 0.99);
        CHECK(moved_share <= 1.5 / double(n));
    }
}

TEST_CASE("nat ports: a worker hands out only the ports it owns, oldest freed first", "[maglev][nat]") {
    NatPortPool pool(1024, 65535, 1, 3, 2);
    CHECK(pool.capacity() == 21504);  // ports 1024..65535 with p % 3 == 1
    std::map<uint16_t, int> seen;
    for (std::size_t k = 0; k < pool.capacity(); ++k) {
        const uint16_t p = pool.allocate(0);
        REQUIRE(p != 0);
        CHECK(nat_port_owner(p, 3) == 1);
        CHECK(++seen[p] == 1);
    }
    CHECK(pool.allocate(0) == 0);                  // exhausted
    CHECK(pool.free_ports(1) == pool.capacity());  // the other address is separate
    pool.release(0, 4000);
    pool.release(0, 4003);
    CHECK(pool.allocate(0) == 4000);
    CHECK(pool.allocate(0) == 4003);
}

TEST_CASE("nat ports: peek names the ports the next allocations hand out, and takes none", "[maglev][nat]") {
    NatPortPool pool(2000, 2009, 0, 1, 1);
    CHECK(pool.allocate(0) == 2000);
    for (int k = 0; k < 8; ++k) pool.release(0, pool.allocate(0));  // the ring's head wraps around past its end
    std::vector<uint16_t> peeked;
    for (std::size_t k = 0; k < pool.free_ports(0); ++k) peeked.push_back(pool.peek(0, k));
    CHECK(pool.peek(0, pool.free_ports(0)) == 0);  // fewer free than asked for
    CHECK(pool.free_ports(0) == 9);
    for (uint16_t expected : peeked) CHECK(pool.allocate(0) == expected);
    CHECK(peeked == std::vector<uint16_t>{2009, 2001, 2002, 2003, 2004, 2005, 2006, 2007, 2008});  // 2000 is still out
    CHECK(pool.peek(0, 0) == 0);
}
