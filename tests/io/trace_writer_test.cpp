// io/trace_writer: whole lines in push order from many producers, exact drop
// counts, clear open and write errors, and identical bytes from both backends.
#include <catch2/catch.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "io/file_reader.hpp"
#include "io/trace_writer.hpp"
#include "tests/support/test_paths.hpp"

using namespace calserve;

namespace {

// Line `i` of producer `p`: its identity plus a payload whose length and
// content depend on both, so a torn, merged or misplaced line shows up.
std::string make_line(int p, int i) {
    std::string line = "{\"p\":" + std::to_string(p) + ",\"i\":" + std::to_string(i) + ",\"pad\":\"";
    line.append(static_cast<std::size_t>(10 + (i * 7 + p) % 90), static_cast<char>('a' + (i + p) % 26));
    line += "\"}";
    return line;
}

std::string slurp(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

std::vector<std::string> split_lines(const std::string& text) {
    std::vector<std::string> out;
    std::size_t at = 0;
    while (at < text.size()) {
        std::size_t nl = text.find('\n', at);
        if (nl == std::string::npos) {
            out.push_back(text.substr(at) + "<no newline>");
            break;
        }
        out.push_back(text.substr(at, nl - at));
        at = nl + 1;
    }
    return out;
}

// Parses "{"p":P,"i":I,..." back; false when the line is not one make_line wrote.
bool parse_line(const std::string& line, int& p, int& i) {
    if (std::sscanf(line.c_str(), "{\"p\":%d,\"i\":%d,", &p, &i) != 2) return false;
    return p >= 0 && i >= 0 && line == make_line(p, i);
}

io::trace_writer_options options(io::write_backend backend, std::size_t batch_bytes) {
    io::trace_writer_options o;
    o.backend = backend;
    o.batch_bytes = batch_bytes;
    return o;
}

std::string_view expected_backend(io::write_backend wanted) {
    const char* env = std::getenv("CALSERVE_TRACE_WRITER");
    if (wanted == io::write_backend::automatic && env && std::string_view(env) == "pwrite") return "pwrite";
    if (wanted == io::write_backend::pwrite || !io::io_uring_available()) return "pwrite";
    return "io_uring";
}

}  // namespace

TEST_CASE("trace writer: 4 producers x 20k lines come out whole and in push order", "[trace_writer]") {
    constexpr int producers = 4, per_producer = 20000;
    for (auto backend : {io::write_backend::automatic, io::write_backend::pwrite}) {
        for (std::size_t batch : {std::size_t{4096}, std::size_t{1} << 20}) {
            INFO("backend " << io::to_string(backend) << " batch " << batch);
            auto path = test::scratch_dir("trace-writer-order") / "t.jsonl";
            auto opts = options(backend, batch);
            opts.capacity = producers * per_producer;  // no drops: every line must arrive
            auto w = io::trace_writer::open(path.string(), opts);
            REQUIRE(w.ok());
            CHECK((*w)->backend() == expected_backend(backend));
            std::vector<std::thread> threads;
            for (int p = 0; p < producers; ++p)
                threads.emplace_back([&, p] {
                    for (int i = 0; i < per_producer; ++i) (*w)->push(make_line(p, i));
                });
            for (auto& t : threads) t.join();
            REQUIRE((*w)->close().ok());
            CHECK((*w)->dropped() == 0);
            CHECK((*w)->written() == producers * per_producer);

            auto text = slurp(path);
            CHECK((*w)->bytes_written() == text.size());
            auto lines = split_lines(text);
            REQUIRE(lines.size() == producers * per_producer);
            std::vector<int> next(producers, 0);
            for (const auto& line : lines) {
                int p = -1, i = -1;
                INFO(line);
                REQUIRE(parse_line(line, p, i));
                REQUIRE(p < producers);
                REQUIRE(i == next[static_cast<std::size_t>(p)]);  // each producer's lines in its push order
                ++next[static_cast<std::size_t>(p)];
            }
        }
    }
}

TEST_CASE("trace writer: with a stalled writer and a tiny capacity the drop count is exact", "[trace_writer]") {
    constexpr int producers = 4, per_producer = 5000;
    constexpr std::size_t capacity = 4;
    for (auto backend : {io::write_backend::automatic, io::write_backend::pwrite}) {
        INFO("backend " << io::to_string(backend));
        auto path = test::scratch_dir("trace-writer-drop") / "t.jsonl";
        auto opts = options(backend, 1u << 20);
        opts.capacity = capacity;
        opts.start_paused = true;  // a writer that takes nothing: a disk that never answers
        auto w = io::trace_writer::open(path.string(), opts);
        REQUIRE(w.ok());
        // Every push returns although nothing drains the queue: were push to wait
        // for room, these threads would never finish.
        std::vector<std::thread> threads;
        for (int p = 0; p < producers; ++p)
            threads.emplace_back([&, p] {
                for (int i = 0; i < per_producer; ++i) (*w)->push(make_line(p, i));
            });
        for (auto& t : threads) t.join();
        const std::uint64_t pushed = producers * per_producer;
        CHECK((*w)->dropped() == pushed - capacity);
        CHECK((*w)->written() == 0);
        (*w)->resume();
        REQUIRE((*w)->close().ok());
        CHECK((*w)->written() == capacity);
        CHECK((*w)->written() + (*w)->dropped() == pushed);
        (*w)->push("after close");  // dropped, not written, not blocking
        CHECK((*w)->dropped() == pushed - capacity + 1);
        auto lines = split_lines(slurp(path));
        REQUIRE(lines.size() == capacity);
        for (const auto& line : lines) {
            int p = -1, i = -1;
            CHECK(parse_line(line, p, i));
        }
    }
}

TEST_CASE("trace writer: a file in a missing directory fails at open with a clear error", "[trace_writer]") {
    auto path = test::scratch_dir("trace-writer-missing") / "no-such-dir" / "t.jsonl";
    for (auto backend : {io::write_backend::automatic, io::write_backend::pwrite}) {
        auto w = io::trace_writer::open(path.string(), options(backend, 1u << 20));
        REQUIRE_FALSE(w.ok());
        CHECK(w.code() == status::io_error);
        CHECK_THAT(w.error().message, Catch::Contains(path.string()) && Catch::Contains("No such file or directory"));
    }
    CHECK_FALSE(std::filesystem::exists(path.parent_path()));
}

TEST_CASE("trace writer: io_uring and forced pwrite write identical bytes", "[trace_writer]") {
    std::string expected;
    for (int i = 0; i < 30000; ++i) expected += make_line(i % 3, i) + "\n";
    auto write_with = [&](io::write_backend backend, std::string_view want) {
        auto path = test::scratch_dir("trace-writer-same") / "t.jsonl";
        auto opts = options(backend, 8192);  // many writes, both buffers busy
        opts.capacity = 30000;
        opts.sync_on_close = true;
        auto w = io::trace_writer::open(path.string(), opts);
        REQUIRE(w.ok());
        CHECK((*w)->backend() == want);
        for (int i = 0; i < 30000; ++i) (*w)->push(make_line(i % 3, i));
        REQUIRE((*w)->close().ok());
        CHECK((*w)->bytes_written() == expected.size());
        return slurp(path);
    };
    auto by_pwrite = write_with(io::write_backend::pwrite, "pwrite");
    CHECK(by_pwrite == expected);
    if (io::io_uring_available()) {
        auto by_uring = write_with(io::write_backend::io_uring, "io_uring");
        CHECK(by_uring == by_pwrite);
    } else {
        WARN("io_uring unavailable here: only the pwrite path ran");
        auto path = test::scratch_dir("trace-writer-same") / "t.jsonl";
        CHECK_FALSE(io::trace_writer::open(path.string(), options(io::write_backend::io_uring, 8192)).ok());
    }

    // The environment switch applies when the options leave the choice open.
    auto path = test::scratch_dir("trace-writer-env") / "t.jsonl";
    ::setenv("CALSERVE_TRACE_WRITER", "pwrite", 1);
    auto forced = io::trace_writer::open(path.string());
    ::setenv("CALSERVE_TRACE_WRITER", "fast", 1);
    auto bad = io::trace_writer::open(path.string());
    ::unsetenv("CALSERVE_TRACE_WRITER");
    REQUIRE(forced.ok());
    CHECK((*forced)->backend() == "pwrite");
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.code() == status::invalid_argument);
    CHECK_THAT(bad.error().message, Catch::Contains("CALSERVE_TRACE_WRITER"));
}

namespace {
// Caps this process's file size (RLIMIT_FSIZE) so writes past it come back
// short and then fail with EFBIG; SIGXFSZ is ignored meanwhile. Restores both.
class file_size_cap {
public:
    explicit file_size_cap(rlim_t bytes) {
        ::getrlimit(RLIMIT_FSIZE, &saved_);
        old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
        rlimit cap = saved_;
        cap.rlim_cur = bytes;
        ok_ = ::setrlimit(RLIMIT_FSIZE, &cap) == 0;
    }
    ~file_size_cap() {
        ::setrlimit(RLIMIT_FSIZE, &saved_);
        std::signal(SIGXFSZ, old_handler_);
    }
    bool ok() const { return ok_; }

private:
    rlimit saved_{};
    void (*old_handler_)(int) = nullptr;
    bool ok_ = false;
};
}  // namespace

TEST_CASE("trace writer: a short write is finished, then a write error is reported by close", "[trace_writer]") {
    constexpr rlim_t cap_bytes = 100000;
    constexpr int count = 4000;  // ~300 KB
    std::string expected;
    for (int i = 0; i < count; ++i) expected += make_line(0, i) + "\n";
    REQUIRE(expected.size() > 2 * cap_bytes);
    REQUIRE(expected.size() < (1u << 20));
    REQUIRE(expected[cap_bytes - 1] != '\n');  // the cap cuts a line, so no write can end on it
    for (auto backend : {io::write_backend::automatic, io::write_backend::pwrite}) {
        // One write of everything (its remainder is what fails), then 64 KiB writes.
        for (std::size_t batch : {std::size_t{1} << 20, std::size_t{64} << 10}) {
            INFO("backend " << io::to_string(backend) << " batch " << batch);
            auto path = test::scratch_dir("trace-writer-short") / "t.jsonl";
            auto opts = options(backend, batch);
            opts.capacity = count;
            opts.start_paused = true;  // queue everything first, so the batches are predictable
            auto w = io::trace_writer::open(path.string(), opts);
            REQUIRE(w.ok());
            for (int i = 0; i < count; ++i) (*w)->push(make_line(0, i));
            void_result closed;
            {
                file_size_cap cap(cap_bytes);
                REQUIRE(cap.ok());
                closed = (*w)->close();
            }
            // The write crossing the cap came back short and only its resubmitted
            // remainder failed (EFBIG): a writer that took the short count as done
            // would report success, one that gave up would not say "File too large".
            REQUIRE_FALSE(closed.ok());
            CHECK(closed.code() == status::io_error);
            CHECK_THAT(closed.error().message, Catch::Contains(path.string()) && Catch::Contains("File too large"));
            if (batch == std::size_t{1} << 20)  // with two writes in flight either may fail first
                CHECK_THAT(closed.error().message, Catch::Contains("at byte " + std::to_string(cap_bytes)));
            CHECK((*w)->bytes_written() == cap_bytes);
            CHECK((*w)->written() + (*w)->dropped() == count);
            auto text = slurp(path);
            CHECK(text == expected.substr(0, cap_bytes));
            // Only lines wholly in the file count as written.
            CHECK((*w)->written() <= static_cast<std::uint64_t>(std::count(text.begin(), text.end(), '\n')));
        }
    }
}

TEST_CASE("trace writer: writes to a full device fail at close and count every line dropped", "[trace_writer]") {
    if (!std::filesystem::exists("/dev/full")) {
        WARN("no /dev/full here");
        return;
    }
    for (auto backend : {io::write_backend::automatic, io::write_backend::pwrite}) {
        INFO("backend " << io::to_string(backend));
        auto w = io::trace_writer::open("/dev/full", options(backend, 4096));
        REQUIRE(w.ok());
        for (int i = 0; i < 1000; ++i) (*w)->push(make_line(1, i));
        auto closed = (*w)->close();
        REQUIRE_FALSE(closed.ok());
        CHECK_THAT(closed.error().message, Catch::Contains("/dev/full") && Catch::Contains("No space left"));
        CHECK((*w)->written() == 0);
        CHECK((*w)->dropped() == 1000);
        CHECK((*w)->close().ok());  // idempotent
    }
}
