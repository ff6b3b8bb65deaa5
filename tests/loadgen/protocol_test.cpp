// calserve bench against the documented shapes of llama.cpp's llama-server, vLLM
// and calserve (tests/loadgen/protocol_fixtures.hpp), served by an in-process fake:
// model id and context, /tokenize (only when asked), streamed records with and
// without usage, the prompt-count check, and whole `calserve bench --compare` runs
// that must send every server the same locally tokenized token-id prompts.
#include <sys/wait.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <sstream>

#include "loadgen/run.hpp"
#include "tests/loadgen/protocol_fixtures.hpp"
#include "tests/support/test_paths.hpp"

using namespace calserve;
using namespace calserve::loadgen;
namespace fx = calserve::test::fixtures;
namespace json = boost::json;

namespace {

endpoint at(const test::fake_server& s) {
    auto ep = parse_url(s.url());
    REQUIRE(ep.ok());
    return *ep;
}

request_record stream_one(const test::fake_server& s, const std::string& model, std::int64_t prompt_len,
                          std::int64_t max_tokens) {
    request_record r;
    stream_completion(at(s), stream_request{model, std::vector<std::int64_t>(prompt_len, 7), max_tokens},
                      bench_clock::now(), r);
    return r;
}

// The request bench sends: token ids, streamed, ignore_eos, usage asked for.
void check_request(const json::object& body, const std::string& model, std::size_t prompt_len) {
    CHECK(body.at("model").as_string() == model);
    const auto& prompt = body.at("prompt").as_array();
    CHECK(prompt.size() == prompt_len);
    for (const auto& t : prompt) CHECK(t.is_int64());
    CHECK(body.at("stream").as_bool());
    CHECK(body.at("ignore_eos").as_bool());
    CHECK(body.at("stream_options").at("include_usage").as_bool());
}

std::string slurp(const std::filesystem::path& p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

int bench(const std::string& args, const std::filesystem::path& log) {
    const std::string cmd = "env -u CALSERVE_TOKENIZER_DIR " + test::calserve_binary().string() + " bench " + args +
                            " >" + log.string() + " 2>&1";
    const int st = std::system(cmd.c_str());
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

}  // namespace

TEST_CASE("protocol: llama-server's /v1/models, /props and /tokenize {content}", "[loadgen][protocol]") {
    test::fake_server s(fx::llama_server());
    auto info = fetch_server_info(at(s), std::chrono::seconds(5));
    REQUIRE(info.ok());
    CHECK(info->model == "qwen3-tiny-q8_0.gguf");
    CHECK(info->max_model_len == 4096);  // from /props, not n_ctx_train
    auto ids = tokenize_remote(at(s), "Hi!", std::chrono::seconds(5));
    REQUIRE(ids.ok());
    CHECK(*ids == std::vector<std::int64_t>{'H', 'i', '!'});

    test::fake_server pieces(fx::llama_server(true, 0, true));
    auto with_pieces = tokenize_remote(at(pieces), "ab", std::chrono::seconds(5));
    REQUIRE(with_pieces.ok());
    CHECK(*with_pieces == std::vector<std::int64_t>{'a', 'b'});
}

TEST_CASE("protocol: llama-server streams with usage in the last choice chunk", "[loadgen][protocol]") {
    test::fake_server s(fx::llama_server());
    const auto r = stream_one(s, "qwen3-tiny-q8_0.gguf", 12, 5);
    INFO(r.error);
    REQUIRE(r.ok);
    CHECK(r.completion_tokens == 5);
    CHECK(r.usage_completion);
    CHECK(r.server_prompt_tokens == 12);
    CHECK(r.token_times.size() == 5);
    CHECK(r.finish_reason == "length");
    CHECK(r.saw_done);
    CHECK(r.request_id == "chatcmpl-Zq3");
    REQUIRE(s.completions().size() == 1);
    check_request(s.completions()[0], "qwen3-tiny-q8_0.gguf", 12);
}

TEST_CASE("protocol: an older llama-server stream without usage or [DONE] is complete but unchecked",
          "[loadgen][protocol]") {
    test::fake_server s(fx::llama_server(false));
    const auto r = stream_one(s, "qwen3-tiny-q8_0.gguf", 8, 4);
    INFO(r.error);
    REQUIRE(r.ok);
    CHECK(r.completion_tokens == 4);  // counted from text chunks
    CHECK_FALSE(r.usage_completion);
    CHECK(r.server_prompt_tokens == -1);
    CHECK_FALSE(r.saw_done);
    const auto sum = summarize_run(std::vector<request_record>{r}, {}, 1);
    CHECK(sum.prompt_checked == 0);
    CHECK_THAT(summary_table(sum, "x"), Catch::Contains("prompt_tokens checked on 0 of 1"));
}

TEST_CASE("protocol: a server counting other prompt tokens than were sent fails the request", "[loadgen][protocol]") {
    test::fake_server s(fx::llama_server(true, 1));
    const auto r = stream_one(s, "qwen3-tiny-q8_0.gguf", 8, 2);
    CHECK_FALSE(r.ok);
    CHECK_THAT(r.error, Catch::Contains("server counted 9 prompt tokens, 8 sent"));
}

TEST_CASE("protocol: vLLM's models, tokenize and usage chunk", "[loadgen][protocol]") {
    test::fake_server s(fx::vllm());
    auto info = fetch_server_info(at(s), std::chrono::seconds(5));
    REQUIRE(info.ok());
    CHECK(info->model == "Qwen/Qwen3-0.6B");
    CHECK(info->max_model_len == 40960);
    auto ids = tokenize_remote(at(s), "ok", std::chrono::seconds(5));
    REQUIRE(ids.ok());
    CHECK(*ids == std::vector<std::int64_t>{'o', 'k'});
    const auto r = stream_one(s, "Qwen/Qwen3-0.6B", 16, 3);
    INFO(r.error);
    REQUIRE(r.ok);
    CHECK(r.completion_tokens == 3);
    CHECK(r.usage_completion);
    CHECK(r.server_prompt_tokens == 16);
    CHECK(r.token_times.size() == 3);
    CHECK(r.finish_reason == "length");
    check_request(s.completions().at(0), "Qwen/Qwen3-0.6B", 16);
    const auto wrong = stream_one(s, "other", 4, 1);  // vLLM refuses a model it does not serve
    CHECK_FALSE(wrong.ok);
    CHECK(wrong.http_status == 404);
}

TEST_CASE("protocol: calserve's models, tokenize and stream", "[loadgen][protocol]") {
    test::fake_server s(fx::calserve());
    auto info = fetch_server_info(at(s), std::chrono::seconds(5));
    REQUIRE(info.ok());
    CHECK(info->model == "tiny-dense-1chip");
    CHECK(info->max_model_len == 4096);
    auto ids = tokenize_remote(at(s), "z", std::chrono::seconds(5));
    REQUIRE(ids.ok());
    CHECK(*ids == std::vector<std::int64_t>{'z'});
    const auto r = stream_one(s, "tiny-dense-1chip", 5, 4);
    INFO(r.error);
    REQUIRE(r.ok);
    CHECK(r.completion_tokens == 4);
    CHECK(r.server_prompt_tokens == 5);
    CHECK(r.token_times.size() == 4);  // the empty finishing chunk is no token
    CHECK(r.saw_done);
}

TEST_CASE("protocol: calserve bench --compare llama-server and vLLM sends both the same local token ids",
          "[loadgen][protocol][cli]") {
    test::fake_server llama(fx::llama_server());
    test::fake_server vllm(fx::vllm());
    const auto dir = test::scratch_dir("bench-protocol");
    const int rc = bench("--url " + llama.url() + " --compare " + vllm.url() + " --tokenizer " +
                             test::tokenizer_dir().string() + " --requests 4 --warmup 1 --concurrency 2 " +
                             "--prompt-tokens 16 --output-tokens 3 --seed 9 --out " + (dir / "out").string(),
                         dir / "bench.log");
    INFO(slurp(dir / "bench.log"));
    REQUIRE(rc == 0);
    CHECK(llama.tokenize_calls() == 0);  // tokenized locally
    CHECK(vllm.tokenize_calls() == 0);
    std::map<std::string, int> llama_prompts, vllm_prompts;
    for (const auto& [server, model, seen] :
         {std::tuple{&llama, "qwen3-tiny-q8_0.gguf", &llama_prompts}, std::tuple{&vllm, "Qwen/Qwen3-0.6B", &vllm_prompts}}) {
        const auto bodies = server->completions();
        REQUIRE(bodies.size() == 5);
        for (const auto& b : bodies) {
            check_request(b, model, 16);
            ++(*seen)[json::serialize(b.at("prompt"))];
        }
    }
    CHECK(llama_prompts == vllm_prompts);
    // Local Qwen3 ids, not the fake's one-id-per-byte: some id is above 255.
    bool qwen_ids = false;
    const auto first = llama.completions().at(0);
    for (const auto& t : first.at("prompt").as_array()) qwen_ids |= t.as_int64() > 255;
    CHECK(qwen_ids);
    const auto sum = json::parse(slurp(dir / "out" / "summary.json")).as_object();
    for (const char* label : {"a", "b"}) {
        CHECK(sum.at(label).at("succeeded").as_int64() == 4);
        CHECK(sum.at(label).at("prompt_tokens_checked").as_int64() == 4);
    }
    CHECK(sum.contains("ratios_b_over_a"));
}

TEST_CASE("protocol: calserve bench says when a server reports no usage, --server-tokenize asks /tokenize",
          "[loadgen][protocol][cli]") {
    test::fake_server old(fx::llama_server(false));
    const auto dir = test::scratch_dir("bench-protocol-old");
    const int rc = bench("--url " + old.url() + " --server-tokenize --requests 2 --warmup 0 --concurrency 1 " +
                             "--prompt-tokens 8 --output-tokens 2 --out " + (dir / "out").string(),
                         dir / "bench.log");
    INFO(slurp(dir / "bench.log"));
    REQUIRE(rc == 0);
    CHECK(old.tokenize_calls() >= 1);
    const auto sent = old.completions();
    for (const auto& b : sent)
        for (const auto& t : b.at("prompt").as_array()) CHECK(t.as_int64() < 256);  // the fake's byte ids
    CHECK_THAT(slurp(dir / "out" / "summary.txt"), Catch::Contains("prompt_tokens checked on 0 of 2"));
}
