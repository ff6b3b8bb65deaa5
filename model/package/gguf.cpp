// GGUF v3 vocabulary file: writer and bounded reader.
#include "model/package/gguf.hpp"

#include <cstring>

namespace calserve::model::package {

namespace {

constexpr std::uint32_t k_u32 = 4, k_string = 8, k_array = 9;

template <class T>
void put(std::string& out, T v) {
    char buf[sizeof(T)];
    std::memcpy(buf, &v, sizeof(T));
    out.append(buf, sizeof(T));
}
void put_str(std::string& out, std::string_view s) {
    put<std::uint64_t>(out, s.size());
    out.append(s);
}

struct cursor {
    std::string_view in;
    std::size_t at = 0;
    bool ok = true;

    template <class T>
    T get() {
        if (!ok || in.size() - at < sizeof(T)) {
            ok = false;
            return T{};
        }
        T v;
        std::memcpy(&v, in.data() + at, sizeof(T));
        at += sizeof(T);
        return v;
    }
    std::string_view str() {
        const auto n = get<std::uint64_t>();
        if (!ok || in.size() - at < n) {
            ok = false;
            return {};
        }
        auto s = in.substr(at, n);
        at += n;
        return s;
    }
};

bool skip_scalar(cursor& c, std::uint32_t type) {
    static constexpr std::uint8_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (type == k_string) {
        c.str();
        return c.ok;
    }
    if (type >= sizeof sizes || sizes[type] == 0) return false;
    if (c.in.size() - c.at < sizes[type]) return false;
    c.at += sizes[type];
    return true;
}

}  // namespace

std::string write_vocab_gguf(std::string_view architecture, std::string_view name,
                             const std::vector<std::string>& tokens) {
    std::string out("GGUF");
    put<std::uint32_t>(out, 3);
    put<std::uint64_t>(out, 0);  // tensors
    put<std::uint64_t>(out, 5);  // key/value pairs
    auto kv_string = [&](std::string_view k, std::string_view v) {
        put_str(out, k);
        put<std::uint32_t>(out, k_string);
        put_str(out, v);
    };
    kv_string("general.architecture", architecture);
    kv_string("general.name", name);
    kv_string("tokenizer.ggml.model", "gpt2");
    put_str(out, "general.alignment");
    put<std::uint32_t>(out, k_u32);
    put<std::uint32_t>(out, 32);
    put_str(out, "tokenizer.ggml.tokens");
    put<std::uint32_t>(out, k_array);
    put<std::uint32_t>(out, k_string);
    put<std::uint64_t>(out, tokens.size());
    for (const auto& t : tokens) put_str(out, t);
    return out;
}

result<gguf_info> parse_gguf(std::string_view bytes) {
    auto bad = [](const std::string& m) { return make_error(status::package_invalid, "GGUF: " + m); };
    cursor c{bytes};
    if (bytes.substr(0, 4) != "GGUF") return bad("bad magic");
    c.at = 4;
    gguf_info info;
    info.version = c.get<std::uint32_t>();
    info.tensor_count = c.get<std::uint64_t>();
    const auto n = c.get<std::uint64_t>();
    if (!c.ok || info.version != 3) return bad("unsupported header");
    for (std::uint64_t i = 0; i < n && c.ok; ++i) {
        const std::string key(c.str());
        const auto type = c.get<std::uint32_t>();
        if (!c.ok) break;
        if (type == k_string) {
            info.strings[key] = std::string(c.str());
        } else if (type == k_u32) {
            info.integers[key] = c.get<std::uint32_t>();
        } else if (type == k_array) {
            const auto elem = c.get<std::uint32_t>();
            const auto count = c.get<std::uint64_t>();
            if (!c.ok || count > bytes.size()) return bad("array length out of bounds");
            for (std::uint64_t j = 0; j < count; ++j)
                if (!skip_scalar(c, elem)) return bad("array element out of bounds");
            if (key == "tokenizer.ggml.tokens") info.token_count = count;
        } else if (!skip_scalar(c, type)) {
            return bad("unknown value type " + std::to_string(type));
        }
    }
    if (!c.ok) return bad("truncated");
    return info;
}

}  // namespace calserve::model::package
