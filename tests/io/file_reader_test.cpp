// io/file_reader: io_uring and pread read the same bytes; errors are clear.
#include <catch2/catch.hpp>

#include <cstdint>
#include <fstream>
#include <vector>

#include "io/file_reader.hpp"
#include "tests/support/test_paths.hpp"

using namespace calserve;

namespace {
// A file whose bytes are a function of their offset, so misplaced chunks show up.
std::vector<std::byte> pattern(std::size_t n) {
    std::vector<std::byte> v(n);
    std::uint64_t x = 0x9e3779b97f4a7c15ull;
    for (std::size_t i = 0; i < n; ++i) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        v[i] = static_cast<std::byte>(x >> 32);
    }
    return v;
}

std::filesystem::path write_file(const std::filesystem::path& dir, const std::vector<std::byte>& bytes) {
    auto path = dir / "data.bin";
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return path;
}
}  // namespace

TEST_CASE("io_uring and pread read identical bytes of a generated file") {
    auto dir = test::scratch_dir("io-read");
    // Not a multiple of the chunk size, so the last read is partial.
    auto bytes = pattern((3u << 20) + 12345);
    auto path = write_file(dir, bytes);
    for (auto backend : {io::read_backend::pread, io::read_backend::automatic}) {
        io::read_options opts;
        opts.backend = backend;
        opts.chunk_bytes = 256 * 1024;  // many chunks, several in flight
        opts.queue_depth = 4;
        io::read_report rep;
        auto data = io::read_file(path, opts, &rep);
        REQUIRE(data.ok());
        CHECK(*data == bytes);
        CHECK(rep.bytes == bytes.size());
        CHECK(rep.requests >= 13);
        if (backend == io::read_backend::pread) CHECK(rep.backend == io::read_backend::pread);
        if (backend == io::read_backend::automatic && io::io_uring_available())
            CHECK(rep.backend == io::read_backend::io_uring);
    }
}

TEST_CASE("read_range reads an interior slice with both backends") {
    auto dir = test::scratch_dir("io-range");
    auto bytes = pattern(1u << 20);
    auto path = write_file(dir, bytes);
    for (auto backend : {io::read_backend::pread, io::read_backend::automatic}) {
        io::read_options opts;
        opts.backend = backend;
        opts.chunk_bytes = 4096;
        std::vector<std::byte> out(100000);
        REQUIRE(io::read_range(path, 777, out, opts).ok());
        CHECK(std::equal(out.begin(), out.end(), bytes.begin() + 777));
    }
}

TEST_CASE("missing file is not_found with the path in the message") {
    auto dir = test::scratch_dir("io-missing");
    auto r = io::read_file(dir / "nope.bin");
    REQUIRE_FALSE(r.ok());
    CHECK(r.code() == status::not_found);
    CHECK(r.error().message.find("nope.bin") != std::string::npos);
}

TEST_CASE("reading past the end of a file is a short-read error") {
    auto dir = test::scratch_dir("io-short");
    auto path = write_file(dir, pattern(1000));
    for (auto backend : {io::read_backend::pread, io::read_backend::automatic}) {
        io::read_options opts;
        opts.backend = backend;
        std::vector<std::byte> out(500);
        auto r = io::read_range(path, 600, out, opts);
        REQUIRE_FALSE(r.ok());
        CHECK(r.code() == status::io_error);
        CHECK(r.error().message.find("short read") != std::string::npos);
    }
    auto empty = io::read_file(dir / ".");
    CHECK_FALSE(empty.ok());
}
