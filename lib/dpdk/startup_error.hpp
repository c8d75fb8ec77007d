// The one exception type of start-up: thrown by a stage that cannot proceed, caught once in the daemon, which
// unwinds the stages already up and exits non-zero with the message.
#pragma once

#include <stdexcept>

namespace sluice {

struct StartupError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

}  // namespace sluice
