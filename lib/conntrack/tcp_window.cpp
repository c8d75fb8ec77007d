#include "conntrack/tcp_window.hpp"

#include <algorithm>

namespace sluice {

const char* tcp_window_check_name(TcpWindowCheck check) {
    switch (check) {
    case TcpWindowCheck::strict: return "strict";
    case TcpWindowCheck::liberal: return "liberal";
    case TcpWindowCheck::off: return "off";
    }
    return "?";
}

void tcp_window_open_proxied(TcpWindow& w, uint32_t client_next, uint16_t client_window, uint32_t cookie_next,
                             uint16_t proxy_window) {
    const uint32_t client_win = std::max<uint32_t>(client_window, 1), proxy_win = std::max<uint32_t>(proxy_window, 1);
    // The client's ACK acknowledged the cookie's SYN; the backend's side, sluice's SYN+ACK, the client's SYN.
    w.side[0] = TcpWindowSide{client_next, client_next + proxy_win, cookie_next};
    w.side[1] = TcpWindowSide{cookie_next, cookie_next + client_win, client_next};
    set_tcp_window_maxwin(w, 0, client_win);
    set_tcp_window_maxwin(w, 1, proxy_win);
    w.scales = 0;
    for (int side = 0; side < 2; ++side)
        set_tcp_window_side_flags(w, side, kWindowSideSeen | kWindowSideSyn | kWindowSideBounded | kWindowSideAcked);
}

ChallengeAck tcp_challenge_ack(const TcpWindow& w, bool sender_is_responder) {
    const int s = sender_is_responder ? 1 : 0, r = 1 - s;
    const uint8_t scale = (w.flags[0] & w.flags[1] & kWindowSideSyn) ? tcp_window_detail::window_scale(w, r) : 0;
    const uint32_t window = std::min<uint32_t>(tcp_window_maxwin(w, r) >> scale, UINT16_MAX);
    // A receiver that never acknowledged (the backend of a one-way connection): the sender's maxend, the receiver's
    // acknowledgment plus a window of at most its maxwin, less that window is never past what it acknowledged.
    const uint32_t acknowledged = w.side[s].maxend - tcp_window_maxwin(w, r);
    const uint32_t ack = (w.flags[r] & kWindowSideAcked)                          ? w.side[r].maxack
                         : tcp_window_detail::before(acknowledged, w.side[s].end) ? acknowledged
                                                                                  : w.side[s].end;
    return {w.side[r].end, ack, static_cast<uint16_t>(std::max<uint32_t>(window, 1))};
}

}  // namespace sluice
