#pragma once

// Runs the Catch2 tests linked into the binary with its command line; returns the process exit code.
int run_catch_session(int argc, char** argv);
