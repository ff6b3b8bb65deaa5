// safetensors header validation, loading through io/, and writing; see safetensors.hpp.
#include "model/weights/safetensors.hpp"

#include <boost/json.hpp>
#include <fstream>
#include <limits>

namespace calserve::model {
namespace {
namespace json = boost::json;

constexpr std::uint64_t k_max_header_bytes = 100u << 20;  // the reference implementation's bound

error_info bad(std::string_view label, const std::string& msg) {
    return make_error(status::package_invalid, "safetensors " + std::string(label) + ": " + msg);
}

result<dtype> parse_dtype(std::string_view s) {
    if (s == "F32") return dtype::f32;
    if (s == "BF16") return dtype::bf16;
    if (s == "F16") return dtype::f16;
    return make_error(status::dtype_mismatch, "unsupported dtype " + std::string(s) + " (expected F32, BF16 or F16)");
}

result<std::uint64_t> as_u64(const json::value& v) {
    if (v.is_uint64()) return v.as_uint64();
    if (v.is_int64() && v.as_int64() >= 0) return static_cast<std::uint64_t>(v.as_int64());
    return make_error(status::package_invalid, "expected a non-negative integer");
}

result<tensor_info> parse_entry(std::string_view name, const json::value& v, std::uint64_t data_bytes,
                                std::string_view label) {
    const std::string where = "tensor " + std::string(name) + ": ";
    if (!v.is_object()) return bad(label, where + "entry is not an object");
    const auto& o = v.as_object();
    const auto* dt = o.if_contains("dtype");
    const auto* shape = o.if_contains("shape");
    const auto* offs = o.if_contains("data_offsets");
    if (!dt || !dt->is_string() || !shape || !shape->is_array() || !offs || !offs->is_array() ||
        offs->as_array().size() != 2)
        return bad(label, where + "needs dtype, shape and data_offsets[2]");
    tensor_info t;
    t.name = std::string(name);
    auto type = parse_dtype(dt->as_string());
    if (!type) return make_error(type.code(), "safetensors " + std::string(label) + ": " + where + type.error().message);
    t.type = *type;
    for (const auto& d : shape->as_array()) {
        auto n = as_u64(d);
        if (!n || *n > (1ull << 40)) return bad(label, where + "bad shape entry");
        t.shape.push_back(static_cast<std::int64_t>(*n));
    }
    auto b = as_u64(offs->as_array()[0]);
    auto e = as_u64(offs->as_array()[1]);
    if (!b || !e) return bad(label, where + "bad data_offsets");
    t.begin = *b;
    t.end = *e;
    if (t.begin > t.end || t.end > data_bytes)
        return bad(label, where + "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                              ") out of range of the " + std::to_string(data_bytes) + "-byte data region");
    const auto want = static_cast<std::uint64_t>(t.elements()) * dtype_size(t.type);
    if (want != t.end - t.begin)
        return make_error(status::shape_mismatch, "safetensors " + std::string(label) + ": " + where +
                                                      std::to_string(t.end - t.begin) + " bytes but dtype x shape needs " +
                                                      std::to_string(want));
    return t;
}

}  // namespace

std::size_t dtype_size(dtype t) { return t == dtype::f32 ? 4 : 2; }

std::uint64_t dtype_bytes(dtype t, std::uint64_t elements) {
    return t == dtype::q8_0 ? elements / 32 * 34 : elements * dtype_size(t);
}

std::string_view to_string(dtype t) {
    switch (t) {
        case dtype::f32: return "F32";
        case dtype::bf16: return "BF16";
        case dtype::f16: return "F16";
        case dtype::q8_0: return "Q8_0";
    }
    return "?";
}

std::int64_t tensor_info::elements() const {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
}

result<safetensors_header> parse_safetensors_header(std::string_view json_text, std::uint64_t data_bytes,
                                                    std::string_view label) {
    boost::system::error_code ec;
    json::value v = json::parse(json_text, ec);
    if (ec) return bad(label, "header is not valid JSON: " + ec.message());
    if (!v.is_object()) return bad(label, "header is not a JSON object");
    safetensors_header h;
    for (const auto& [key, entry] : v.as_object()) {
        if (key == "__metadata__") continue;
        auto t = parse_entry(key, entry, data_bytes, label);
        if (!t) return t.error();
        h.tensors.push_back(std::move(*t));
    }
    return h;
}

result<safetensors_file> load_safetensors(const std::filesystem::path& path, const io::read_options& opts,
                                          io::read_report* report) {
    const std::string label = path.filename().string();
    auto size = io::file_size(path);
    if (!size) return size.error();
    if (*size < 8) return bad(label, "file of " + std::to_string(*size) + " bytes has no header length");
    std::byte len_bytes[8];
    if (auto r = io::read_range(path, 0, len_bytes, opts); !r) return r.error();
    std::uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | std::to_integer<std::uint64_t>(len_bytes[i]);
    if (header_len > *size - 8 || header_len > k_max_header_bytes)
        return bad(label, "header length " + std::to_string(header_len) + " runs past the end of the " +
                              std::to_string(*size) + "-byte file");
    std::string text(header_len, '\0');
    if (auto r = io::read_range(path, 8, std::as_writable_bytes(std::span(text)), opts); !r) return r.error();
    safetensors_file f;
    f.path = path;
    f.data_bytes = *size - 8 - header_len;
    auto header = parse_safetensors_header(text, f.data_bytes, label);
    if (!header) return header.error();
    f.header = std::move(*header);
    f.header.data_offset = 8 + header_len;
    f.data = make_aligned_bytes(f.data_bytes);
    if (auto r = io::read_range(path, f.header.data_offset, std::span(f.data.get(), f.data_bytes), opts, report); !r)
        return r.error();
    return f;
}

void_result write_safetensors(const std::filesystem::path& path, std::span<const tensor_to_write> tensors) {
    json::object header;
    std::uint64_t offset = 0;
    for (const auto& t : tensors) {
        std::int64_t n = 1;
        json::array shape;
        for (auto d : t.shape) n *= d, shape.emplace_back(d);
        if (static_cast<std::uint64_t>(n) * dtype_size(t.type) != t.bytes.size())
            return make_error(status::invalid_argument, "tensor " + t.name + ": byte size does not match shape");
        json::object e;
        e["dtype"] = to_string(t.type);
        e["shape"] = std::move(shape);
        e["data_offsets"] = json::array{offset, offset + t.bytes.size()};
        header[t.name] = std::move(e);
        offset += t.bytes.size();
    }
    header["__metadata__"] = json::object{{"format", "pt"}};
    std::string text = json::serialize(header);
    while ((8 + text.size()) % 8 != 0) text.push_back(' ');
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) return make_error(status::io_error, "cannot create " + path.string());
    std::uint64_t len = text.size();
    char len_bytes[8];
    for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<char>((len >> (8 * i)) & 0xff);
    out.write(len_bytes, 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& t : tensors)
        out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
    if (!out.flush()) return make_error(status::io_error, "write failed: " + path.string());
    return {};
}

}  // namespace calserve::model
