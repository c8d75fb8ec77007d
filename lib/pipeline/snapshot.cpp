#include "pipeline/snapshot.hpp"

#include <rte_fib.h>
#include <rte_lpm6.h>

namespace sluice {

Blocklist::~Blocklist() {
    rte_fib_free(v4);
    rte_lpm6_free(v6);
}

}  // namespace sluice
