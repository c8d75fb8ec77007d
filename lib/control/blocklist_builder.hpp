// The early-drop sets' lookup tables (Blocklist: a PrefixSetTable per family) from the sets' prefixes. Control
// thread; needs the EAL.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "classify/rule.hpp"
#include "pipeline/snapshot.hpp"

namespace sluice {

// Sorts prefixes in address order (bytes in network order), the shorter first at one address, and drops the ones
// listed twice. The builders below take lists in this order.
void sort_distinct(std::vector<Prefix>& prefixes);

// Drops from a list in address order the prefixes that a shorter one in it covers: a set only says "listed", so
// they would cost table memory and change no answer.
void drop_covered(std::vector<Prefix>& sorted);

// The tables of the early-drop sets' prefixes (each list in sort_distinct's order, covered prefixes dropped here);
// previous (the running tables) is returned when it holds the same prefixes. Throws std::runtime_error when the
// DPDK heap has not the room, saying how much was needed.
std::shared_ptr<const Blocklist> build_blocklist(std::vector<Prefix> v4, std::vector<Prefix> v6, int socket,
                                                 const std::shared_ptr<const Blocklist>& previous);

}  // namespace sluice
