// Catch2's implementation, compiled once for both test binaries (its single header takes most of a unit-test
// build's time at -O0); each binary's main calls run_catch_session.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "catch_session.hpp"

int run_catch_session(int argc, char** argv) { return Catch::Session().run(argc, argv); }
