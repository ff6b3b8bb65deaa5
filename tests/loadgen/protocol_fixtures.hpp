#pragma once
// The documented request/response shapes of the servers `calserve bench` drives,
// as fake_server profiles: llama.cpp's llama-server (current, and an older build
// whose streams carry no usage and end without [DONE]), vLLM and calserve. The
// fake tokenizer is one id per byte; token text is "t".
#include <string>

#include "tests/loadgen/fake_server.hpp"

namespace calserve::test::fixtures {

namespace detail {
inline std::string num(std::int64_t v) { return std::to_string(v); }

inline http_answer byte_tokens(const std::string& text, const std::string& extra) {
    std::string ids;
    for (unsigned char c : text) {
        if (!ids.empty()) ids += ',';
        ids += num(c);
    }
    return {200, "{" + extra + "\"tokens\":[" + ids + "]}"};
}

inline std::string field(const boost::json::object& body, const char* name) {
    const auto* v = body.if_contains(name);
    return (v != nullptr && v->is_string()) ? std::string(v->get_string()) : std::string();
}

// vLLM and calserve answer an unknown model with 404.
inline std::function<std::optional<http_answer>(const boost::json::object&)> strict_model(std::string id) {
    return [id](const boost::json::object& body) -> std::optional<http_answer> {
        if (field(body, "model") == id) return std::nullopt;
        return http_answer{404, R"({"error":{"message":"The model does not exist.","type":"NotFoundError","code":404}})"};
    };
}
}  // namespace detail

// llama-server: /v1/models lists data[] (and a models[] of its own); the context is
// in /props; /tokenize reads `content` (a body without it gives no tokens, the
// failure the bench once hit); `with_pieces` gives {"id","piece"} objects. The
// last choice chunk carries usage and timings; then [DONE].
inline fake_profile llama_server(bool with_usage = true, std::int64_t prompt_skew = 0, bool pieces = false) {
    fake_profile p;
    p.model_id = "qwen3-tiny-q8_0.gguf";
    p.models.body = R"({"models":[{"name":"qwen3-tiny-q8_0.gguf","model":"qwen3-tiny-q8_0.gguf","modified_at":"",)"
                    R"("size":"","digest":"","type":"model","description":"","tags":[""],"capabilities":["completion"],)"
                    R"("parameters":"","details":{"parent_model":"","format":"gguf","family":"","families":[""],)"
                    R"("parameter_size":"","quantization_level":""}}],"object":"list","data":[{"id":)"
                    R"("qwen3-tiny-q8_0.gguf","object":"model","created":1764547200,"owned_by":"llamacpp","meta":)"
                    R"({"vocab_type":2,"n_vocab":151936,"n_ctx_train":40960,"n_embd":64,"n_params":4718592,)"
                    R"("size":5111808}}]})";
    p.props = {200, R"({"default_generation_settings":{"id":0,"id_task":-1,"n_ctx":4096,"speculative":false,)"
                    R"("is_processing":false,"params":{"n_predict":-1,"temperature":0.8}},"total_slots":1,)"
                    R"("model_path":"/models/qwen3-tiny-q8_0.gguf","chat_template":"","build_info":"b6000-abcdef0"})"};
    p.tokenize = [pieces](const boost::json::object& body) {
        const auto text = detail::field(body, "content");
        if (!pieces) return detail::byte_tokens(text, "");
        std::string toks;
        for (unsigned char c : text) {
            if (!toks.empty()) toks += ',';
            toks += "{\"id\":" + detail::num(c) + ",\"piece\":\"x\"}";
        }
        return http_answer{200, "{\"tokens\":[" + toks + "]}"};
    };
    p.events = [with_usage, prompt_skew](std::int64_t prompt, std::int64_t max) {
        const std::string head = R"({"choices":[{"text":)";
        const std::string tail = R"(,"created":1764547200,"model":"qwen3-tiny-q8_0.gguf","system_fingerprint":)"
                                 R"("b6000-abcdef0","object":"text_completion","id":"chatcmpl-Zq3")";
        std::vector<std::string> ev;
        for (std::int64_t i = 0; i < max; ++i)
            ev.push_back(head + R"("t","index":0,"logprobs":null,"finish_reason":null}])" + tail + "}");
        std::string last = head + R"("","index":0,"logprobs":null,"finish_reason":"length"}])" + tail;
        if (with_usage) {
            const auto n_prompt = prompt + prompt_skew;
            last += R"(,"usage":{"completion_tokens":)" + detail::num(max) + R"(,"prompt_tokens":)" +
                    detail::num(n_prompt) + R"(,"total_tokens":)" + detail::num(max + n_prompt) +
                    R"(},"timings":{"prompt_n":)" + detail::num(n_prompt) +
                    R"(,"prompt_ms":1.5,"predicted_n":)" + detail::num(max) + R"(,"predicted_ms":3.0})";
        }
        ev.push_back(last + "}");
        if (with_usage) ev.push_back("[DONE]");  // the older build closes the stream without it
        return ev;
    };
    return p;
}

// vLLM: max_model_len in /v1/models, no /props; /tokenize reads `prompt` and
// answers count/max_model_len/tokens/token_strs; every chunk has "usage": null
// until a final choices-less usage chunk (stream_options.include_usage); then [DONE].
inline fake_profile vllm() {
    fake_profile p;
    p.model_id = "Qwen/Qwen3-0.6B";
    p.models.body = R"({"object":"list","data":[{"id":"Qwen/Qwen3-0.6B","object":"model","created":1764547200,)"
                    R"("owned_by":"vllm","root":"Qwen/Qwen3-0.6B","parent":null,"max_model_len":40960,"permission":)"
                    R"([{"id":"modelperm-1","object":"model_permission","created":1764547200,"allow_create_engine":)"
                    R"(false,"allow_sampling":true,"allow_logprobs":true,"allow_search_indices":false,"allow_view":)"
                    R"(true,"allow_fine_tuning":false,"organization":"*","group":null,"is_blocking":false}]}]})";
    p.tokenize = [](const boost::json::object& body) {
        const auto text = detail::field(body, "prompt");
        return detail::byte_tokens(text, "\"count\":" + detail::num(static_cast<std::int64_t>(text.size())) +
                                             ",\"max_model_len\":40960,\"token_strs\":null,");
    };
    p.refuse = detail::strict_model(p.model_id);
    p.events = [](std::int64_t prompt, std::int64_t max) {
        const std::string head = R"({"id":"cmpl-9f1","object":"text_completion","created":1764547200,"model":)"
                                 R"("Qwen/Qwen3-0.6B","choices":)";
        std::vector<std::string> ev;
        for (std::int64_t i = 0; i < max; ++i) {
            const std::string finish = i + 1 == max ? R"("length")" : "null";
            ev.push_back(head + R"([{"index":0,"text":" t","logprobs":null,"finish_reason":)" + finish +
                         R"(,"stop_reason":null}],"usage":null})");
        }
        ev.push_back(head + R"([],"usage":{"prompt_tokens":)" + detail::num(prompt) + R"(,"total_tokens":)" +
                     detail::num(prompt + max) + R"(,"completion_tokens":)" + detail::num(max) + "}}");
        ev.push_back("[DONE]");
        return ev;
    };
    return p;
}

// calserve: as vLLM for /v1/models and /tokenize; an empty-text chunk carries the
// finish reason, then the usage chunk, then [DONE] (docs/api.md).
inline fake_profile calserve() {
    fake_profile p;
    p.model_id = "tiny-dense-1chip";
    p.models.body = R"({"object":"list","data":[{"id":"tiny-dense-1chip","object":"model","created":0,)"
                    R"("owned_by":"calserve","max_model_len":4096}]})";
    p.props = {404, R"({"error":{"message":"no route /props","type":"not_found_error","param":null,"code":"not_found"}})"};
    p.tokenize = [](const boost::json::object& body) {
        const auto text = detail::field(body, "prompt");
        return detail::byte_tokens(text, "\"count\":" + detail::num(static_cast<std::int64_t>(text.size())) +
                                             ",\"max_model_len\":4096,");
    };
    p.refuse = detail::strict_model(p.model_id);
    p.events = [](std::int64_t prompt, std::int64_t max) {
        const std::string head = R"({"id":"cmpl-0ec3","object":"text_completion","created":1796128821,"model":)"
                                 R"("tiny-dense-1chip","choices":)";
        std::vector<std::string> ev;
        for (std::int64_t i = 0; i < max; ++i)
            ev.push_back(head + R"([{"index":0,"text":"t","logprobs":null,"finish_reason":null}],"usage":null})");
        ev.push_back(head + R"([{"index":0,"text":"","logprobs":null,"finish_reason":"length"}],"usage":null})");
        ev.push_back(head + R"([],"usage":{"prompt_tokens":)" + detail::num(prompt) + R"(,"completion_tokens":)" +
                     detail::num(max) + R"(,"total_tokens":)" + detail::num(prompt + max) + "}}");
        ev.push_back("[DONE]");
        return ev;
    };
    return p;
}

}  // namespace calserve::test::fixtures
