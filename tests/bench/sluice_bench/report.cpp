// The result table, printed and written as tab-separated values, and the machine and its load.
#include <sys/types.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "options.hpp"
#include "report.hpp"

namespace sluice::bench {
std::string cpu_model() {
    std::ifstream f("/proc/cpuinfo");
    for (std::string line; std::getline(f, line);)
        if (line.rfind("model name", 0) == 0) {
            const auto colon = line.find(':');
            std::string m = line.substr(colon + 2);
            for (const char* noise : {"(R)", "(TM)"})
                for (std::size_t p; (p = m.find(noise)) != std::string::npos;) m.erase(p, std::strlen(noise));
            return m;
        }
    return "unknown CPU";
}

std::string loadavg() {
    std::ifstream f("/proc/loadavg");
    std::string a, b, c;
    f >> a >> b >> c;
    return a + " " + b + " " + c;
}

std::string utc_now() {
    const std::time_t t = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&t));
    return buf;
}

CpuSample cpu_sample() {
    CpuSample s;
    std::ifstream stat("/proc/stat");
    std::string cpu;
    uint64_t v[8] = {};  // user nice system idle iowait irq softirq steal
    stat >> cpu;
    for (uint64_t& x : v) stat >> x;
    for (uint64_t x : v) s.total += x;
    s.busy = s.total - v[3] - v[4];
    std::ifstream self("/proc/self/stat");
    std::string line;
    std::getline(self, line);
    std::istringstream fields(line.substr(line.rfind(')') + 2));
    std::vector<std::string> f;
    for (std::string x; fields >> x;) f.push_back(x);
    if (f.size() > 12) s.ours = std::stoull(f[11]) + std::stoull(f[12]);  // utime, stime
    return s;
}

// Share of all CPU time that other processes used between two samples.
double others_share(const CpuSample& a, const CpuSample& b) {
    const double total = static_cast<double>(b.total - a.total);
    if (total <= 0) return 0;
    const double others = static_cast<double>(b.busy - a.busy) - static_cast<double>(b.ours - a.ours);
    return std::max(0.0, others / total);
}

Stat stat_of(std::vector<double> v) {
    Stat s;
    if (v.empty()) return s;
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    s.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    s.min = v.front();
    s.max = v.back();
    return s;
}

std::string fmt(double v) {
    char buf[32];
    if (v >= 1000) std::snprintf(buf, sizeof buf, "%.0f", v);
    else if (v >= 100) std::snprintf(buf, sizeof buf, "%.1f", v);
    else std::snprintf(buf, sizeof buf, "%.2f", v);
    return buf;
}

std::string spread(const Stat& s) { return fmt(s.min) + ".." + fmt(s.max); }

std::string ordinal_count(uint64_t n) {
    if (n >= 1'000'000 && n % 1'000'000 == 0) return std::to_string(n / 1'000'000) + "M";
    if (n >= 1000 && n % 1000 == 0) return std::to_string(n / 1000) + "k";
    return std::to_string(n);
}

void Table::print() const {
    std::printf("\n%-58s %-44s %10s %10s %7s  %s\n", "measurement", "reference", "reference", "sluice", "ratio",
                "unit");
    for (const Row& r : rows_) {
        const std::string ratio = r.has_ref && r.ref.median > 0 ? fmt(r.sluice.median / r.ref.median) : "-";
        std::printf("%-58s %-44s %10s %10s %7s  %s\n", r.measurement.c_str(), r.reference.c_str(),
                    r.has_ref ? fmt(r.ref.median).c_str() : "-", fmt(r.sluice.median).c_str(), ratio.c_str(),
                    r.unit.c_str());
    }
    std::printf("\nspread (min..max over the repetitions):\n");
    for (const Row& r : rows_)
        std::printf("  %-56s ref %-17s sluice %s\n", r.measurement.c_str(), r.has_ref ? spread(r.ref).c_str() : "-",
                    spread(r.sluice).c_str());
    for (const std::string& n : notes_) std::printf("%s\n", n.c_str());
}

void Table::write_tsv(const std::string& path, const std::vector<std::pair<std::string, std::string>>& meta) const {
    std::ofstream f(path);
    if (!f) fail("cannot write " + path);
    for (const auto& [k, v] : meta) f << "#" << k << "\t" << v << "\n";
    f << "id\tmeasurement\tunit\treference\tref_median\tref_min\tref_max\tsluice_median\tsluice_min\tsluice_max\n";
    for (const Row& r : rows_)
        f << r.id << "\t" << r.measurement << "\t" << r.unit << "\t" << r.reference << "\t"
          << (r.has_ref ? fmt(r.ref.median) : "-") << "\t" << (r.has_ref ? fmt(r.ref.min) : "-") << "\t"
          << (r.has_ref ? fmt(r.ref.max) : "-") << "\t" << fmt(r.sluice.median) << "\t" << fmt(r.sluice.min) << "\t"
          << fmt(r.sluice.max) << "\n";
}

}  // namespace sluice::bench
