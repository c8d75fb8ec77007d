#include <catch2/catch.hpp>

#include <numeric>
#include <string>
#include <vector>

#include <rte_telemetry.h>

#include "control/telemetry.hpp"

using namespace sluice;

namespace {

// The errors as a telemetry client puts them back together.
std::vector<std::string> joined(const TelemetryTextPieces& split) {
    std::vector<std::string> out;
    std::size_t next = 0;
    for (const uint64_t count : split.counts) {
        std::string text;
        for (uint64_t i = 0; i < count; ++i) text += split.pieces.at(next++);
        out.push_back(text);
    }
    CHECK(next == split.pieces.size());
    return out;
}

}  // namespace

TEST_CASE("telemetry pieces: an error longer than a telemetry string goes out whole, in pieces that fit",
          "[telemetry]") {
    const std::string path = "/etc/sluice/sites/north-region/edge-gateway-07/sluice.yaml";
    const std::vector<std::string> errors = {
        path + ":12:31: rule 'partners-of-the-northern-region' source: 203.0.113.77/24 has host bits set; did you "
               "mean 203.0.113.0/24?",
        path + ":3:1: short", std::string(300, 'x'), ""};
    const TelemetryTextPieces split = split_for_telemetry(errors, 15 * 1024, RTE_TEL_MAX_ARRAY_ENTRIES);
    CHECK(joined(split) == errors);
    CHECK(split.counts == std::vector<uint64_t>{2, 1, 3, 1});
    for (const std::string& piece : split.pieces) CHECK(piece.size() <= RTE_TEL_MAX_STRING_LEN - 1);
}

TEST_CASE("telemetry pieces: a UTF-8 character is never split between two pieces", "[telemetry]") {
    // "é" is two bytes; placed at bytes 126-127 it would straddle the first cut.
    const std::string text = std::string(126, 'a') + "\xc3\xa9" + std::string(200, 'b') + "\xe2\x82\xac";
    const TelemetryTextPieces split = split_for_telemetry({text}, 15 * 1024, RTE_TEL_MAX_ARRAY_ENTRIES);
    CHECK(joined(split) == std::vector<std::string>{text});
    REQUIRE(split.pieces.size() == 3);
    CHECK(split.pieces[0].size() == 126);
    for (const std::string& piece : split.pieces)
        CHECK((static_cast<unsigned char>(piece.front()) & 0xc0) != 0x80);  // starts on a character
}

TEST_CASE("telemetry pieces: errors past the reply's room are counted in one last line", "[telemetry]") {
    std::vector<std::string> errors;
    for (int i = 0; i < 400; ++i)
        errors.push_back("/etc/sluice/sluice.yaml:" + std::to_string(i + 1) + ":5: " + std::string(120, 'm'));
    const TelemetryTextPieces split = split_for_telemetry(errors, 15 * 1024, RTE_TEL_MAX_ARRAY_ENTRIES);
    const std::vector<std::string> got = joined(split);
    REQUIRE(got.size() > 50);
    REQUIRE(got.size() < errors.size());
    CHECK(std::equal(got.begin(), got.end() - 1, errors.begin()));
    CHECK(got.back() == std::to_string(errors.size() - (got.size() - 1)) +
                            " more error(s) not shown here: sluice --check-config FILE prints them all");
    const std::size_t json = std::accumulate(split.pieces.begin(), split.pieces.end(), std::size_t{0},
                                             [](std::size_t n, const std::string& p) { return n + p.size() + 3; });
    CHECK(json + 4 * split.counts.size() <= 15 * 1024);

    // The array's entry limit binds too.
    const TelemetryTextPieces few = split_for_telemetry(errors, 15 * 1024, 10);
    CHECK(few.pieces.size() <= 10);
    CHECK(joined(few).back().find(" more error(s) not shown here") != std::string::npos);
}
