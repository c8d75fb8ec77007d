#pragma once

#include <unistd.h>

#include <utility>

namespace sluice {

// Owner of a file descriptor (a socket, an eventfd, a BPF object): closes it when it goes. Move-only; -1 is none.
// Control plane only (close is a syscall).
class UniqueFd {
public:
    UniqueFd() = default;
    explicit UniqueFd(int fd) noexcept : fd_(fd) {}
    ~UniqueFd() { reset(); }
    UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
    UniqueFd& operator=(UniqueFd&& other) noexcept {
        if (this != &other) reset(other.release());
        return *this;
    }
    UniqueFd(const UniqueFd&) = delete;
    UniqueFd& operator=(const UniqueFd&) = delete;

    int get() const noexcept { return fd_; }
    bool valid() const noexcept { return fd_ >= 0; }
    // Gives the descriptor up without closing it.
    int release() noexcept { return std::exchange(fd_, -1); }
    // Closes the one held (if any) and holds fd instead.
    void reset(int fd = -1) noexcept {
        if (fd_ >= 0) ::close(fd_);
        fd_ = fd;
    }
    // Closes now, for a caller that must know: close reports a delayed write error (NFS, quota) of a file.
    bool close() noexcept { return fd_ < 0 || ::close(release()) == 0; }

private:
    int fd_ = -1;
};

}  // namespace sluice
