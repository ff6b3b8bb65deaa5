// Whole-file reads, bounded; see read_file.hpp.
#include "config/read_file.hpp"

#include <boost/json/parse.hpp>
#include <fstream>
#include <system_error>

namespace calserve {

namespace {
constexpr std::size_t k_chunk_bytes = 64 * 1024;

error_info too_long(const std::filesystem::path& file, std::uint64_t bytes_max) {
    return make_error(status::io_error, file.string() + ": longer than " + std::to_string(bytes_max) + " bytes");
}
}  // namespace

result<std::string> read_text_file(const std::filesystem::path& file, std::uint64_t bytes_max) {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
        std::error_code ec;
        if (!std::filesystem::exists(file, ec)) return make_error(status::not_found, "cannot open " + file.string() + ": no such file");
        return make_error(status::io_error, "cannot open " + file.string());
    }
    std::error_code ec;
    if (std::filesystem::is_directory(file, ec)) return make_error(status::io_error, file.string() + " is a directory");
    std::string text;
    if (const auto size = std::filesystem::file_size(file, ec); !ec) {  // else a pipe or a /proc file: no size
        if (size > bytes_max) return too_long(file, bytes_max);
        text.reserve(static_cast<std::size_t>(size));
    }
    char chunk[k_chunk_bytes];
    while (in.read(chunk, sizeof chunk) || in.gcount() > 0) {
        const auto n = static_cast<std::size_t>(in.gcount());
        if (text.size() + n > bytes_max) return too_long(file, bytes_max);
        text.append(chunk, n);
    }
    if (in.bad()) return make_error(status::io_error, "cannot read " + file.string());
    return text;
}

result<boost::json::value> read_json_file(const std::filesystem::path& file, std::uint64_t bytes_max) {
    auto text = read_text_file(file, bytes_max);
    if (!text) return text.error();
    boost::system::error_code ec;
    boost::json::value v = boost::json::parse(*text, ec);
    if (ec) return make_error(status::parse_error, file.string() + ": not valid JSON: " + ec.message());
    return v;
}

}  // namespace calserve
