// The web console in a real browser: a `calserve serve` daemon with an API key,
// headless Chromium driven over the DevTools protocol (tests/e2e/browser.hpp).
// With CALSERVE_CONSOLE_SCREENSHOTS=DIR it also writes DIR/console-chat.png and
// DIR/console-engine.png (the ones in docs/).
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>

#include "tests/e2e/browser.hpp"
#include "tests/e2e/daemon.hpp"
#include "tests/e2e/e2e_support.hpp"
#include "tests/net/net_fixture.hpp"

using namespace calserve;
using namespace calserve::test;
namespace json = boost::json;

namespace {
constexpr auto k_bound = std::chrono::seconds(120);   // generous: four builds may share two cores
const std::string k_key = "console-secret";
const test::headers k_auth{{"Authorization", "Bearer console-secret"}};

std::string js_string(const std::string& s) { return json::serialize(json::value(s)); }

// Sets an input of the page and fires `input`, as typing would.
void set_field(browser_page& page, const std::string& id, const std::string& value) {
    page.eval("(() => { const e = document.getElementById(" + js_string(id) + "); e.value = " + js_string(value) +
              "; e.dispatchEvent(new Event('input')); return true; })()");
}

std::string text_of(browser_page& page, const std::string& expression) {
    auto v = page.eval(expression);
    return v.is_string() ? std::string(v.as_string()) : std::string("<not a string: ") + json::serialize(v) + ">";
}

const std::string k_last_answer = "[...document.querySelectorAll('#transcript .msg.assistant')].pop()";

// Sends `prompt` from the chat box; returns once the page shows the answer running.
void send_chat(browser_page& page, const std::string& prompt) {
    const auto before = page.eval("document.querySelectorAll('#transcript .msg.assistant').length").to_number<int>();
    set_field(page, "prompt", prompt);
    page.eval("document.getElementById('send').click()");
    REQUIRE(page.wait_for("document.querySelectorAll('#transcript .msg.assistant').length > " + std::to_string(before),
                          k_bound));
}

bool wait_answer_done(browser_page& page) {
    return page.wait_for(k_last_answer + ".dataset.state !== 'running'", k_bound);
}

// The same request over HTTP (greedy, the page's default parameters), its message text.
std::string http_chat(std::uint16_t port, const std::string& prompt, int max_tokens, const json::object& extra = {}) {
    json::object body{{"model", "m"},
                      {"messages", json::array{json::object{{"role", "user"}, {"content", prompt}}}},
                      {"temperature", 0},
                      {"top_p", 1},
                      {"top_k", 0},
                      {"min_p", 0},
                      {"max_tokens", max_tokens},
                      {"presence_penalty", 0},
                      {"frequency_penalty", 0},
                      {"repetition_penalty", 1}};
    for (const auto& [k, v] : extra) body[k] = v;
    auto res = post(port, "/v1/chat/completions", json::serialize(body), k_auth);
    REQUIRE(res.result_int() == 200);
    return std::string(json::parse(res.body()).at("choices").at(0).at("message").at("content").as_string());
}

// The page's split of an answer into reasoning and answer (console.js splitReasoning).
std::pair<std::string, std::string> split_reasoning(const std::string& raw) {
    auto first = raw.find_first_not_of(" \t\r\n");
    bool open = first != std::string::npos && raw.compare(first, 7, "<think>") == 0;
    std::string body = open ? raw.substr(first + 7) : raw;
    auto close = body.find("</think>");
    if (close == std::string::npos) return open ? std::pair{body, std::string()} : std::pair{std::string(), raw};
    auto answer = body.substr(close + 8);
    answer.erase(0, answer.find_first_not_of('\n') == std::string::npos ? answer.size() : answer.find_first_not_of('\n'));
    return {body.substr(0, close), answer};
}

void save_screenshot(browser_page& page, const char* name) {
    const char* dir = std::getenv("CALSERVE_CONSOLE_SCREENSHOTS");
    if (!dir || !*dir) return;
    std::ofstream(std::filesystem::path(dir) / name, std::ios::binary) << page.screenshot_png();
}
}  // namespace

TEST_CASE("the web console chats, cancels, shows the engine and escapes model output in Chromium", "[e2e][console]") {
    if (std::getenv("CALSERVE_SANITIZED")) {
        WARN("skipped under sanitizers: a sanitized daemon plus Chromium is too slow on a shared 2-core machine");
        return;
    }
    const auto chromium = chromium_binary();
    if (chromium.empty()) FAIL("no chromium on PATH: install it with tools/bootstrap (Debian package chromium)");
    // 20 ms per device step: a long answer runs for seconds, so cancel and the busy slots are seen.
    auto args = serve_args("tiny-dense-1chip", {"device.sim.step_ms=20", "device.sim.d2h_ms=0"});
    args.insert(args.end(), {"--api-key", k_key});
    daemon_process d(args);
    REQUIRE(d.started());
    const auto port = d.port();
    const std::string origin = "http://127.0.0.1:" + std::to_string(port);

    // Nothing but the static page is reachable without the key.
    CHECK(call(port, http::verb::get, "/").result_int() == 200);
    CHECK(call(port, http::verb::get, "/v1/console/state").result_int() == 401);
    CHECK(call(port, http::verb::get, "/v1/models").result_int() == 401);
    CHECK(call(port, http::verb::get, "/v1/console/state", {}, k_auth).result_int() == 200);
    // A long answer fills most of the context: seconds at 20 ms a step.
    auto models = call(port, http::verb::get, "/v1/models", {}, k_auth);
    REQUIRE(models.result_int() == 200);
    const auto context = json::parse(models.body()).at("data").at(0).at("max_model_len").to_number<int>();
    const int long_tokens = std::min(2000, context - 64);
    REQUIRE(long_tokens >= 100);

    browser_page page(chromium);
    INFO(page.failure());
    REQUIRE(page.started());
    page.call("Runtime.enable");
    page.call("Log.enable");
    page.call("Page.enable");
    // The key as a user entered it earlier in this tab (the page keeps it in sessionStorage).
    page.call("Page.addScriptToEvaluateOnNewDocument",
              {{"source", "sessionStorage.setItem('calserve.key', " + js_string(k_key) + ")"}});
    page.call("Page.navigate", {{"url", origin + "/"}});
    REQUIRE(page.wait_for("document.readyState === 'complete' && document.getElementById('model').value === 'm'",
                          k_bound));

    SECTION("page, chat, engine view, cancel and escaping") {
        // A greedy answer streamed over /v1/ws equals the same request over HTTP.
        set_field(page, "temperature", "0");
        set_field(page, "max_tokens", "12");
        const std::string prompt = "Hello, console";
        send_chat(page, prompt);
        REQUIRE(wait_answer_done(page));
        const auto expected = split_reasoning(http_chat(port, prompt, 12));
        CHECK(text_of(page, k_last_answer + ".querySelector('.text').textContent") == expected.second);
        CHECK(text_of(page, k_last_answer + ".querySelector('.reasoning-text').textContent") == expected.first);
        CHECK(text_of(page, k_last_answer + ".querySelector('.stats').textContent").find("TTFT") != std::string::npos);
        save_screenshot(page, "console-chat.png");

        // The engine view: the device ready while idle.
        page.eval("document.getElementById('tab-engine').click()");
        REQUIRE(page.wait_for("document.getElementById('device-state').textContent === 'ready' && "
                              "document.getElementById('device-state').dataset.ready === 'true'",
                              k_bound));
        // The prefix cache's hit rate, over the prompt tokens looked up so far (a percentage once any was).
        CHECK(page.wait_for("/^[0-9]+[.][0-9] %$/.test(document.getElementById('cache').textContent)", k_bound));
        // Draft acceptance: this daemon does not draft, so no rate, and the counts are zero.
        CHECK(page.wait_for("document.getElementById('spec').textContent === '-' && "
                            "document.getElementById('spec-detail').textContent.startsWith('0 of 0 drafted')",
                            k_bound));
        // A long answer: the slots are busy and their jobs appear on the timeline while it runs.
        page.eval("document.getElementById('tab-chat').click()");
        page.eval("document.getElementById('clear').click()");
        set_field(page, "max_tokens", std::to_string(long_tokens));
        page.eval("document.getElementById('ignore_eos').checked = true");
        send_chat(page, "Tell me a long story");
        REQUIRE(page.wait_for(k_last_answer + ".querySelector('.text').textContent.length > 0", k_bound));
        page.eval("document.getElementById('tab-engine').click()");
        CHECK(page.wait_for("document.querySelector('#timeline b[data-busy=\"true\"]') !== null", k_bound));
        CHECK(page.wait_for("document.querySelectorAll('#lane-ping .job, #lane-pong .job').length > 0", k_bound));
        CHECK(page.wait_for("/^[1-9]/.test(document.getElementById('requests').textContent)", k_bound));
        save_screenshot(page, "console-engine.png");
        // Stop cancels it: the answer ends `cancelled` well short of its max_tokens.
        page.eval("document.getElementById('tab-chat').click()");
        page.eval("document.getElementById('cancel').click()");
        REQUIRE(wait_answer_done(page));
        CHECK(text_of(page, k_last_answer + ".dataset.state") == "cancelled");
        CHECK(std::stoi(text_of(page, k_last_answer + ".dataset.completionTokens")) < long_tokens);

        // Model output with markup is shown as text. Bias the tokens "<script" and ">"
        // and penalise repeats so greedy decoding alternates them; HTTP confirms the
        // model really answers "<script>..." before the page is asked.
        page.eval("document.getElementById('clear').click()");
        page.eval("document.getElementById('ignore_eos').checked = false");
        const json::object bias{{"7734", 100}, {"29", 100}};
        const json::object extra{{"logit_bias", bias}, {"presence_penalty", 2}, {"frequency_penalty", 2}};
        const std::string markup_prompt = "markup";
        auto markup = http_chat(port, markup_prompt, 8, extra);
        INFO("greedy output with the bias: " << markup);
        REQUIRE(markup.find("<script>") != std::string::npos);
        set_field(page, "max_tokens", "8");
        set_field(page, "presence_penalty", "2");
        set_field(page, "frequency_penalty", "2");
        set_field(page, "logit_bias", json::serialize(bias));
        send_chat(page, markup_prompt);
        REQUIRE(wait_answer_done(page));
        CHECK(text_of(page, k_last_answer + ".querySelector('.text').textContent") == split_reasoning(markup).second);
        CHECK(page.eval("document.querySelectorAll('#transcript script, #transcript *:not(div):not(details):not(summary)').length")
                  .to_number<int>() == 0);
        CHECK(page.eval(k_last_answer + ".querySelector('.text').children.length").to_number<int>() == 0);

        // No console errors, exceptions or failed loads all along.
        page.eval("1");  // drains pending events
        for (const auto& e : page.errors()) UNSCOPED_INFO(e);
        CHECK(page.errors().empty());
    }
    REQUIRE(d.stop() == 0);
}

TEST_CASE("the web console without the key reaches nothing but its page", "[e2e][console]") {
    if (std::getenv("CALSERVE_SANITIZED")) {
        WARN("skipped under sanitizers: a sanitized daemon plus Chromium is too slow on a shared 2-core machine");
        return;
    }
    const auto chromium = chromium_binary();
    if (chromium.empty()) FAIL("no chromium on PATH: install it with tools/bootstrap (Debian package chromium)");
    auto args = serve_args("tiny-dense-1chip");
    args.insert(args.end(), {"--api-key", k_key});
    daemon_process d(args);
    REQUIRE(d.started());
    browser_page page(chromium);
    INFO(page.failure());
    REQUIRE(page.started());
    page.call("Runtime.enable");
    page.call("Page.navigate", {{"url", "http://127.0.0.1:" + std::to_string(d.port()) + "/#engine"}});
    REQUIRE(page.wait_for("document.getElementById('status').textContent.includes('API key')", k_bound));
    CHECK(page.eval("document.getElementById('model').options.length").to_number<int>() == 0);
    CHECK(text_of(page, "document.getElementById('device-state').textContent") == "?");
    // The chat's WebSocket is refused too.
    set_field(page, "prompt", "hi");
    page.eval("document.getElementById('send').click()");
    REQUIRE(page.wait_for(k_last_answer + ".dataset.state === 'error'", k_bound));
    CHECK(text_of(page, k_last_answer + ".querySelector('.text').textContent").empty());
    REQUIRE(d.stop() == 0);
}
