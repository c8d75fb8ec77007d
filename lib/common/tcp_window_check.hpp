// The tcp_window_check setting (config: per rule, per service, firewall default), here so that the load balancer's
// and the firewall's tables can carry it without depending on connection tracking (conntrack/tcp_window.hpp).
#pragma once

#include <cstdint>

namespace sluice {

// How strictly a connection's TCP sequence numbers are checked (config: tcp_window_check).
// strict: data and ACKs outside the window are dropped; RSTs close only at the exact sequence, other in-window RSTs
//         get a challenge ACK, out-of-window ones are dropped; a SYN on a synchronized connection gets a challenge ACK.
// liberal: windows are learned but data and ACKs are never dropped for their sequence (odd stacks, asymmetric
//          paths); RSTs and SYNs are still handled as in strict, except that a non-exact RST is always challenged.
// off: no sequence check at all (a RST with the right 4-tuple closes, as before window tracking).
enum class TcpWindowCheck : uint8_t { strict, liberal, off };

}  // namespace sluice
