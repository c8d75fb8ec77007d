// A config's errors as one text, each FILE:LINE:COL first, for the config tests' checks and failure messages.
#pragma once

#include <string>

#include "config/config.hpp"

inline std::string errors_of(const sluice::ConfigResult& r) {
    std::string all;
    for (const sluice::ConfigError& e : r.errors) all += e.to_string() + "\n";
    return all;
}
