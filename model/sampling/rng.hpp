#pragma once
//! The per-request random number generator of the sampler.
//!
//! Role: one `request_rng` lives with each request (not with a thread or a sampler),
//! so the tokens a seeded request draws depend only on its seed and its own history,
//! whatever the thread count, batch composition or interleaving with other requests.
//! Generator: xoshiro256** (Blackman & Vigna), state seeded through splitmix64 so any
//! 64-bit seed, including 0, gives a well-mixed non-zero state.
//! Invariants: the state is never all zero; one sampling step consumes exactly one
//! `next_u64()` (see model/sampling/sampling.hpp), so replaying a request replays its draws.
//! The state is plain data: it can be saved and restored across preemption.
#include <array>
#include <cstdint>
#include <optional>

namespace calserve::model {

constexpr std::uint64_t splitmix64(std::uint64_t& x) noexcept {
    std::uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

class request_rng {
public:
    using state_type = std::array<std::uint64_t, 4>;

    constexpr explicit request_rng(std::uint64_t seed = 0) noexcept {
        std::uint64_t x = seed;
        for (auto& word : s_) word = splitmix64(x);
    }

    /// A request's seed: the one it asked for, else one derived from its id.
    static constexpr std::uint64_t derive_seed(std::optional<std::uint64_t> requested, std::uint64_t request_id) noexcept {
        if (requested) return *requested;
        std::uint64_t x = request_id ^ 0x63616c7365727665ull;  // "calserve"
        return splitmix64(x);
    }

    constexpr std::uint64_t next_u64() noexcept {
        const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
        const std::uint64_t t = s_[1] << 17;
        s_[2] ^= s_[0];
        s_[3] ^= s_[1];
        s_[1] ^= s_[2];
        s_[0] ^= s_[3];
        s_[2] ^= t;
        s_[3] = rotl(s_[3], 45);
        return result;
    }

    /// Uniform in [0, 1) with 53 random bits.
    constexpr double next_unit() noexcept { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

    constexpr const state_type& state() const noexcept { return s_; }
    constexpr void restore(const state_type& s) noexcept { s_ = s; }

private:
    static constexpr std::uint64_t rotl(std::uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }

    state_type s_{};
};

}  // namespace calserve::model
