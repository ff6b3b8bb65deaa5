// Process metrics: the /proc parsers on fixed text, and the collector against this
// test process (names present, values plausible, the counter never going down).
#include <catch2/catch.hpp>
#include <atomic>
#include <string>
#include <thread>

#include "metrics/process_metrics.hpp"

using namespace calserve::metrics;

TEST_CASE("process metrics: /proc/self/stat fields are counted after the last parenthesis") {
    struct row {
        const char* text;
        bool ok;
        std::uint64_t utime, stime;
        std::int64_t threads;
        std::uint64_t start;
    };
    const row rows[] = {
        {"42 (calserve) S 1 42 42 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 7 0 12345 1000 200", true, 250, 75, 7, 12345},
        // a command name with spaces and a ')' inside
        {"42 (a b) c) R 1 42 42 0 -1 0 0 0 0 0 1 2 0 0 20 0 3 0 99 1 1", true, 1, 2, 3, 99},
        {"42 (short) S 1 2 3", false, 0, 0, 0, 0},
        {"no parenthesis at all", false, 0, 0, 0, 0},
        {"42 (x) S 1 42 42 0 -1 0 0 0 0 0 ab 2 0 0 20 0 3 0 99", false, 0, 0, 0, 0},
    };
    for (const auto& r : rows) {
        INFO(r.text);
        auto f = parse_proc_stat(r.text);
        REQUIRE(f.has_value() == r.ok);
        if (!r.ok) continue;
        CHECK(f->utime_ticks == r.utime);
        CHECK(f->stime_ticks == r.stime);
        CHECK(f->num_threads == r.threads);
        CHECK(f->starttime_ticks == r.start);
    }
}

TEST_CASE("process metrics: statm resident pages and the boot time line") {
    CHECK(parse_statm_resident_pages("5000 1200 300 10 0 900 0\n") == 1200u);
    CHECK_FALSE(parse_statm_resident_pages("5000").has_value());
    CHECK_FALSE(parse_statm_resident_pages("5000 x").has_value());
    CHECK(parse_boot_time("cpu  1 2 3\nintr 5\nbtime 1700000000\nprocesses 9\n") == 1700000000u);
    CHECK_FALSE(parse_boot_time("cpu 1 2 3\n").has_value());
}

TEST_CASE("process metrics: the collector fills the standard names with plausible values at render") {
    registry r;
    install_process_metrics(r);
    auto s = read_process_sample();
    REQUIRE(s.resident_bytes.has_value());
    CHECK(*s.resident_bytes > 1024 * 1024);
    REQUIRE(s.open_fds.has_value());
    CHECK(*s.open_fds >= 3);  // stdin, stdout, stderr at least
    REQUIRE(s.threads.has_value());
    CHECK(*s.threads >= 1);
    REQUIRE(s.start_time_seconds.has_value());
    CHECK(*s.start_time_seconds > 1.5e9);  // after 2017: a Unix time, not ticks since boot

    // A thread that exists during one render shows in process_threads.
    const double before = *read_process_sample().threads;
    std::atomic<bool> release{false};
    std::thread extra([&] {
        while (!release) std::this_thread::yield();
    });
    const auto page = r.render();
    release = true;
    extra.join();
    auto value = [&](const std::string& name) {
        auto pos = page.find("\n" + name + " ");
        REQUIRE(pos != std::string::npos);
        return std::stod(page.substr(pos + name.size() + 2));
    };
    CHECK(value("process_resident_memory_bytes") > 1024 * 1024);
    CHECK(value("process_open_fds") >= 3);
    CHECK(value("process_threads") >= before + 1);
    CHECK(value("process_start_time_seconds") > 1.5e9);
    CHECK(page.find("# TYPE process_cpu_seconds_total counter") != std::string::npos);
    const double cpu1 = value("process_cpu_seconds_total");
    volatile double burn = 0;
    for (int i = 0; i < 20'000'000; ++i) burn = burn + i * 1e-9;
    const auto page2 = r.render();
    auto pos = page2.find("\nprocess_cpu_seconds_total ");
    REQUIRE(pos != std::string::npos);
    CHECK(std::stod(page2.substr(pos + 27)) >= cpu1);
}

TEST_CASE("process metrics: the heap gauge follows memory the program holds") {
#if defined(CALSERVE_SANITIZE)
    WARN("not checked: the sanitizer's allocator replaces malloc, mallinfo2 does not see it");
#else
    const auto before = read_process_sample().heap_bytes;
    REQUIRE(before.has_value());
    std::vector<char> held(64u << 20, 1);  // 64 MiB: an mmapped block
    const auto during = read_process_sample().heap_bytes;
    REQUIRE(during.has_value());
    CHECK(*during - *before >= double(60u << 20));
    held = {};
    held.shrink_to_fit();
    CHECK(*read_process_sample().heap_bytes < *during - double(60u << 20));
#endif
}
