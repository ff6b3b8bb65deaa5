// build_directory_atomically: whole or nothing, with concurrent builders.
#include <atomic>
#include <chrono>
#include <catch2/catch.hpp>
#include <fstream>
#include <thread>
#include <vector>

#include "io/atomic_dir.hpp"
#include "tests/support/test_paths.hpp"

using namespace calserve;
namespace fs = std::filesystem;

namespace {
bool complete(const fs::path& d) { return fs::exists(d / "done"); }
// As slow as a package's check (it loads the manifest): the window where builders overlap.
bool complete_slowly(const fs::path& d) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return complete(d);
}
void_result write_files(const fs::path& d) {
    for (int i = 0; i < 20; ++i) std::ofstream(d / ("part" + std::to_string(i))) << i;
    std::ofstream(d / "done") << "ok";
    return {};
}
std::size_t leftovers(const fs::path& parent) {
    std::size_t n = 0;
    for (const auto& e : fs::directory_iterator(parent))
        if (e.path().filename().string().find(".tmp-") != std::string::npos) ++n;
    return n;
}
}  // namespace

TEST_CASE("concurrent builders publish one complete directory and leave no temporaries", "[io]") {
    auto parent = test::scratch_dir("atomic-dir-race");
    fs::remove_all(parent);
    fs::create_directories(parent);
    auto dir = parent / "model";
    std::atomic<int> failures{0}, built{0};  // built: exactly once, the others wait for it
    std::vector<std::thread> builders;
    for (int i = 0; i < 8; ++i)
        builders.emplace_back([&] {
            auto r = io::build_directory_atomically(dir, complete, [&](const fs::path& d) {
                ++built;
                return write_files(d);
            });
            if (!r) ++failures;
        });
    for (auto& t : builders) t.join();
    CHECK(failures.load() == 0);
    CHECK(built.load() == 1);
    CHECK(complete(dir));
    CHECK(fs::exists(dir / "part19"));
    CHECK(leftovers(parent) == 0);
    // Complete: the next call builds nothing.
    int again = 0;
    REQUIRE(io::build_directory_atomically(dir, complete, [&](const fs::path& d) {
                ++again;
                return write_files(d);
            }).ok());
    CHECK(again == 0);
}

TEST_CASE("a stale incomplete directory is replaced and a failed build leaves nothing", "[io]") {
    auto parent = test::scratch_dir("atomic-dir-stale");
    fs::remove_all(parent);
    fs::create_directories(parent / "model");
    std::ofstream(parent / "model" / "half-written") << "x";
    REQUIRE(io::build_directory_atomically(parent / "model", complete, write_files).ok());
    CHECK(complete(parent / "model"));
    CHECK_FALSE(fs::exists(parent / "model" / "half-written"));

    auto failed = io::build_directory_atomically(parent / "other", complete, [](const fs::path& d) -> void_result {
        std::ofstream(d / "partial") << "x";
        return make_error(status::io_error, "disk full");
    });
    CHECK(failed.code() == status::io_error);
    CHECK_FALSE(fs::exists(parent / "other"));
    CHECK(leftovers(parent) == 0);
}

TEST_CASE("concurrent builders replacing one stale directory all succeed and leave it complete", "[io]") {
    // The case of a build tree whose test package is from an older format: every test process
    // that needs it finds it incomplete at once and rebuilds it.
    auto parent = test::scratch_dir("atomic-dir-stale-race");
    for (int round = 0; round < 20; ++round) {
        fs::remove_all(parent);
        fs::create_directories(parent / "model");
        std::ofstream(parent / "model" / "old-format") << "x";
        std::vector<std::string> failures(6);
        std::vector<std::thread> builders;
        for (std::size_t i = 0; i < 6; ++i)
            builders.emplace_back([&, i] {
                if (auto r = io::build_directory_atomically(parent / "model", complete_slowly, write_files); !r)
                    failures[i] = r.error().what();
            });
        for (auto& t : builders) t.join();
        for (const auto& f : failures) CHECK(f == "");
        CHECK(complete(parent / "model"));
        CHECK_FALSE(fs::exists(parent / "model" / "old-format"));
        std::size_t others = 0;
        for (const auto& e : fs::directory_iterator(parent))
            others += e.path().filename() != "model" && e.path().filename() != "model.lock";
        CHECK(others == 0);
    }
}
