// The positions of a fixed-size table (an rte_hash's key positions, 0..capacity-1) in the order they were last
// touched, oldest first: an intrusive doubly linked list, so a table can expire its oldest entries a few at a time in
// O(1) (one look at the front), with no walk over empty slots. Owned by one thread; no allocation after construction.
// A position must be in the list before remove or touch, and out of it before push_back: the caller keeps the table
// and its list in step.
#pragma once

#include <cstdint>
#include <memory>

namespace sluice {

class AgeList {
public:
    static constexpr uint32_t kNone = UINT32_MAX;

    explicit AgeList(uint32_t capacity) : links_(std::make_unique<Link[]>(capacity)) {}

    bool empty() const { return head_ == kNone; }
    uint32_t front() const { return head_; }  // the least recently touched position, or kNone

    void push_back(uint32_t position) {
        links_[position] = Link{tail_, kNone};
        if (tail_ == kNone) head_ = position;
        else links_[tail_].next = position;
        tail_ = position;
    }

    void remove(uint32_t position) {
        const Link link = links_[position];
        if (link.prev == kNone) head_ = link.next;
        else links_[link.prev].next = link.next;
        if (link.next == kNone) tail_ = link.prev;
        else links_[link.next].prev = link.prev;
    }

    void touch(uint32_t position) {
        if (position == tail_) return;
        remove(position);
        push_back(position);
    }

private:
    struct Link {
        uint32_t prev;
        uint32_t next;
    };
    std::unique_ptr<Link[]> links_;
    uint32_t head_ = kNone;
    uint32_t tail_ = kNone;
};

}  // namespace sluice
