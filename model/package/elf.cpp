// Minimal ELF64 images for CCU programs and the D2D helper, and a bounded reader.
#include <cstring>
#include <random>

#include "model/package/commands.hpp"

namespace calserve::model::package {

namespace {

constexpr std::size_t k_ehdr = 64;
constexpr std::size_t k_shdr = 64;

template <class T>
void put_at(std::string& out, std::size_t at, T v) {
    std::memcpy(out.data() + at, &v, sizeof(T));
}
template <class T>
T get_at(std::string_view in, std::size_t at) {
    T v;
    std::memcpy(&v, in.data() + at, sizeof(T));
    return v;
}

struct section {
    std::uint32_t name = 0, type = 0;
    std::uint64_t offset = 0, size = 0;
};

void write_shdr(std::string& out, std::size_t at, const section& s) {
    put_at<std::uint32_t>(out, at, s.name);
    put_at<std::uint32_t>(out, at + 4, s.type);
    put_at<std::uint64_t>(out, at + 24, s.offset);
    put_at<std::uint64_t>(out, at + 32, s.size);
    put_at<std::uint64_t>(out, at + 48, 1);  // sh_addralign
}

}  // namespace

std::string make_elf(std::uint16_t machine, std::uint16_t type, std::uint64_t seed, std::size_t payload_bytes,
                     const std::vector<std::string>& exports) {
    std::string out(k_ehdr, '\0');
    std::mt19937_64 rng(seed);
    const std::size_t text_off = out.size();
    for (std::size_t i = 0; i < payload_bytes; i += 8) {
        auto v = rng();
        out.append(reinterpret_cast<const char*>(&v), std::min<std::size_t>(8, payload_bytes - i));
    }
    const std::size_t dynstr_off = out.size();
    out.push_back('\0');
    for (const auto& e : exports) out.append(e).push_back('\0');
    const std::size_t shstr_off = out.size();
    const std::string shstr("\0.text\0.dynstr\0.shstrtab\0", 25);
    out.append(shstr);
    while (out.size() % 8) out.push_back('\0');
    const std::size_t shoff = out.size();
    out.append(4 * k_shdr, '\0');
    write_shdr(out, shoff + k_shdr, {1, 1, text_off, payload_bytes});
    write_shdr(out, shoff + 2 * k_shdr, {7, 3, dynstr_off, shstr_off - dynstr_off});
    write_shdr(out, shoff + 3 * k_shdr, {15, 3, shstr_off, shstr.size()});
    const unsigned char ident[16] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    std::memcpy(out.data(), ident, sizeof ident);
    put_at<std::uint16_t>(out, 16, type);
    put_at<std::uint16_t>(out, 18, machine);
    put_at<std::uint32_t>(out, 20, 1);
    put_at<std::uint64_t>(out, 24, type == k_et_exec ? 0x10000 : 0);  // e_entry
    put_at<std::uint64_t>(out, 40, shoff);
    put_at<std::uint16_t>(out, 52, k_ehdr);
    put_at<std::uint16_t>(out, 58, k_shdr);
    put_at<std::uint16_t>(out, 60, 4);
    put_at<std::uint16_t>(out, 62, 3);
    return out;
}

result<elf_info> parse_elf(std::string_view in) {
    auto bad = [](const std::string& m) { return make_error(status::package_invalid, "ELF: " + m); };
    if (in.size() < k_ehdr || in.substr(0, 4) != std::string_view("\x7f" "ELF", 4)) return bad("bad magic");
    if (in[4] != 2 || in[5] != 1) return bad("not ELF64 little-endian");
    elf_info info;
    info.type = get_at<std::uint16_t>(in, 16);
    info.machine = get_at<std::uint16_t>(in, 18);
    const auto shoff = get_at<std::uint64_t>(in, 40);
    const auto shentsize = get_at<std::uint16_t>(in, 58);
    const auto shnum = get_at<std::uint16_t>(in, 60);
    const auto shstrndx = get_at<std::uint16_t>(in, 62);
    if (shnum == 0) return info;
    if (shentsize != k_shdr || shstrndx >= shnum || shoff > in.size() || (in.size() - shoff) / k_shdr < shnum)
        return bad("section header table out of bounds");
    std::vector<section> secs(shnum);
    for (std::size_t i = 0; i < shnum; ++i) {
        const std::size_t at = shoff + i * k_shdr;
        secs[i] = {get_at<std::uint32_t>(in, at), get_at<std::uint32_t>(in, at + 4), get_at<std::uint64_t>(in, at + 24),
                   get_at<std::uint64_t>(in, at + 32)};
        if (secs[i].offset > in.size() || secs[i].size > in.size() - secs[i].offset)
            return bad("section " + std::to_string(i) + " out of bounds");
    }
    const auto names = in.substr(secs[shstrndx].offset, secs[shstrndx].size);
    for (const auto& s : secs) {
        if (s.name >= names.size()) continue;
        const auto name = names.substr(s.name, names.find('\0', s.name) - s.name);
        if (name != ".dynstr") continue;
        auto str = in.substr(s.offset, s.size);
        for (std::size_t pos = 0; pos < str.size();) {
            auto end = str.find('\0', pos);
            if (end == std::string_view::npos) end = str.size();
            if (end > pos) info.exports.emplace_back(str.substr(pos, end - pos));
            pos = end + 1;
        }
    }
    return info;
}

}  // namespace calserve::model::package
