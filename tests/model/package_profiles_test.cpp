// Decode batch profiles (docs/package-format.md, "Decode batch profiles"): pack writes one decode
// submodel per batch with [B,1] inputs, [B,1,vocab] logits, its own ping/pong buffers and one
// CSR per row; validate checks every profile and rejects the defects one at a time.
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <functional>

#include "model/package/capacity.hpp"
#include "model/package/json_read.hpp"
#include "model/package/layout.hpp"
#include "model/package/validate.hpp"
#include "tests/model/package_test_support.hpp"

namespace mp = calserve::model::package;
namespace tp = calserve::test::pkg;
namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

fs::path pack_with(const std::string& preset, const std::string& tag, std::vector<std::uint32_t> batches,
                   bool unchecked = false) {
    auto dir = calserve::test::scratch_dir(tag) / "pkg";
    mp::pack_options o;
    o.preset = preset;
    o.out = dir;
    o.seed = 7;
    o.tokenizer_dir = calserve::test::tokenizer_dir();
    o.decode_batches = std::move(batches);
    o.unchecked_profiles = unchecked;
    auto p = mp::pack(o);
    INFO((p.ok() ? std::string() : p.error().what()));
    REQUIRE(p.ok());
    return dir;
}

std::vector<std::uint32_t> batches_of(const mp::package& p) {
    std::vector<std::uint32_t> out;
    for (const auto* m : p.decode_profiles()) out.push_back(m->batch);
    return out;
}

struct buffer {
    const mp::submodel* sub;
    std::uint64_t addr, size;
};

std::vector<buffer> buffers_of(const mp::package& p) {
    std::vector<buffer> out;
    for (const auto& m : p.submodels)
        for (const auto* list : {&m.inputs, &m.outputs})
            for (const auto& t : *list) {
                out.push_back({&m, t.ping_addr, t.byte_size});
                out.push_back({&m, t.pong_addr, t.byte_size});
            }
    return out;
}

bool inside(const mp::reservation& r, std::uint64_t addr, std::uint64_t size) {
    auto in = [&](std::uint64_t base, std::uint64_t bytes) { return addr >= base && addr + size <= base + bytes; };
    return in(r.dram_base, r.dram_bytes) || in(r.sram_base, r.sram_bytes);
}

// Every buffer of a profile B > 1 is disjoint from every other buffer of any submodel, and the
// profiles never share a buffer with each other (document 000's batch-1 decode shares the start of
// the prefill's input window; that pair alone is exempt).
void check_profile_buffers(const mp::package& p) {
    const auto bufs = buffers_of(p);
    for (std::size_t i = 0; i < bufs.size(); ++i) {
        CHECK(inside(p.reserved, bufs[i].addr, bufs[i].size));
        for (std::size_t j = i + 1; j < bufs.size(); ++j) {
            const auto &a = bufs[i], &b = bufs[j];
            const bool documented_pair = a.sub->role != b.sub->role && a.sub->batch == 1 && b.sub->batch == 1;
            if (documented_pair) continue;
            INFO(a.sub->name << " @" << a.addr << " vs " << b.sub->name << " @" << b.addr);
            CHECK((a.addr + a.size <= b.addr || b.addr + b.size <= a.addr));
        }
    }
}

void check_profile_shapes(const mp::package& p) {
    for (const auto* m : p.decode_profiles()) {
        const std::int64_t b = m->batch;
        INFO(m->name);
        CHECK(m->name == std::string(p.preset.starts_with("tiny-dense") ? "tiny_dense" : "tiny_moe") + "_decode_b" +
                             std::to_string(b) + "_c4096");
        CHECK(m->dir == (b == 1 ? std::string("decode") : "decode_b" + std::to_string(b)));
        CHECK(m->max_tokens == 1);
        CHECK(m->input("token")->shape == std::vector<std::int64_t>{b, 1});
        CHECK(m->input("token")->type == mp::dtype::int32);
        CHECK(m->input("position")->shape == std::vector<std::int64_t>{b, 1});
        CHECK(m->output("logits")->shape == std::vector<std::int64_t>{b, 1, p.vocab});
        CHECK(m->output("logits")->type == mp::dtype::bf16);
        CHECK(m->csr("cur_seq_len")->offset == 0x1104);
        CHECK(m->csr("past_kv_cur_seq_len")->offset == 0x1144);
    }
}

// Rewrites one submodel (by directory) of the manifest.
void edit_manifest(const fs::path& dir, const std::string& sub_dir, const std::function<void(json::object&)>& fn) {
    auto doc = json::parse(tp::slurp(dir / "calserve-manifest.json"));
    for (auto& s : doc.at("submodels").as_array())
        if (s.at("dir").as_string() == sub_dir) fn(s.as_object());
    tp::rewrite(dir / "calserve-manifest.json", json::serialize(doc));
}

json::object& tensor(json::object& sub, const char* list, std::size_t i) { return sub.at(list).as_array()[i].as_object(); }

}  // namespace

TEST_CASE("profiles: the tiny presets hold decode batches 1, 2, 4, 8, 16 and KV for 16 sequences sized by the planner") {
    const auto dir = tp::pack_preset("tiny-dense-1chip", "pkg-profiles-default");
    auto p = mp::load_package(dir);
    REQUIRE(p.ok());
    CHECK(batches_of(*p) == std::vector<std::uint32_t>{1, 2, 4, 8, 16});
    CHECK(p->batch == 16);
    CHECK(p->find_role(mp::submodel_role::prefill)->batch == 1);
    CHECK(p->find_role(mp::submodel_role::decode)->batch == 1);
    // KV: 16 sequences of the full calbin context, because the planner says batch 16 fits far
    // beyond 4096 tokens per row on a 16 GiB chip.
    CHECK(p->kv.batch == 16);
    CHECK(p->kv.context == 4096);
    CHECK(mp::max_context(*p, 16, mp::kv_dtype_choice::bf16, {}) > 4096);
    CHECK(mp::kv_slots_for(*p, 16, {}) == 16);
    CHECK(p->hashes.size() == 42 + 4 * 14);  // one chip: 14 files per extra profile
    check_profile_shapes(*p);
    check_profile_buffers(*p);
    // One CSR line per row: row b at base + 4*b, up to row 15 of a batch-16 profile.
    const auto info = tp::slurp(dir / "decode_b16/submodel_memory_reserved_info.txt");
    CHECK(info.find("csr: name=cur_seq_len[15] dtype=UINT32 offset=0x1140\n") != std::string::npos);
    CHECK(info.find("csr: name=past_kv_cur_seq_len[15] dtype=UINT32 offset=0x1180\n") != std::string::npos);
    CHECK(info.find("cur_seq_len[16]") == std::string::npos);
    const auto cmds = tp::slurp(dir / "decode_b4/cpu_chip0_runtime_cmds_ping.txt");
    CHECK(cmds.find("3 CSR_WRITE offset=0x1110 size=4\n") != std::string::npos);
    CHECK(cmds.find("7 CSR_WRITE offset=0x1150 size=4\n") != std::string::npos);

    auto r = mp::validate_package(dir, {});
    REQUIRE(r.ok());
    INFO(r->to_json());
    CHECK(r->status == "pass");
    CHECK(r->count(mp::severity::warning) == 0);
    for (const auto* d : {"decode", "decode_b2", "decode_b4", "decode_b8", "decode_b16"})
        CHECK(r->figures.unions.at(d).largest_activation_interval == p->kv.bytes_per_chip);
    REQUIRE(r->capacity.size() == 1);
    CHECK(r->capacity[0].batch == 16);  // gate E plans the KV region the package holds
    CHECK(r->capacity[0].context == 4096);
    tp::remove_scratch(dir);
}

TEST_CASE("profiles: --decode-batches picks them, pack refuses a list without 1, unsorted or above 16") {
    const auto dir = pack_with("tiny-moe-2chip", "pkg-profiles-1-4", {1, 4});
    auto p = mp::load_package(dir);
    REQUIRE(p.ok());
    CHECK(batches_of(*p) == std::vector<std::uint32_t>{1, 4});
    CHECK(p->batch == 4);
    CHECK(p->kv.batch == 4);  // KV sized for the largest profile
    CHECK(p->hashes.size() == 67 + 25);
    check_profile_shapes(*p);
    check_profile_buffers(*p);
    auto r = mp::validate_package(dir, {});
    REQUIRE(r.ok());
    CHECK(r->status == "pass");
    tp::remove_scratch(dir);

    using list = std::vector<std::uint32_t>;
    for (const auto& bad : {list{}, list{2, 4}, list{1, 4, 2}, list{1, 1}, list{1, 32}, list{1, 17}}) {
        INFO(bad.size());
        CHECK(mp::check_decode_batches(bad).code() == calserve::status::invalid_argument);
    }
    CHECK(mp::check_decode_batches({1, 2, 4, 8, 16}).ok());
    mp::pack_options o;
    o.preset = "tiny-dense-1chip";
    o.out = calserve::test::scratch_dir("pkg-profiles-refused") / "pkg";
    o.tokenizer_dir = calserve::test::tokenizer_dir();
    o.decode_batches = {1, 32};
    CHECK(mp::pack(o).code() == calserve::status::invalid_argument);
}

TEST_CASE("profiles: the replica keeps batch 1 unless asked, and asked keeps every documented address") {
    const auto dir = pack_with("qwen3-30b-a3b-2chip", "pkg-profiles-replica", {1, 2, 4});
    auto p = mp::load_package(dir);
    REQUIRE(p.ok());
    CHECK(batches_of(*p) == std::vector<std::uint32_t>{1, 2, 4});
    CHECK(p->kv.batch == 1);  // the profiles share document 000's 40960-token KV region
    CHECK(p->kv.bytes_total == 4026531840ull);
    const auto* b1 = p->find_role(mp::submodel_role::decode);
    CHECK(b1->name == "qwen3_30b_a3b_decode_b1_c40960");
    CHECK(b1->input("token")->ping_addr == 0x08e61800);
    CHECK(b1->input("position")->pong_addr == 0xc0001000);
    CHECK(b1->output("logits")->ping_addr == 0xc0002000);
    CHECK(b1->output("logits")->pong_addr == 0xc004d000);
    CHECK(p->find_role(mp::submodel_role::prefill)->output("logits")->ping_addr == 0x367b21000);
    // The profiles live in a region appended after document 000's 15,113,064,448 B reservation.
    CHECK(p->reserved.dram_bytes > 15113064448ull);
    for (const auto* m : p->decode_profiles())
        if (m->batch > 1) CHECK(m->input("token")->ping_addr >= 0xc0000000ull + 15113064448ull);
    check_profile_buffers(*p);

    auto r = mp::validate_package(dir, {});
    REQUIRE(r.ok());
    INFO(r->to_json());
    CHECK(r->status == "pass_with_warnings");
    CHECK(r->count(mp::severity::error) == 0);
    CHECK(r->count(mp::severity::warning) == 2);
    const auto& f = r->figures;
    CHECK(f.file_count == 67 + 2 * 25);
    CHECK(f.unions.at("decode").largest_activation_start == 0xc00a0000ull);
    CHECK(f.unions.at("decode").input == 8);
    CHECK(f.unions.at("decode_b4").largest_activation_interval == 2013265920ull);
    CHECK(f.unions.at("decode_b4").input == 32);  // token + position pings, 4 rows x 4 B each
    CHECK(f.profparts_lines.at("decode_b2") == std::vector<std::uint64_t>{1254, 1253});
    CHECK(f.params[0].dram_bytes == 9389477888ull);
    tp::remove_scratch(dir);
}

namespace {

struct profile_mutant {
    const char* name;
    const char* code;
    std::function<void(const fs::path&)> apply;
};

std::vector<profile_mutant> profile_mutants() {
    using tp::edit;
    const std::string b4 = "decode_b4/submodel_memory_reserved_info.txt";
    return {
        {"two profiles share a ping buffer", "C_PING_PONG_ALIAS",
         [b4](auto& d) {
             auto p = mp::load_package(d);
             REQUIRE(p.ok());
             const auto b2_ping = p->find_submodel("tiny_moe_decode_b2_c4096")->input("token")->ping_addr;
             const auto b4_ping = p->find_submodel("tiny_moe_decode_b4_c4096")->input("token")->ping_addr;
             edit_manifest(d, "decode_b4", [&](json::object& s) { tensor(s, "inputs", 0)["ping"] = mp::to_hex(b2_ping); });
             edit(d, b4, "ping=" + mp::to_hex(b4_ping), "ping=" + mp::to_hex(b2_ping));
         }},
        {"token [2,1] in a batch-4 profile", "D_PROFILE_SHAPE",
         [b4](auto& d) {
             edit_manifest(d, "decode_b4", [](json::object& s) {
                 tensor(s, "inputs", 0)["shape"] = json::array{2, 1};
                 tensor(s, "inputs", 0)["bytes"] = 8;
             });
             edit(d, b4, "name=token shape=[4,1] dtype=INT32 size=16", "name=token shape=[2,1] dtype=INT32 size=8");
         }},
        {"a profile's logits pong outside the reservation", "C_ADDRESS_OUT_OF_RESERVATION",
         [](auto& d) {
             auto p = mp::load_package(d);
             REQUIRE(p.ok());
             const auto pong = p->find_submodel("tiny_moe_decode_b16_c4096")->output("logits")->pong_addr;
             edit_manifest(d, "decode_b16", [](json::object& s) { tensor(s, "outputs", 0)["pong"] = "0x7fff00000000"; });
             edit(d, "decode_b16/submodel_memory_reserved_info.txt", "pong=" + mp::to_hex(pong), "pong=0x7fff00000000");
         }},
        {"a CSR row off its base + 4*b", "C_CSR_MISMATCH",
         [](auto& d) {
             edit(d, "decode_b8/submodel_memory_reserved_info.txt", "cur_seq_len[3] dtype=UINT32 offset=0x1110",
                  "cur_seq_len[3] dtype=UINT32 offset=0x1114");
         }},
        {"manifest batch not the largest profile", "D_BATCH_MISMATCH",
         [](auto& d) { edit(d, "calserve-manifest.json", "\"batch\": 16,\n  \"vocab\"", "\"batch\": 8,\n  \"vocab\""); }},
        {"two profiles of one batch", "D_DECODE_PROFILE_SET",
         [](auto& d) { edit_manifest(d, "decode_b2", [](json::object& s) { s["batch"] = 1; }); }},
    };
}

}  // namespace

TEST_CASE("profiles: validate rejects aliasing, shape, reservation, CSR and batch defects of a profile") {
    const auto base = tp::pack_preset("tiny-moe-2chip", "pkg-profile-mutant-base");
    for (const auto& m : profile_mutants()) {
        const auto dir = tp::clone(base, "pkg-profile-mutant");
        m.apply(dir);
        auto r = mp::validate_package(dir, {});
        INFO("mutant: " << m.name);
        REQUIRE(r.ok());
        INFO(r->to_json());
        CHECK(r->status == "fail");
        CHECK(r->has(m.code));
        if (std::string(m.code) == "C_PING_PONG_ALIAS") CHECK_FALSE(r->has("C_IO_MISMATCH"));  // the alias alone
        tp::remove_scratch(dir);
    }
    tp::remove_scratch(base);
}

TEST_CASE("profiles: validate refuses a profile above 16 (its CSR rows would reach the next register)") {
    const auto dir = pack_with("tiny-dense-1chip", "pkg-profiles-32", {1, 32}, true);
    auto r = mp::validate_package(dir, {});
    REQUIRE(r.ok());
    INFO(r->to_json());
    CHECK(r->status == "fail");
    CHECK(r->has("D_DECODE_PROFILE_LIMIT"));
    tp::remove_scratch(dir);
}
