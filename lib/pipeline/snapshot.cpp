#include "pipeline/snapshot.hpp"

#include <rte_fib.h>
#include <rte_lpm6.h>

namespace sluice {

FirewallTables::~FirewallTables() {
    rte_fib_free(blocklist_v4);
    rte_lpm6_free(blocklist_v6);
}

}  // namespace sluice
