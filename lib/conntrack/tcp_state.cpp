#include "conntrack/tcp_state.hpp"

namespace sluice::tcp {
namespace {

// The table works on finer states than ConnState: syn_sent splits on a simultaneous open (nf_conntrack's
// SYN_SENT2), fin_wait and close_wait split on who sent the first FIN, so that a retransmitted FIN or the FIN
// sender's own ACK does not advance the close (nf_conntrack leaves that to its window tracking; ours, tcp_window.hpp,
// judges sequences only).
enum Internal : uint8_t {
    sSS,   // syn_sent: the initiator sent a SYN
    sS2,   // syn_sent, simultaneous open: the responder sent a SYN too
    sSR,   // syn_recv: a SYN+ACK answered the SYN
    sES,   // established
    sFWi,  // fin_wait: the initiator sent a FIN, not yet acknowledged
    sFWr,  // fin_wait: the responder sent a FIN, not yet acknowledged
    sCWi,  // close_wait: the initiator's FIN was acknowledged; the responder may still send
    sCWr,  // close_wait: the responder's FIN was acknowledged; the initiator may still send
    sLA,   // last_ack: both sides sent a FIN
    sTW,   // time_wait: the last FIN was acknowledged
    sCL,   // close: reset
    kInternalCount,
    sIV = 0xfe,  // invalid: drop, keep the state
    sIG = 0xff,  // ignore: let through, keep the state and the expiry
};

// Transitions, modelled on tcp_conntracks[2][6][TCP_CONNTRACK_MAX] of Linux net/netfilter/nf_conntrack_proto_tcp.c
// (written anew here for our states; not a copy). Differences, on purpose:
// - No sNO column: the first packet goes through ConnTable::initial_state() (a pure SYN, or an ACK with
//   loose pickup) and the entry starts in syn_sent or established.
// - A SYN from the responder after a close is invalid (Linux lets it reopen in reverse): the responder opening a
//   connection back must be judged by the rules as a new flow once this one expires, not ride on the old entry.
// - A SYN+ACK from the initiator is only valid in a simultaneous open (sS2, sSR); elsewhere it is invalid.
// - The FIN direction is tracked (sFWi/sFWr, sCWi/sCWr) as explained above.
// - FIN without ACK, no flags, SYN+FIN, SYN+RST, ... are Kind::bad: invalid in every state.
// RST closes from any state in either direction: its sequence was judged before (tcp_window.hpp).
constexpr uint8_t kTable[2][static_cast<int>(Kind::count)][kInternalCount] = {
    {
        // from the initiator
        //           sSS  sS2  sSR  sES  sFWi sFWr sCWi sCWr sLA  sTW  sCL
        /* syn    */ {sSS, sS2, sIG, sIG, sIG, sIG, sIG, sIG, sIG, sSS, sSS},
        /* synack */ {sIV, sSR, sSR, sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV},
        /* fin    */ {sIV, sIV, sFWi, sFWi, sFWi, sLA, sCWi, sLA, sLA, sTW, sCL},
        /* ack    */ {sIV, sIV, sES, sES, sFWi, sCWr, sCWi, sCWr, sTW, sTW, sCL},
        /* rst    */ {sCL, sCL, sCL, sCL, sCL, sCL, sCL, sCL, sCL, sCL, sCL},
        /* bad    */ {sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV},
    },
    {
        // from the responder
        //           sSS  sS2  sSR  sES  sFWi sFWr sCWi sCWr sLA  sTW  sCL
        /* syn    */ {sS2, sS2, sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV},
        /* synack */ {sSR, sSR, sSR, sIG, sIG, sIG, sIG, sIG, sIG, sIG, sIG},
        /* fin    */ {sIV, sIV, sFWr, sFWr, sLA, sFWr, sLA, sCWr, sLA, sTW, sCL},
        /* ack    */ {sIG, sIG, sSR, sES, sCWi, sFWr, sCWi, sCWr, sTW, sTW, sCL},
        /* rst    */ {sCL, sCL, sCL, sCL, sCL, sCL, sCL, sCL, sCL, sCL, sCL},
        /* bad    */ {sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV},
    },
};

constexpr Internal to_internal(ConnState state, uint8_t flags) {
    switch (state) {
    case ConnState::tcp_syn_sent: return (flags & kFlagSimultaneousOpen) ? sS2 : sSS;
    case ConnState::tcp_syn_recv: return sSR;
    case ConnState::tcp_established: return sES;
    case ConnState::tcp_fin_wait: return (flags & kFlagResponderFinFirst) ? sFWr : sFWi;
    case ConnState::tcp_close_wait: return (flags & kFlagResponderFinFirst) ? sCWr : sCWi;
    case ConnState::tcp_last_ack: return sLA;
    case ConnState::tcp_time_wait: return sTW;
    case ConnState::tcp_close: return sCL;
    default: return kInternalCount;  // not a TCP state
    }
}

struct External {
    ConnState state;
    uint8_t flags;
};

constexpr External kExternal[kInternalCount] = {
    {ConnState::tcp_syn_sent, 0},   {ConnState::tcp_syn_sent, kFlagSimultaneousOpen},
    {ConnState::tcp_syn_recv, 0},   {ConnState::tcp_established, 0},
    {ConnState::tcp_fin_wait, 0},   {ConnState::tcp_fin_wait, kFlagResponderFinFirst},
    {ConnState::tcp_close_wait, 0}, {ConnState::tcp_close_wait, kFlagResponderFinFirst},
    {ConnState::tcp_last_ack, 0},   {ConnState::tcp_time_wait, 0},
    {ConnState::tcp_close, 0},
};

constexpr bool round_trips() {
    for (int i = 0; i < kInternalCount; ++i)
        if (to_internal(kExternal[i].state, kExternal[i].flags) != i) return false;
    return true;
}
static_assert(round_trips(), "kExternal and to_internal() disagree");

}  // namespace

Transition step(ConnState state, uint8_t flags, bool reply, Kind kind) {
    const Internal from = to_internal(state, flags);
    if (from == kInternalCount) return {Step::invalid, state, static_cast<uint8_t>(flags & kSubStateFlags)};
    const uint8_t to = kTable[reply ? 1 : 0][static_cast<int>(kind)][from];
    if (to == sIV) return {Step::invalid, state, static_cast<uint8_t>(flags & kSubStateFlags)};
    if (to == sIG) return {Step::ignore, state, static_cast<uint8_t>(flags & kSubStateFlags)};
    return {Step::advance, kExternal[to].state, kExternal[to].flags};
}

}  // namespace sluice::tcp
