// The job codec (actors/job_codec.hpp) without an actor: what every job kind writes to
// the device (prefill, prefill chunk, golden prefill, decode, chained decode with the
// sampling head's parameters) and what it takes from the outputs (draws, top-k rows,
// logits and their NaN/Inf check).
#include <algorithm>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>

#include "actors/job_codec.hpp"
#include "device/bf16.hpp"
#include "device/scoring.hpp"
#include "model/core/thread_pool.hpp"

using namespace calserve;
using namespace calserve::actors;

namespace {

constexpr std::int64_t k_vocab = 16;

sequence_ptr seq_of(std::uint64_t id, std::vector<token_id> tokens, std::int64_t device_len) {
    auto s = std::make_shared<sequence_state>();
    s->seq = id;
    s->tokens = std::move(tokens);
    s->device_len = device_len;
    s->rng = model::request_rng(id);
    return s;
}

template <class T>
std::span<const std::byte> bytes_of(const std::vector<T>& v) {
    return std::as_bytes(std::span(v));
}

// BF16 logits of `rows` rows, all finite.
std::vector<std::byte> finite_logits(std::size_t rows) {
    std::vector<float> values(rows * k_vocab);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = float(i % 7) * 0.5f;
    std::vector<std::byte> out(values.size() * 2);
    device::store_bf16(values, out);
    return out;
}

void poison(std::vector<std::byte>& logits, std::size_t row, std::size_t col) {
    const float nan[] = {std::numeric_limits<float>::quiet_NaN()};
    device::store_bf16(nan, std::span(logits).subspan((row * k_vocab + col) * 2, 2));
}

}  // namespace

TEST_CASE("plan_prefill: the whole prompt, a chunk, the rest, a lost cache copy", "[actors][codec]") {
    struct row {
        std::int64_t tokens, device_len, device_kv, chunk;
        prefill_span want;
    };
    const row rows[] = {
        {10, 0, 0, 0, {0, 10, false, true, false}},   // a prompt, unchunked
        {10, 0, 0, 4, {0, 4, true, true, false}},     // its first chunk
        {10, 4, 4, 4, {4, 4, true, false, false}},    // the next
        {10, 8, 8, 4, {8, 2, false, false, false}},   // the last: its logits are sampled
        {10, 6, 6, 0, {6, 4, false, false, false}},   // after a prefix-cache copy of 6 tokens
        {10, 6, 0, 0, {0, 10, false, true, true}},    // the copy did not happen: the whole prompt
        {10, 6, 0, 4, {0, 4, true, true, true}},
    };
    for (const auto& r : rows) {
        INFO(r.tokens << " tokens, device_len " << r.device_len << ", device holds " << r.device_kv << ", chunk "
                      << r.chunk);
        CHECK(plan_prefill(r.tokens, r.device_len, r.device_kv, r.chunk) == r.want);
    }
}

TEST_CASE("encode_prefill feeds the span's tokens at their positions", "[actors][codec]") {
    const std::vector<std::int32_t> tokens{5, 6, 7, 8, 9, 10, 11};
    const auto chunk = encode_prefill(tokens, 2, 3);
    CHECK(chunk.slice_tokens == 3);
    CHECK(chunk.tokens == std::vector<std::int32_t>{7, 8, 9});
    CHECK(chunk.positions == std::vector<std::int32_t>{2, 3, 4});
    CHECK(chunk.cur_seq_len == std::vector<std::uint32_t>{3});
    CHECK(chunk.past_kv_len == std::vector<std::uint32_t>{2});
    CHECK(chunk.rows.empty());  // a prefill: infer() of its one sequence
    CHECK(chunk.head.empty());

    // The golden prefill is a prefill from position 0: what a request of that prompt feeds.
    const auto whole = encode_prefill(tokens, 0, std::int64_t(tokens.size()));
    CHECK(whole.tokens == tokens);
    CHECK(whole.positions == std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6});
    CHECK(whole.past_kv_len == std::vector<std::uint32_t>{0});
}

TEST_CASE("encode_decode pads to the profile and names a chained row's source", "[actors][codec]") {
    job_context job;
    job.vocab = k_vocab;
    job.rows = {seq_of(11, {1, 2, 3}, 2), seq_of(12, {4, 5}, 1), seq_of(13, {6, 7, 8, 9}, 3)};
    job.rows[2]->params.logprobs = true;  // the host samples it
    job.rows[1]->params.temperature = 0.5f;
    job.rows[1]->params.top_k = 9;
    job.chain_rows = {-1, 1, -1};         // row 1 takes its token from row 1 of the job before
    auto src = std::make_shared<job_context>();
    src->rows = {seq_of(21, {0}, 0), seq_of(12, {4, 5}, 1)};
    src->head = {device::head_mode::sample, device::head_mode::sample};
    src->device_job = 77;
    job.chain_from = src;
    job.head.assign(3, device::head_mode::logits);
    REQUIRE(assign_head_modes(job, true));
    CHECK(job.chain_from_id == 77);
    CHECK(job.head == std::vector{device::head_mode::sample, device::head_mode::sample, device::head_mode::logits});

    const std::vector<std::int64_t> pasts{2, 5, 3};  // a chained row's past is the device's
    const auto in = encode_decode(job, 4, pasts, true);
    CHECK(in.slice_tokens == 1);
    CHECK(in.tokens == std::vector<std::int32_t>{3, 0, 9, 0});  // chained and padding rows feed 0
    CHECK(in.positions == std::vector<std::int32_t>{2, 5, 3, 0});
    CHECK(in.rows == std::vector<device::seq_id>{11, 12, 13, device::k_padding_row});
    CHECK(in.cur_seq_len == std::vector<std::uint32_t>{1, 1, 1});  // live rows only
    CHECK(in.past_kv_len == std::vector<std::uint32_t>{2, 5, 3});
    REQUIRE(in.head.size() == 4);
    const auto& drawn = in.head[0];
    CHECK(drawn.mode == std::uint32_t(device::head_mode::sample));
    CHECK(drawn.chain_job == 0);
    CHECK(std::equal(std::begin(drawn.rng), std::end(drawn.rng), job.rows[0]->rng.state().begin()));
    const auto& chained = in.head[1];
    CHECK(chained.chain_job == 77);
    CHECK(chained.chain_row == 1);
    CHECK(chained.temperature == 0.5f);
    CHECK(chained.top_k == 9);
    CHECK(chained.rng[0] == 0);  // its RNG state comes with the source's draw
    CHECK(in.head[2].mode == std::uint32_t(device::head_mode::logits));
    CHECK(in.head[3].mode == 0);  // padding

    CHECK(encode_decode(job, 4, pasts, false).head.empty());  // a program without a head
}

TEST_CASE("a chained row needs a live source that drew both rows", "[actors][codec]") {
    auto make = [] {
        job_context job;
        job.vocab = k_vocab;
        job.rows = {seq_of(12, {4, 5}, 1)};
        job.chain_rows = {0};
        job.head.assign(1, device::head_mode::logits);
        auto src = std::make_shared<job_context>();
        src->rows = {seq_of(12, {4, 5}, 1)};
        src->head = {device::head_mode::sample};
        src->device_job = 5;
        job.chain_from = src;
        return job;
    };
    auto live = make();
    CHECK(assign_head_modes(live, true));
    auto gone = make();  // submitted before a fault, or never
    CHECK_FALSE(assign_head_modes(gone, false));
    CHECK(gone.chain_from_id == 0);
    auto src_not_drawn = make();
    src_not_drawn.chain_from->head = {device::head_mode::logits};
    CHECK_FALSE(assign_head_modes(src_not_drawn, true));
    auto row_not_drawn = make();
    row_not_drawn.rows[0]->params.logprobs = true;
    CHECK_FALSE(assign_head_modes(row_not_drawn, true));
}

TEST_CASE("head modes: drawn, top k, or logits", "[actors][codec]") {
    auto s = seq_of(1, {1}, 0);
    CHECK(head_mode_of(*s, 8, k_vocab) == device::head_mode::sample);
    s->params.logprobs = true;
    s->params.top_logprobs = 4;
    s->params.temperature = 0;
    CHECK(head_mode_of(*s, 8, k_vocab) == device::head_mode::top_k);
    CHECK(head_mode_of(*s, 0, k_vocab) == device::head_mode::logits);  // no top k in this head
    s->params.top_logprobs = 9;
    CHECK(head_mode_of(*s, 8, k_vocab) == device::head_mode::logits);  // more than K asked
    s->params = {};
    s->constraint = std::make_unique<sequence_constraint>();
    CHECK(head_mode_of(*s, 8, k_vocab) == device::head_mode::logits);  // a grammar masks on the host
}

TEST_CASE("take_draws copies the drawn rows and fails closed on a missing draw", "[actors][codec]") {
    job_context job;
    job.vocab = k_vocab;
    job.rows = {seq_of(1, {1}, 1), seq_of(2, {1}, 1)};
    job.head = {device::head_mode::sample, device::head_mode::logits};
    std::vector<std::int32_t> tokens{9, -1};
    std::vector<std::uint64_t> states{1, 2, 3, 4, 0, 0, 0, 0};
    REQUIRE(take_draws(job, bytes_of(tokens), bytes_of(states)).ok());
    CHECK(job.drawn_tokens == std::vector<std::int32_t>{9, -1});
    CHECK(job.drawn_rng[0] == std::array<std::uint64_t, 4>{1, 2, 3, 4});

    tokens[0] = -1;  // the head found no finite logit
    CHECK(take_draws(job, bytes_of(tokens), bytes_of(states)).code() == status::logits_nan);
    tokens[0] = std::int32_t(k_vocab);
    CHECK(take_draws(job, bytes_of(tokens), bytes_of(states)).code() == status::logits_nan);
    CHECK(take_draws(job, bytes_of(std::vector<std::int32_t>{9}), bytes_of(states)).code() == status::internal);
}

TEST_CASE("take_top_k copies the rows' top K and fails closed on a non-finite row", "[actors][codec]") {
    job_context job;
    job.vocab = k_vocab;
    job.head_k = 2;
    job.rows = {seq_of(1, {1}, 1), seq_of(2, {1}, 1)};
    job.head = {device::head_mode::top_k, device::head_mode::logits};
    std::vector<float> logits{3.0f, 1.0f, 0, 0};
    std::vector<std::int32_t> ids{4, 2, -1, -1};
    std::vector<double> log_z{3.5, 0};
    REQUIRE(take_top_k(job, bytes_of(logits), bytes_of(ids), bytes_of(log_z)).ok());
    CHECK(job.topk_ids == ids);
    CHECK(job.topk_log_z == log_z);

    log_z[0] = std::numeric_limits<double>::infinity();
    CHECK(take_top_k(job, bytes_of(logits), bytes_of(ids), bytes_of(log_z)).code() == status::logits_nan);
    log_z[0] = 3.5;
    ids[0] = -1;
    CHECK(take_top_k(job, bytes_of(logits), bytes_of(ids), bytes_of(log_z)).code() == status::logits_nan);
    CHECK(take_top_k(job, bytes_of(logits), bytes_of(ids), bytes_of(std::vector<double>{1})).code() ==
          status::internal);
}

TEST_CASE("check_host_rows checks only the rows the host samples", "[actors][codec]") {
    job_context job;
    job.vocab = k_vocab;
    job.rows = {seq_of(1, {1}, 1), seq_of(2, {1}, 1), seq_of(3, {1}, 1)};
    job.head = {device::head_mode::logits, device::head_mode::sample, device::head_mode::logits};
    job.logits = finite_logits(4);  // a padded batch's whole output
    CHECK(check_host_rows(job, nullptr).ok());
    poison(job.logits, 3, 0);  // a padding row: never sampled
    CHECK(check_host_rows(job, nullptr).ok());
    poison(job.logits, 1, 5);  // a drawn row: its logits are not released
    CHECK(check_host_rows(job, nullptr).ok());
    poison(job.logits, 2, 3);
    const auto bad = check_host_rows(job, nullptr);
    CHECK(bad.code() == status::logits_nan);
    CHECK_THAT(std::string(bad.error().what()), Catch::Contains("row 2"));

    job.head.assign(3, device::head_mode::logits);  // every row the host's: one check of them all
    CHECK(check_host_rows(job, nullptr).code() == status::logits_nan);
    job.logits.resize(2 * k_vocab * 2);
    CHECK(check_host_rows(job, nullptr).code() == status::internal);
}

TEST_CASE("d2h_bytes counts what each live row returns", "[actors][codec]") {
    job_context job;
    job.vocab = k_vocab;
    job.head_k = 2;
    job.rows = {seq_of(1, {1}, 1), seq_of(2, {1}, 1), seq_of(3, {1}, 1)};
    job.head = {device::head_mode::logits, device::head_mode::sample, device::head_mode::top_k};
    std::uint64_t want = 0;
    for (auto m : job.head) want += device::head_row_d2h_bytes(m, 2, k_vocab);
    CHECK(d2h_bytes(job) == want);
    CHECK(want > device::head_row_d2h_bytes(device::head_mode::logits, 2, k_vocab));

    SECTION("a verify row also returns its accepted count") {
        job.drafts = {{}, {5, 6}, {}};
        CHECK(d2h_bytes(job) == want + sizeof(std::int32_t));
    }
    SECTION("a scoring prefill also returns every position's scores") {
        job_context prefill;
        prefill.prefill = true;
        prefill.vocab = k_vocab;
        prefill.rows = {seq_of(4, {1, 2, 3, 4, 5, 6, 7}, 7)};
        prefill.counts = {7};
        const auto logits_only = device::head_row_d2h_bytes(device::head_mode::logits, 0, k_vocab);
        CHECK(d2h_bytes(prefill) == logits_only);
        prefill.scored_from = 0;
        CHECK(d2h_bytes(prefill) == logits_only + 7 * device::score_position_d2h_bytes());
    }
}

TEST_CASE("check_logits_rows shares the rows among threads and names the first bad logit", "[actors][codec]") {
    constexpr std::size_t k_rows = 6, k_vocab = 1001;
    std::vector<std::uint16_t> logits(k_rows * k_vocab, 0x3f80);  // 1.0
    calserve::model::thread_pool pool(2);
    auto bytes = [&] { return std::as_bytes(std::span(logits)); };
    CHECK(calserve::actors::check_logits_rows(bytes(), k_rows, &pool).ok());
    CHECK(calserve::actors::check_logits_rows(bytes(), k_rows, nullptr).ok());
    logits[4 * k_vocab + 7] = 0x7fc0;  // NaN in row 4
    logits[5 * k_vocab + 1] = 0xff80;  // -Inf in row 5
    for (auto* p : {&pool, static_cast<calserve::model::thread_pool*>(nullptr)}) {
        auto r = calserve::actors::check_logits_rows(bytes(), k_rows, p);
        REQUIRE(r.code() == calserve::status::logits_nan);
        CHECK(r.error().what() == "logits_nan: logit " + std::to_string(4 * k_vocab + 7) + " is not finite");
    }
}

TEST_CASE("encode_score_request: each position names the next prompt token, across chunks, none past the prompt",
          "[actors][codec][scoring]") {
    const std::vector<std::int32_t> tokens{10, 11, 12, 13, 14, 15};  // a prompt of 4, then 2 generated
    // A first chunk of 3: positions 0..2 name prompt tokens 1..3 (the last across the chunk's end).
    CHECK(encode_score_request(tokens, 4, 5, 0, 3) == std::vector<std::int32_t>{11, 5, 12, 5, 13, 5});
    // The rest after a re-prefill (prompt + generated): position 3 is the prompt's last; nothing after it.
    CHECK(encode_score_request(tokens, 4, 5, 3, 3) == std::vector<std::int32_t>{-1, 0, -1, 0, -1, 0});
    // No alternatives asked: the targets alone.
    CHECK(encode_score_request(tokens, 4, 0, 1, 2) == std::vector<std::int32_t>{12, 0, 13, 0});
}

TEST_CASE("encode_decode: a verify row feeds its input token, its drafts and a run of 1 + drafts", "[actors][codec][speculative]") {
    job_context job;
    job.vocab = k_vocab;
    job.head_k = 8;
    job.rows = {seq_of(11, {1, 2, 3}, 2), seq_of(12, {4, 5}, 1)};
    job.chain_rows = {-1, -1};
    job.drafts = {{7, 8, 9}, {}};  // row 0 verifies three drafts, row 1 is a plain step
    job.head.assign(2, device::head_mode::sample);
    const std::vector<std::int64_t> pasts{2, 1};
    const auto in = encode_decode(job, 4, pasts, true);
    CHECK(in.tokens == std::vector<std::int32_t>{3, 5, 0, 0});
    CHECK(in.cur_seq_len == std::vector<std::uint32_t>{4, 1});
    CHECK(in.past_kv_len == std::vector<std::uint32_t>{2, 1});
    const auto width = std::size_t(device::k_verify_drafts_max);
    REQUIRE(in.drafts.size() == 4 * width);
    CHECK(std::vector<std::int32_t>(in.drafts.begin(), in.drafts.begin() + 3) == std::vector<std::int32_t>{7, 8, 9});
    CHECK(std::all_of(in.drafts.begin() + 3, in.drafts.end(), [](std::int32_t t) { return t == 0; }));
    job.drafts = {{}, {}};
    CHECK(encode_decode(job, 4, pasts, true).drafts.empty());  // no row drafts: "draft_tokens" is not written
}

TEST_CASE("keep_verifiable_drafts: only rows the head draws, never a chained row, at most the verify width",
          "[actors][codec][speculative]") {
    job_context job;
    job.vocab = k_vocab;
    job.head_k = 8;
    job.rows = {seq_of(1, {1}, 1), seq_of(2, {1}, 1), seq_of(3, {1}, 1)};
    job.rows[1]->params.logprobs = true;  // top k on the host
    job.chain_rows = {-1, -1, 0};
    job.drafts = {std::vector<token_id>(9, 4), {5}, {6}};
    keep_verifiable_drafts(job, true);
    CHECK(job.drafts[0].size() == std::size_t(device::k_verify_drafts_max));
    CHECK(job.drafts[1].empty());
    CHECK(job.drafts[2].empty());
    job.drafts = {{4}, {}, {}};
    keep_verifiable_drafts(job, false);  // a profile without a head
    CHECK_FALSE(job.verifies());
}

TEST_CASE("take_verify: kept drafts then the draw, cut after a stop id and at max_tokens; KV keeps the run",
          "[actors][codec][speculative]") {
    job_context job;
    job.vocab = k_vocab;
    job.rows = {seq_of(1, {1, 2}, 1), seq_of(2, {1, 2}, 1), seq_of(3, {1, 2}, 1), seq_of(4, {1, 2}, 1)};
    for (auto& r : job.rows) r->prompt_len = 2, r->max_tokens = 10;
    job.rows[1]->stop_ids = {8};  // a stop id among the kept drafts
    job.rows[2]->max_tokens = 2;  // two tokens left
    job.head.assign(4, device::head_mode::sample);
    job.drafts = {{7, 8, 9}, {7, 8, 9}, {7, 8, 9}, {}};
    job.drawn_tokens = {5, 5, 5, 6};
    job.counts = {4, 4, 4, 1};
    std::vector<std::int32_t> accepted{2, 3, 3, 0};
    REQUIRE(take_verify(job, bytes_of(accepted)).ok());
    CHECK(job.runs[0] == std::vector<token_id>{7, 8, 5});  // two kept, then the draw that differed
    CHECK(job.runs[1] == std::vector<token_id>{7, 8});     // ends at the stop id: the rest is never emitted
    CHECK(job.runs[2] == std::vector<token_id>{7, 8});     // max_tokens
    CHECK(job.runs[3].empty());                             // a plain row: its draw alone (apply_draws)
    CHECK(job.counts == std::vector<std::int64_t>{3, 2, 2, 1});
    CHECK(job.accepted == std::vector<std::int32_t>{2, 3, 3, 0});

    accepted[0] = 4;  // more than it drafted
    CHECK(take_verify(job, bytes_of(accepted)).code() == status::internal);
    CHECK(take_verify(job, bytes_of(std::vector<std::int32_t>{1})).code() == status::internal);
}
