#include <catch2/catch.hpp>

#include <arpa/inet.h>

#include <initializer_list>
#include <set>
#include <vector>

#include "nat/nat_owner.hpp"
#include "nat/nat_ports.hpp"

using namespace sluice;

namespace {

// Destinations 0, 1, ... at 10.1.0.<last> (a nat service's backends by stable id, whatever their ports).
std::vector<NatDestination> destinations(std::initializer_list<uint8_t> lasts) {
    std::vector<NatDestination> out;
    for (uint8_t last : lasts)
        out.push_back(
            {static_cast<uint32_t>(out.size()), IpAddress::from_v4(htonl(0x0a010000u | last)), IpFamily::ipv4});
    return out;
}

}  // namespace

TEST_CASE("nat ports: each destination address has its own space of the worker's ports", "[nat]") {
    NatPortPool pool(1024, 65535, 1, 3, 2);
    pool.prepare(destinations({11, 12, 11, 11}));
    CHECK(pool.capacity() == 21504);  // ports 1024..65535 with p % 3 == 1
    std::set<uint16_t> seen;
    for (std::size_t k = 0; k < pool.capacity(); ++k) {
        const uint16_t p = pool.allocate(0, 0);
        REQUIRE(p != 0);
        CHECK(nat_port_owner(p, 3) == 1);
        CHECK(seen.insert(p).second);
    }
    CHECK(pool.allocate(0, 0) == 0);  // destination 0's space is full on pool address 0
    CHECK(pool.in_use(0, 0) == pool.capacity());
    // Destinations 2 and 3 are on destination 0's address (another service's backend, or another port: the replies'
    // tuples of a fixed port and of one that keeps the client's could meet), so they share its space. Another
    // address is a space of its own.
    CHECK(pool.allocate(0, 2) == 0);
    CHECK(pool.allocate(0, 3) == 0);
    CHECK(pool.in_use(0, 3) == pool.capacity());
    CHECK(pool.allocate(0, 1) == 1024);               // 1024 % 3 == 1
    CHECK(pool.free_ports(1, 0) == pool.capacity());  // the other pool address is separate
    pool.release(0, 0, 4000);
    CHECK(pool.in_use(0, 0) == pool.capacity() - 1);
    CHECK(pool.allocate(0, 2) == 4000);
}

TEST_CASE("nat ports: a freed port waits a whole turn of the cursor before it is handed out again", "[nat]") {
    NatPortPool pool(2000, 2009, 0, 1, 1);
    pool.prepare(destinations({11}));
    for (uint16_t p = 2000; p < 2005; ++p) CHECK(pool.allocate(0, 0) == p);
    pool.release(0, 0, 2001);
    for (uint16_t p = 2005; p < 2010; ++p) CHECK(pool.allocate(0, 0) == p);  // 2001 is behind the cursor
    CHECK(pool.allocate(0, 0) == 2001);
    CHECK(pool.allocate(0, 0) == 0);
}

TEST_CASE("nat ports: the search finds the free ports of a full range across the bitmap's summary", "[nat]") {
    NatPortPool pool(1024, 65535, 0, 1, 1);
    pool.prepare(destinations({11}));
    REQUIRE(pool.capacity() == 64512);  // 1008 words of 64 ports: 16 summary words
    for (std::size_t k = 0; k < pool.capacity(); ++k) REQUIRE(pool.allocate(0, 0) == 1024 + k);
    // Freed far apart (other summary words) and out of order; the cursor is back at the start.
    for (uint16_t p : {65535, 1024 + 5000, 1024 + 64000 - 1, 1024 + 70}) pool.release(0, 0, p);
    CHECK(pool.free_ports(0, 0) == 4);
    NatPortGuess guess{0, 0};
    std::vector<uint16_t> peeked;
    for (std::size_t k = 0; k < 4; ++k) peeked.push_back(pool.peek_next(guess));
    CHECK(pool.peek_next(guess) == 0);  // fewer free than asked for
    CHECK(peeked == std::vector<uint16_t>{1024 + 70, 1024 + 5000, 1024 + 64000 - 1, 65535});
    CHECK(pool.free_ports(0, 0) == 4);  // guesses take nothing
    for (uint16_t expected : peeked) CHECK(pool.allocate(0, 0) == expected);
    CHECK(pool.allocate(0, 0) == 0);
}

TEST_CASE("nat ports: allocate takes a peeked guess while it is free, and searches when it is not", "[nat]") {
    NatPortPool pool(1024, 2047, 1, 2, 1);  // worker 1 of 2: the odd ports
    pool.prepare(destinations({11}));
    NatPortGuess guess{0, 0};
    const uint16_t first = pool.peek_next(guess), second = pool.peek_next(guess), third = pool.peek_next(guess);
    CHECK(std::vector<uint16_t>{first, second, third} == std::vector<uint16_t>{1025, 1027, 1029});
    // The first guess's packet opened nothing: the second is taken as guessed, and the first (1025, now behind the
    // cursor) waits for the cursor's next turn.
    CHECK(pool.allocate(0, 0, second) == 1027);
    CHECK(pool.allocate(0, 0, second) == 1029);  // taken already: the search from the cursor
    CHECK(pool.allocate(0, 0, third) == 1031);   // the same
    CHECK(pool.allocate(0, 0) == 1033);
    CHECK(pool.in_use(0, 0) == 4);
    pool.release(0, 0, 1027);
    CHECK(pool.allocate(0, 0, 1027) == 1027);  // free again: a guess is any free port of the space
    CHECK(pool.in_use(0, 0) == 4);
}

TEST_CASE("nat ports: a reload keeps the spaces of the destinations it keeps and of those it removes", "[nat]") {
    NatPortPool pool(1024, 2047, 0, 2, 1);
    const std::vector<NatDestination> before = destinations({11, 12});
    pool.prepare(before);
    const uint16_t kept = pool.allocate(0, 0), gone = pool.allocate(0, 1);
    // Destination 1 left the config (its id stays, unlisted); destination 2 is new.
    const std::vector<NatDestination> after = {before[0], destinations({11, 12, 13})[2]};
    pool.prepare(after);
    CHECK(pool.in_use(0, 0) == 1);
    CHECK(pool.in_use(0, 1) == 1);
    CHECK(pool.allocate(0, 0) != kept);
    CHECK(pool.allocate(0, 2) == kept);  // the new backend starts from an empty space
    pool.release(0, 1, gone);            // the removed backend's connection ended
    CHECK(pool.in_use(0, 1) == 0);
}

TEST_CASE("nat ports: a port learned from a peer is taken only when this worker owns it and it is free", "[nat]") {
    NatPortPool pool(1024, 65535, 1, 3, 2);
    pool.prepare(destinations({11}));
    CHECK(pool.take(0, 0, 1027));        // 1027 % 3 == 1: this worker's
    CHECK_FALSE(pool.take(0, 0, 1027));  // taken already
    CHECK_FALSE(pool.take(0, 0, 1028));  // another worker's
    CHECK_FALSE(pool.take(0, 0, 1021));  // below the range
    CHECK_FALSE(pool.take(2, 0, 1030));  // no such pool address
    CHECK_FALSE(pool.take(0, 1, 1030));  // no such destination (no space)
    CHECK(pool.in_use(0, 0) == 1);
    CHECK(pool.allocate(0, 0) == 1024);
    CHECK(pool.allocate(0, 0) == 1030);  // allocate passes over the taken port
    pool.release(0, 0, 1027);
    CHECK(pool.in_use(0, 0) == 2);
}

TEST_CASE("nat ports: instances that sync allocate from disjoint shares and take each other's ports", "[nat]") {
    const std::vector<NatDestination> one = destinations({11});
    // Two instances, two workers each; worker 1 of each: ports 1025, 1027, ... split between the instances.
    NatPortPool first(1024, 2047, 1, 2, 1, 0, 2), second(1024, 2047, 1, 2, 1, 1, 2), alone(1024, 2047, 1, 2, 1);
    for (NatPortPool* pool : {&first, &second, &alone}) pool->prepare(one);
    CHECK(alone.capacity() == 512);
    CHECK(first.capacity() == 256);
    CHECK(second.capacity() == 256);
    CHECK(first.in_use(0, 0) == 0);
    std::set<uint16_t> mine, theirs;
    for (std::size_t k = 0; k < 256; ++k) {
        const uint16_t a = first.allocate(0, 0), b = second.allocate(0, 0);
        REQUIRE(a != 0);
        REQUIRE(b != 0);
        CHECK(nat_port_owner(a, 2) == 1);  // the worker encoding is the same as without shares
        CHECK(nat_port_owner(b, 2) == 1);
        mine.insert(a);
        theirs.insert(b);
    }
    CHECK(first.allocate(0, 0) == 0);
    CHECK(first.in_use(0, 0) == 256);
    CHECK(mine.size() == 256);
    CHECK(theirs.size() == 256);
    for (uint16_t p : mine) CHECK(theirs.count(p) == 0);  // never the same port for the same destination

    // A connection learned from the other instance keeps its port there: taken here without being counted, and its
    // end gives nothing back to this instance's share.
    const uint16_t peer_port = *theirs.begin();
    second.release(0, 0, peer_port);
    CHECK(first.take(0, 0, peer_port));
    CHECK(first.in_use(0, 0) == 256);
    first.release(0, 0, peer_port);
    CHECK(first.in_use(0, 0) == 256);
    CHECK(first.allocate(0, 0) == 0);
    // One of its own freed: taken back by a learned connection, once.
    const uint16_t own = *mine.begin();
    first.release(0, 0, own);
    CHECK(first.take(0, 0, own));
    CHECK_FALSE(first.take(0, 0, own));
}
