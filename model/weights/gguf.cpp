// GGUF v3 header reader and writer; see gguf.hpp.
#include "model/weights/gguf.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

namespace calserve::model::gguf {
namespace {

constexpr std::uint32_t k_magic = 0x46554747;  // "GGUF" read as little-endian u32
constexpr std::uint32_t k_version = 3;
constexpr std::uint64_t k_max_elements = 1ull << 40;
constexpr std::uint32_t k_max_alignment = 1u << 20;
constexpr std::uint64_t k_max_string = 1ull << 30;  // longer than any key, token or template

// Bounded little-endian reader over the header prefix. Running past the prefix
// sets `short_prefix` (more of the file may hold the rest) or `failed`.
struct cursor {
    std::span<const std::byte> in;
    std::uint64_t file_bytes = 0;
    std::size_t at = 0;
    bool failed = false;
    bool short_prefix = false;
    std::string error;

    bool fail(const std::string& msg) {
        if (!failed) error = msg + " at byte " + std::to_string(at);
        failed = true;
        return false;
    }
    bool need(std::uint64_t n) {
        if (failed) return false;
        if (in.size() - at >= n) return true;
        if (at + n <= file_bytes && in.size() < file_bytes) short_prefix = true;
        return fail("header runs past the end of the file (" + std::to_string(n) + " bytes wanted)");
    }
    // Bytes the file has left after this point: bounds every count read here.
    std::uint64_t left() const { return file_bytes > at ? file_bytes - at : 0; }
    template <class T>
    T get() {
        T v{};
        if (!need(sizeof(T))) return v;
        std::memcpy(&v, in.data() + at, sizeof(T));
        at += sizeof(T);
        return v;
    }
    std::string str() {
        const auto n = get<std::uint64_t>();
        if (failed) return {};
        if (n > k_max_string || n > left()) return fail("string length " + std::to_string(n) + " past the end"), "";
        if (!need(n)) return {};
        std::string s(reinterpret_cast<const char*>(in.data() + at), static_cast<std::size_t>(n));
        at += static_cast<std::size_t>(n);
        return s;
    }
};

// Bytes of one scalar of type t in the file (strings: at least their 8-byte length).
std::uint64_t min_size(value_type t) {
    switch (t) {
        case value_type::u8: case value_type::i8: case value_type::boolean: return 1;
        case value_type::u16: case value_type::i16: return 2;
        case value_type::u32: case value_type::i32: case value_type::f32: return 4;
        case value_type::u64: case value_type::i64: case value_type::f64: case value_type::string: return 8;
        case value_type::array: return 12;
    }
    return 0;
}

bool valid_type(std::uint32_t t) { return t <= static_cast<std::uint32_t>(value_type::f64); }

// Reads one scalar into `v` (integers into i, floats into f, strings into s).
void read_scalar(cursor& c, value_type t, value& v) {
    switch (t) {
        case value_type::u8: v.i = c.get<std::uint8_t>(); break;
        case value_type::i8: v.i = c.get<std::int8_t>(); break;
        case value_type::u16: v.i = c.get<std::uint16_t>(); break;
        case value_type::i16: v.i = c.get<std::int16_t>(); break;
        case value_type::u32: v.i = c.get<std::uint32_t>(); break;
        case value_type::i32: v.i = c.get<std::int32_t>(); break;
        case value_type::boolean: {
            const auto b = c.get<std::uint8_t>();
            if (b > 1) c.fail("boolean value " + std::to_string(b));
            v.i = b;
            break;
        }
        case value_type::u64: {
            const auto u = c.get<std::uint64_t>();
            v.too_big = u > static_cast<std::uint64_t>(INT64_MAX);
            v.i = static_cast<std::int64_t>(u);
            break;
        }
        case value_type::i64: v.i = c.get<std::int64_t>(); break;
        case value_type::f32: v.f = c.get<float>(); break;
        case value_type::f64: v.f = c.get<double>(); break;
        case value_type::string: v.s = c.str(); break;
        case value_type::array: c.fail("nested array"); break;
    }
}

bool is_float(value_type t) { return t == value_type::f32 || t == value_type::f64; }

value read_value(cursor& c, value_type t) {
    value v;
    v.type = t;
    if (t != value_type::array) {
        read_scalar(c, t, v);
        return v;
    }
    const auto elem = c.get<std::uint32_t>();
    const auto count = c.get<std::uint64_t>();
    if (c.failed) return v;
    if (!valid_type(elem) || static_cast<value_type>(elem) == value_type::array)
        return c.fail("array element type " + std::to_string(elem) + " (nested arrays unsupported)"), v;
    v.elem = static_cast<value_type>(elem);
    if (count > c.left() / min_size(v.elem)) return c.fail("array of " + std::to_string(count) + " past the end"), v;
    for (std::uint64_t j = 0; j < count && !c.failed; ++j) {
        value e;
        read_scalar(c, v.elem, e);
        if (v.elem == value_type::string) v.strings.push_back(std::move(e.s));
        else if (is_float(v.elem)) v.floats.push_back(e.f);
        else v.ints.push_back(e.i);
    }
    return v;
}

bool known_tensor_type(std::uint32_t t) {
    return t == 0 || t == 1 || t == 8 || t == 30;
}

// Reads one tensor info: name, dims (reversed to outermost first), type, offset.
tensor read_tensor(cursor& c, const std::string& label) {
    tensor t;
    t.name = c.str();
    const auto n_dims = c.get<std::uint32_t>();
    if (c.failed) return t;
    const std::string where = "tensor '" + t.name + "': ";
    if (t.name.empty()) return c.fail(where + "empty name"), t;
    if (n_dims < 1 || n_dims > k_max_dims) return c.fail(where + std::to_string(n_dims) + " dims (1-4 allowed)"), t;
    std::uint64_t elements = 1;
    std::vector<std::int64_t> ne;
    for (std::uint32_t d = 0; d < n_dims && !c.failed; ++d) {
        const auto n = c.get<std::uint64_t>();
        if (c.failed) break;
        if (n == 0 || n > k_max_elements || elements > k_max_elements / n)
            return c.fail(where + "dimension " + std::to_string(n) + " out of range"), t;
        elements *= n;
        ne.push_back(static_cast<std::int64_t>(n));
    }
    const auto type = c.get<std::uint32_t>();
    t.offset = c.get<std::uint64_t>();
    if (c.failed) return t;
    if (!known_tensor_type(type)) {
        c.fail(where + "ggml type " + std::to_string(type) + " unsupported (F32, F16, BF16, Q8_0 are)");
        c.error = "GGUF " + label + ": " + c.error;
        return t;
    }
    t.type = static_cast<tensor_type>(type);
    if (t.type == tensor_type::q8_0 && ne[0] % k_q8_block != 0)
        return c.fail(where + "Q8_0 row of " + std::to_string(ne[0]) + " is not a multiple of 32"), t;
    t.dims.assign(ne.rbegin(), ne.rend());
    t.bytes = tensor_bytes(t.type, elements);
    return t;
}

error_info bad(std::string_view label, const std::string& msg) {
    return make_error(status::package_invalid, "GGUF " + std::string(label) + ": " + msg);
}

// Offsets aligned, inside the data section, no two tensors overlapping.
void_result check_layout(header& h, std::string_view label) {
    std::vector<const tensor*> order;
    for (const tensor& t : h.tensors) {
        const std::string where = "tensor '" + t.name + "': ";
        if (t.offset % h.alignment != 0)
            return bad(label, where + "offset " + std::to_string(t.offset) + " not a multiple of the alignment " +
                                  std::to_string(h.alignment));
        if (t.offset > h.data_bytes || t.bytes > h.data_bytes - t.offset)
            return bad(label, where + "data [" + std::to_string(t.offset) + ", +" + std::to_string(t.bytes) +
                                  ") past the end of the " + std::to_string(h.data_bytes) + "-byte data section");
        order.push_back(&t);
    }
    std::sort(order.begin(), order.end(), [](const tensor* a, const tensor* b) { return a->offset < b->offset; });
    for (std::size_t i = 1; i < order.size(); ++i)
        if (order[i - 1]->offset + order[i - 1]->bytes > order[i]->offset)
            return bad(label, "tensors '" + order[i - 1]->name + "' and '" + order[i]->name + "' overlap");
    return {};
}

result<std::uint32_t> read_alignment(const header& h, std::string_view label) {
    const value* a = h.find("general.alignment");
    if (!a) return k_default_alignment;
    if (a->type != value_type::u32) return bad(label, "general.alignment is not a u32");
    const auto n = static_cast<std::uint32_t>(a->i);
    if (n == 0 || !std::has_single_bit(n) || n > k_max_alignment)
        return bad(label, "general.alignment " + std::to_string(n) + " is not a power of two up to 2^20");
    return n;
}

}  // namespace

std::uint64_t tensor_bytes(tensor_type t, std::uint64_t elements) {
    switch (t) {
        case tensor_type::f32: return elements * 4;
        case tensor_type::f16:
        case tensor_type::bf16: return elements * 2;
        case tensor_type::q8_0: return elements / k_q8_block * k_q8_block_bytes;
    }
    return 0;
}

std::string_view to_string(tensor_type t) {
    switch (t) {
        case tensor_type::f32: return "F32";
        case tensor_type::f16: return "F16";
        case tensor_type::bf16: return "BF16";
        case tensor_type::q8_0: return "Q8_0";
    }
    return "?";
}

std::int64_t tensor::elements() const {
    std::int64_t n = 1;
    for (auto d : dims) n *= d;
    return n;
}

const value* header::find(std::string_view key) const {
    auto it = kv.find(key);
    return it == kv.end() ? nullptr : &it->second;
}

result<std::optional<std::int64_t>> header::integer(std::string_view key) const {
    const value* v = find(key);
    if (!v) return std::optional<std::int64_t>{};
    if (v->type == value_type::array || v->type == value_type::string || is_float(v->type) || v->too_big)
        return make_error(status::package_invalid, "GGUF key " + std::string(key) + " is not an integer");
    return std::optional<std::int64_t>{v->i};
}

result<std::optional<double>> header::number(std::string_view key) const {
    const value* v = find(key);
    if (!v) return std::optional<double>{};
    if (is_float(v->type)) return std::optional<double>{v->f};
    auto i = integer(key);
    if (!i) return i.error();
    return std::optional<double>{static_cast<double>(**i)};
}

result<std::optional<std::string>> header::string(std::string_view key) const {
    const value* v = find(key);
    if (!v) return std::optional<std::string>{};
    if (v->type != value_type::string)
        return make_error(status::package_invalid, "GGUF key " + std::string(key) + " is not a string");
    return std::optional<std::string>{v->s};
}

result<header> parse_header(std::span<const std::byte> bytes, std::uint64_t file_bytes, std::string_view label,
                            bool* need_more) {
    if (need_more) *need_more = false;
    if (bytes.size() > file_bytes) return bad(label, "prefix longer than the file");
    cursor c;
    c.in = bytes;
    c.file_bytes = file_bytes;
    header h;
    const auto magic = c.get<std::uint32_t>();
    h.version = c.get<std::uint32_t>();
    const auto tensor_count = c.get<std::uint64_t>();
    const auto kv_count = c.get<std::uint64_t>();
    if (!c.failed && magic != k_magic) return bad(label, "not a GGUF file (bad magic)");
    if (!c.failed && h.version != k_version)
        return bad(label, "version " + std::to_string(h.version) + " unsupported (only 3)");
    if (!c.failed && (kv_count > c.left() / 12 || tensor_count > c.left() / 24))
        return bad(label, "counts (" + std::to_string(kv_count) + " keys, " + std::to_string(tensor_count) +
                              " tensors) exceed the file");
    for (std::uint64_t i = 0; i < kv_count && !c.failed; ++i) {
        std::string key = c.str();
        const auto type = c.get<std::uint32_t>();
        if (c.failed) break;
        if (!valid_type(type)) { c.fail("key '" + key + "': value type " + std::to_string(type)); break; }
        value v = read_value(c, static_cast<value_type>(type));
        if (!c.failed && !h.kv.emplace(key, std::move(v)).second) c.fail("key '" + key + "' appears twice");
    }
    std::set<std::string, std::less<>> names;
    for (std::uint64_t i = 0; i < tensor_count && !c.failed; ++i) {
        tensor t = read_tensor(c, std::string(label));
        if (!c.failed && !names.insert(t.name).second) c.fail("tensor '" + t.name + "' appears twice");
        if (!c.failed) h.tensors.push_back(std::move(t));
    }
    if (c.failed) {
        if (need_more) *need_more = c.short_prefix;
        if (c.error.starts_with("GGUF ")) return make_error(status::unsupported, c.error);
        return bad(label, c.error);
    }
    auto align = read_alignment(h, label);
    if (!align) return align.error();
    h.alignment = *align;
    h.data_offset = (c.at + h.alignment - 1) / h.alignment * h.alignment;
    // With no tensors the data section is empty and its padding may be left out (the
    // writer does; so do the package's vocabulary files, and llama.cpp reads them).
    if (h.data_offset > file_bytes && h.tensors.empty()) h.data_offset = file_bytes;
    if (h.data_offset > file_bytes) return bad(label, "data section starts past the end of the file");
    h.data_bytes = file_bytes - h.data_offset;
    if (auto r = check_layout(h, label); !r) return r.error();
    return h;
}

// ---- writer ----

namespace {

template <class T>
void put(std::ostream& out, T v) {
    char buf[sizeof(T)];
    std::memcpy(buf, &v, sizeof(T));
    out.write(buf, sizeof(T));
}
void put_str(std::ostream& out, std::string_view s) {
    put<std::uint64_t>(out, s.size());
    out.write(s.data(), static_cast<std::streamsize>(s.size()));
}

void put_scalar(std::ostream& out, value_type t, std::int64_t i, double f, std::string_view s) {
    switch (t) {
        case value_type::u8: case value_type::boolean: put<std::uint8_t>(out, static_cast<std::uint8_t>(i)); break;
        case value_type::i8: put<std::int8_t>(out, static_cast<std::int8_t>(i)); break;
        case value_type::u16: put<std::uint16_t>(out, static_cast<std::uint16_t>(i)); break;
        case value_type::i16: put<std::int16_t>(out, static_cast<std::int16_t>(i)); break;
        case value_type::u32: put<std::uint32_t>(out, static_cast<std::uint32_t>(i)); break;
        case value_type::i32: put<std::int32_t>(out, static_cast<std::int32_t>(i)); break;
        case value_type::u64: put<std::uint64_t>(out, static_cast<std::uint64_t>(i)); break;
        case value_type::i64: put<std::int64_t>(out, i); break;
        case value_type::f32: put<float>(out, static_cast<float>(f)); break;
        case value_type::f64: put<double>(out, f); break;
        case value_type::string: put_str(out, s); break;
        case value_type::array: break;
    }
}

void put_value(std::ostream& out, const value& v) {
    put<std::uint32_t>(out, static_cast<std::uint32_t>(v.type));
    if (v.type != value_type::array) return put_scalar(out, v.type, v.i, v.f, v.s);
    put<std::uint32_t>(out, static_cast<std::uint32_t>(v.elem));
    if (v.elem == value_type::string) {
        put<std::uint64_t>(out, v.strings.size());
        for (const auto& s : v.strings) put_str(out, s);
    } else if (is_float(v.elem)) {
        put<std::uint64_t>(out, v.floats.size());
        for (double f : v.floats) put_scalar(out, v.elem, 0, f, {});
    } else {
        put<std::uint64_t>(out, v.ints.size());
        for (std::int64_t i : v.ints) put_scalar(out, v.elem, i, 0.0, {});
    }
}

void pad_to(std::ostream& out, std::uint64_t& at, std::uint64_t alignment) {
    while (at % alignment != 0) out.put('\0'), ++at;
}

}  // namespace

void writer::add(std::string_view key, value v) { kv_.emplace_back(std::string(key), std::move(v)); }
bool writer::find_key(std::string_view key) const {
    return std::any_of(kv_.begin(), kv_.end(), [&](const auto& kv) { return kv.first == key; });
}
void writer::add_string(std::string_view key, std::string_view s) {
    value v;
    v.type = value_type::string;
    v.s = std::string(s);
    add(key, std::move(v));
}
void writer::add_u32(std::string_view key, std::uint32_t n) {
    value v;
    v.type = value_type::u32;
    v.i = n;
    add(key, std::move(v));
}
void writer::add_f32(std::string_view key, float f) {
    value v;
    v.type = value_type::f32;
    v.f = f;
    add(key, std::move(v));
}
void writer::add_bool(std::string_view key, bool b) {
    value v;
    v.type = value_type::boolean;
    v.i = b ? 1 : 0;
    add(key, std::move(v));
}

void_result writer::add_tensor(std::string_view name, tensor_type type, std::vector<std::int64_t> dims,
                               std::vector<std::byte> data) {
    std::uint64_t n = 1;
    for (auto d : dims) n *= static_cast<std::uint64_t>(d);
    if (dims.empty() || (type == tensor_type::q8_0 && dims.back() % k_q8_block != 0) ||
        tensor_bytes(type, n) != data.size())
        return make_error(status::invalid_argument, "GGUF tensor " + std::string(name) + ": size does not match shape");
    tensors_.push_back({std::string(name), type, std::move(dims), std::move(data)});
    return {};
}

void writer::serialise(std::ostream& out) const {
    std::ostringstream head;
    put<std::uint32_t>(head, k_magic);
    put<std::uint32_t>(head, k_version);
    put<std::uint64_t>(head, tensors_.size());
    put<std::uint64_t>(head, kv_.size());
    for (const auto& [k, v] : kv_) put_str(head, k), put_value(head, v);
    std::uint64_t offset = 0;
    for (const auto& t : tensors_) {
        put_str(head, t.name);
        put<std::uint32_t>(head, static_cast<std::uint32_t>(t.dims.size()));
        for (auto it = t.dims.rbegin(); it != t.dims.rend(); ++it) put<std::uint64_t>(head, static_cast<std::uint64_t>(*it));
        put<std::uint32_t>(head, static_cast<std::uint32_t>(t.type));
        put<std::uint64_t>(head, offset);
        offset = (offset + t.data.size() + k_default_alignment - 1) / k_default_alignment * k_default_alignment;
    }
    const std::string h = head.str();
    out.write(h.data(), static_cast<std::streamsize>(h.size()));
    std::uint64_t at = h.size();
    if (tensors_.empty()) return;  // no data section, no padding before it
    pad_to(out, at, k_default_alignment);
    std::uint64_t data_at = 0;
    for (const auto& t : tensors_) {
        out.write(reinterpret_cast<const char*>(t.data.data()), static_cast<std::streamsize>(t.data.size()));
        data_at += t.data.size();
        pad_to(out, data_at, k_default_alignment);
    }
}

std::string writer::serialise() const {
    std::ostringstream out;
    serialise(out);
    return out.str();
}

void_result writer::write(const std::filesystem::path& path) const {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) return make_error(status::io_error, "cannot create " + path.string());
    serialise(out);
    if (!out.flush()) return make_error(status::io_error, "write failed: " + path.string());
    return {};
}

}  // namespace calserve::model::gguf
