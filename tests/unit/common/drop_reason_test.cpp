#include <catch2/catch.hpp>

#include <fstream>
#include <set>
#include <sstream>

#include "common/drop_reason.hpp"

using namespace sluice;

TEST_CASE("drop reasons: names are unique and documented", "[drop_reason]") {
    std::ifstream in(SLUICE_SOURCE_DIR "/docs/metrics.md");
    std::stringstream doc;
    doc << in.rdbuf();
    std::set<std::string_view> names;
    for (std::size_t r = 1; r < kDropReasonCount; ++r) {
        const DropReasonInfo& info = kDropReasonInfo[r];
        INFO(info.name);
        CHECK(names.insert(info.name).second);
        CHECK_FALSE(info.help.empty());
        CHECK(doc.str().find("| `" + std::string(info.name) + "` |") != std::string::npos);
    }
    CHECK(drop_reason_name(DropReason::ttl_expired) == "ttl_expired");
}
