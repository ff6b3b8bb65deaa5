// SHA-256 of buffers and files through OpenSSL EVP.
#include "model/package/hashing.hpp"

#include <openssl/evp.h>

#include <fstream>
#include <memory>
#include <vector>

namespace calserve::model::package {

namespace {

struct md_ctx {
    std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx{EVP_MD_CTX_new(), &EVP_MD_CTX_free};
    bool ok = ctx && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1;

    void update(const void* data, std::size_t n) {
        if (ok) ok = EVP_DigestUpdate(ctx.get(), data, n) == 1;
    }
    std::string hex() {
        unsigned char out[EVP_MAX_MD_SIZE];
        unsigned int n = 0;
        if (!ok || EVP_DigestFinal_ex(ctx.get(), out, &n) != 1) return {};
        static constexpr char digits[] = "0123456789abcdef";
        std::string s;
        for (unsigned int i = 0; i < n; ++i) {
            s.push_back(digits[out[i] >> 4]);
            s.push_back(digits[out[i] & 15]);
        }
        return s;
    }
};

}  // namespace

std::string sha256_hex(std::string_view bytes) {
    md_ctx md;
    md.update(bytes.data(), bytes.size());
    return md.hex();
}

result<std::string> sha256_file(const std::filesystem::path& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) return make_error(status::io_error, "cannot open " + file.string());
    md_ctx md;
    std::vector<char> buf(1 << 20);
    while (in) {
        in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
        md.update(buf.data(), static_cast<std::size_t>(in.gcount()));
    }
    if (in.bad()) return make_error(status::io_error, "read failed: " + file.string());
    auto h = md.hex();
    if (h.empty()) return make_error(status::internal, "sha256 failed");
    return h;
}

result<std::string> sparse_digest(const std::filesystem::path& file) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(file, ec);
    if (ec) return make_error(status::io_error, "cannot stat " + file.string());
    std::ifstream in(file, std::ios::binary);
    if (!in) return make_error(status::io_error, "cannot open " + file.string());
    md_ctx md;
    std::vector<char> buf(static_cast<std::size_t>(std::min(size, k_sparse_window)));
    auto window = [&](std::uint64_t offset) {
        in.seekg(static_cast<std::streamoff>(offset));
        in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
        md.update(buf.data(), static_cast<std::size_t>(in.gcount()));
    };
    window(0);
    window(size - buf.size());
    const auto text = std::to_string(size);
    md.update(text.data(), text.size());
    if (in.bad()) return make_error(status::io_error, "read failed: " + file.string());
    return md.hex();
}

}  // namespace calserve::model::package
