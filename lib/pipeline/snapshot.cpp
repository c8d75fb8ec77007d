#include "pipeline/snapshot.hpp"

#include <rte_lpm.h>
#include <rte_lpm6.h>

namespace sluice {

FirewallTables::~FirewallTables() {
    rte_lpm_free(blocklist_v4);
    rte_lpm6_free(blocklist_v6);
}

}  // namespace sluice
