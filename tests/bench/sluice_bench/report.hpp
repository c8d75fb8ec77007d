// What sluice_bench prints: the result table (and its tab-separated copy for firewall.sh and run-all.sh), and the
// machine and its load beside the figures.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace sluice::bench {

struct Stat {
    double median = 0, min = 0, max = 0;
};

Stat stat_of(std::vector<double> v);

// The same value as median, min and max: a target or a single measurement.
inline Stat constant_stat(double v) { return Stat{v, v, v}; }

struct Row {
    std::string id;           // stable key for firewall.sh
    std::string measurement;  // what sluice does
    std::string unit;
    std::string reference;  // what it is compared with
    Stat ref, sluice;
    bool has_ref = true;
    std::string note;  // printed under the table
};

std::string fmt(double v);

// 1000 -> "1k", 1000000 -> "1M", 1234 -> "1234".
std::string ordinal_count(uint64_t n);

class Table {
public:
    void add(Row row) { rows_.push_back(std::move(row)); }
    void note(const std::string& line) { notes_.push_back(line); }
    void print() const;
    void write_tsv(const std::string& path, const std::vector<std::pair<std::string, std::string>>& meta) const;

private:
    std::vector<Row> rows_;
    std::vector<std::string> notes_;
};

std::string cpu_model();
std::string loadavg();
std::string utc_now();

// CPU time of the whole machine and of this process, to tell how much other processes took meanwhile.
struct CpuSample {
    uint64_t busy = 0, total = 0, ours = 0;  // jiffies
};

CpuSample cpu_sample();

// Share of all CPU time that other processes used between two samples.
double others_share(const CpuSample& a, const CpuSample& b);

}  // namespace sluice::bench
