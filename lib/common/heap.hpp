// How the process's heap treats what a config build frees. Once at start, before any other thread exists.
#pragma once

namespace sluice {

// Keeps the memory a config build frees (rte_acl's build, YAML, the early-drop set) in the process for the next
// one, instead of returning it to the kernel. A page the kernel hands out fresh is faulted in on first touch, and
// rte_acl's build reads its calloc'ed blocks before it writes them, so each page faults twice (the zero page, then
// a copy) and the second fault flushes the TLB of every CPU the process runs on: an IPI that interrupts the worker
// lcores. The settings are the process's (mallopt), but they matter for the main arena, the control thread's:
// builds run there (docs/benchmarks.md has the reload's figures with and without it). The cost: the heap stays at
// its largest build's size between reloads. False when glibc refused a setting.
bool retain_freed_heap();

}  // namespace sluice
