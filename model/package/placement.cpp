// Board placement: first fit of packages onto chips (placement.hpp).
#include "model/package/placement.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>

namespace calserve::model::package {

namespace {

std::string gib(std::uint64_t bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", double(bytes) / double(1ull << 30));
    return buf;
}

// Adds `bytes` to the chips in `chips`; true when every one stays within usable.
bool fits_on(const std::vector<std::uint64_t>& used, const std::vector<std::uint32_t>& chips,
             const std::vector<std::uint64_t>& bytes, std::uint64_t usable) {
    for (std::size_t i = 0; i < chips.size(); ++i)
        if (used[chips[i]] + bytes[i] > usable || used[chips[i]] + bytes[i] < used[chips[i]]) return false;
    return true;
}

// Every ordered choice of `n` distinct chips out of `board`, lowest first (n <= board).
bool next_combination(std::vector<std::uint32_t>& c, std::uint32_t board) {
    const auto n = c.size();
    for (std::size_t i = n; i-- > 0;) {
        if (c[i] < board - (n - i)) {
            ++c[i];
            for (std::size_t j = i + 1; j < n; ++j) c[j] = c[j - 1] + 1;
            return true;
        }
    }
    return false;
}

std::vector<std::uint32_t> first_fit(const std::vector<std::uint64_t>& used, const std::vector<std::uint64_t>& bytes,
                                     std::uint32_t board, std::uint64_t usable) {
    const auto n = std::uint32_t(bytes.size());
    if (n == 0 || n > board) return {};
    std::vector<std::uint32_t> c(n);
    for (std::uint32_t i = 0; i < n; ++i) c[i] = i;
    do {
        if (fits_on(used, c, bytes, usable)) return c;
    } while (next_combination(c, board));
    return {};
}

void describe(board_placement& out, std::uint32_t board_chips, std::span<const std::uint64_t> resident,
              std::uint64_t guard) {
    std::string s;
    for (std::uint32_t c = 0; c < board_chips; ++c) {
        s += "chip " + std::to_string(c) + ": guard " + gib(guard);
        if (c < resident.size() && resident[c] > 0) s += " + resident " + gib(resident[c]);
        for (const auto& m : out.models)
            for (std::size_t i = 0; i < m.chips.size(); ++i)
                if (m.chips[i] == c) s += " + " + m.name + " " + gib(m.bytes[i]);
        s += " = " + gib(out.used[c]) + " of " + gib(out.usable) + " GiB";
        s += out.used[c] <= out.usable ? "\n" : " (over)\n";
    }
    out.plan = s + out.plan;
}

}  // namespace

std::vector<std::uint64_t> package_chip_bytes(const package& p, const capacity_limits& limits) {
    auto plan = plan_capacity(p, p.kv.batch, p.kv.context, package_kv_choice(p), limits);
    std::vector<std::uint64_t> out;
    for (const auto& b : plan.chips) out.push_back(b.total >= b.guard ? b.total - b.guard : 0);
    return out;
}

board_placement place_packages(std::span<const placement_request> requests, std::uint32_t board_chips,
                               const capacity_limits& limits, std::span<const std::uint64_t> resident) {
    board_placement out;
    out.usable = limits.dram_bytes_per_chip;
    out.used.assign(board_chips, limits.guard_bytes);
    for (std::uint32_t c = 0; c < board_chips && c < resident.size(); ++c) out.used[c] += resident[c];
    out.fits = true;
    for (const auto& r : requests) {
        placed_model m;
        m.name = r.name;
        m.bytes = package_chip_bytes(*r.pkg, limits);
        std::vector<std::uint32_t> chips = r.chips;
        if (chips.empty()) {
            chips = first_fit(out.used, m.bytes, board_chips, out.usable);
        } else if (chips.size() != m.bytes.size()) {
            out.plan += r.name + ": names " + std::to_string(chips.size()) + " chips, the package needs " +
                        std::to_string(m.bytes.size()) + "\n";
            chips.clear();
        } else if (!fits_on(out.used, chips, m.bytes, out.usable)) {
            out.plan += r.name + ": does not fit on the chips it names\n";
            chips.clear();
        }
        if (chips.empty()) {
            if (r.chips.empty())
                out.plan += r.name + ": needs " + std::to_string(m.bytes.size()) + " chip(s) of " +
                            gib(m.bytes.empty() ? 0 : *std::max_element(m.bytes.begin(), m.bytes.end())) +
                            " GiB; no free chips hold it\n";
            out.fits = false;
            m.bytes.clear();
        } else {
            for (std::size_t i = 0; i < chips.size(); ++i) out.used[chips[i]] += m.bytes[i];
        }
        m.chips = std::move(chips);
        out.models.push_back(std::move(m));
    }
    describe(out, board_chips, resident, limits.guard_bytes);
    return out;
}

result<std::vector<std::uint32_t>> parse_chip_list(std::string_view text, std::uint32_t board_chips) {
    std::vector<std::uint32_t> out;
    if (text.empty()) return out;
    for (bool more = true; more;) {
        auto comma = text.find(',');
        auto part = text.substr(0, comma);
        std::uint32_t v = 0;
        auto [p, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
        if (ec != std::errc{} || p != part.data() + part.size())
            return make_error(status::invalid_argument, "chip list: '" + std::string(part) + "' is not a chip number");
        if (v >= board_chips)
            return make_error(status::invalid_argument, "chip list: chip " + std::to_string(v) + " is not on the board (" +
                                                            std::to_string(board_chips) + " chips)");
        if (std::find(out.begin(), out.end(), v) != out.end())
            return make_error(status::invalid_argument, "chip list: chip " + std::to_string(v) + " named twice");
        out.push_back(v);
        more = comma != std::string_view::npos;
        if (more) text.remove_prefix(comma + 1);
    }
    return out;
}

}  // namespace calserve::model::package
