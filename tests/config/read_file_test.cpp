// The one whole-file reader: bounded, errors naming the file, JSON parse errors
// kept apart from I/O errors (callers map them to their own statuses).
#include <catch2/catch.hpp>

#include <fstream>

#include "config/read_file.hpp"
#include "tests/support/test_paths.hpp"

using namespace calserve;

namespace {
std::filesystem::path write(const std::filesystem::path& dir, const std::string& name, const std::string& text) {
    std::ofstream(dir / name, std::ios::binary) << text;
    return dir / name;
}
}  // namespace

TEST_CASE("read_text_file: whole file, bounded, errors name the file", "[config]") {
    const auto dir = test::scratch_dir("read-file");
    const auto f = write(dir, "a.txt", std::string(1000, 'x'));
    auto all = read_text_file(f, 1000);
    REQUIRE(all.ok());
    CHECK(all->size() == 1000);

    auto big = read_text_file(f, 999);
    REQUIRE_FALSE(big.ok());
    CHECK(big.code() == status::io_error);
    CHECK_THAT(big.error().message, Catch::Contains(f.string()) && Catch::Contains("999"));

    auto missing = read_text_file(dir / "none.txt", 1000);
    CHECK(missing.code() == status::not_found);
    CHECK_THAT(missing.error().message, Catch::Contains((dir / "none.txt").string()));

    CHECK(read_text_file(dir, 1000).code() == status::io_error);  // a directory
    // A file without a size (/proc): read in chunks, still bounded.
    auto proc = read_text_file("/proc/self/status", 1 << 20);
    REQUIRE(proc.ok());
    CHECK_THAT(*proc, Catch::Contains("Name:"));
    CHECK(read_text_file("/proc/self/status", 8).code() == status::io_error);
}

TEST_CASE("read_json_file: a JSON value, or parse_error naming the file", "[config]") {
    const auto dir = test::scratch_dir("read-json");
    auto ok = read_json_file(write(dir, "ok.json", R"({"a": [1, 2]})"));
    REQUIRE(ok.ok());
    CHECK(ok->at("a").as_array().size() == 2);
    CHECK(read_json_file(write(dir, "list.json", "[1]"))->is_array());  // callers check the shape

    const auto bad = write(dir, "bad.json", "{not json");
    auto r = read_json_file(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.code() == status::parse_error);
    CHECK_THAT(r.error().message, Catch::Contains(bad.string()) && Catch::Contains("not valid JSON"));
    CHECK(read_json_file(bad, 4).code() == status::io_error);
    CHECK(read_json_file(dir / "none.json").code() == status::not_found);
}
