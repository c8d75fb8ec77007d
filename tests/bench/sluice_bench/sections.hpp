// The sections of sluice_bench (--only), one file each: each measures, adds its rows to the table and checks that
// the pool is full again.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "classbench.hpp"
#include "harness.hpp"
#include "options.hpp"
#include "report.hpp"

namespace sluice::bench {

using Meta = std::vector<std::pair<std::string, std::string>>;  // the result file's "#key value" lines

void section_parse(Dpdk& d, const Options& o, Table& table);
void section_classify(Dpdk& d, const Options& o, Table& table, const AclFiles& files, Meta& meta);
void section_established(Dpdk& d, const Options& o, Table& table);
void section_new(Dpdk& d, const Options& o, Table& table);
void section_lb(Dpdk& d, const Options& o, Table& table);
void section_memory(Dpdk& d, const Options& o, Table& table);
void section_reload(Dpdk& d, const Options& o, Table& table);
void section_scaling(Dpdk& d, const Options& o, Table& table);
void section_walk(Dpdk& d, const Options& o, Table& table);
void section_blocklist(Dpdk& d, const Options& o, Table& table);
void section_routes(Dpdk& d, const Options& o, Table& table);
void section_capacity(Dpdk& d, const Options& o, Table& table);

}  // namespace sluice::bench
