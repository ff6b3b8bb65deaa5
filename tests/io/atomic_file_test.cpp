// write_file_atomically: the old content or the new, never a mixture; no temp left.
#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

#include "io/atomic_file.hpp"
#include "tests/support/test_paths.hpp"

using namespace calserve;
namespace fs = std::filesystem;

namespace {
std::string read_all(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}
}  // namespace

TEST_CASE("atomic file: replaces the content whole and leaves no temp file", "[io]") {
    auto dir = test::scratch_dir("atomic-file") / "state";
    fs::remove_all(dir);
    const auto file = dir / "models.json";
    REQUIRE(io::write_file_atomically(file, "first\n").ok());  // creates the directory
    CHECK(read_all(file) == "first\n");
    REQUIRE(io::write_file_atomically(file, std::string(100000, 'x')).ok());
    CHECK(read_all(file) == std::string(100000, 'x'));
    int entries = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++entries;
    CHECK(entries == 1);
}

TEST_CASE("atomic file: a failure names the path and keeps the old content", "[io]") {
    auto dir = test::scratch_dir("atomic-file-fail");
    const auto file = dir / "f";
    REQUIRE(io::write_file_atomically(file, "kept").ok());
    fs::create_directories(dir / "blocker");
    auto r = io::write_file_atomically(dir / "blocker", "x");  // renaming a file over a directory fails
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == status::io_error);
    CHECK_THAT(r.error().message, Catch::Contains("blocker"));
    CHECK(read_all(file) == "kept");
    int temps = 0;
    for (const auto& e : fs::directory_iterator(dir))
        if (e.path().filename().string().find(".tmp-") != std::string::npos) ++temps;
    CHECK(temps == 0);
}
