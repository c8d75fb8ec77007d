// The control thread's heap across rebuilds. Control thread, once at start, before any other thread exists.
#pragma once

namespace sluice {

// Keeps the memory a config build frees (rte_acl's build, YAML, the early-drop set) in the process for the next
// one, instead of returning it to the kernel. A page the kernel hands out fresh is faulted in on first touch, and
// rte_acl's build reads its calloc'ed blocks before it writes them, so each page faults twice (the zero page,
// then a copy) and the second fault flushes the TLB of every CPU the process runs on: an IPI that interrupts the
// worker lcores. Measured (sluice_bench --only reload, 10k rules): rte_acl_build alone 690-770 -> 390-410 ms, the
// whole reload 1.44-1.49 -> 0.93-1.06 s, at the same peak RSS. The cost: the heap stays at its largest build's
// size between reloads.
void retain_freed_heap();

}  // namespace sluice
