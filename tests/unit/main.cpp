// Main of the unit tests that need no EAL.
#include "catch_session.hpp"

int main(int argc, char** argv) { return run_catch_session(argc, argv); }
