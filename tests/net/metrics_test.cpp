// Metrics registry and /metrics: a small checker for the Prometheus text
// exposition grammar (0.0.4) and the rules promtool enforces.
#include <catch2/catch.hpp>
#include <cmath>
#include <regex>
#include <set>
#include <sstream>

#include "tests/net/net_fixture.hpp"

using namespace calserve;
using namespace calserve::test;
namespace m = calserve::metrics;

namespace {
struct sample {
    std::string name;
    std::map<std::string, std::string> labels;
    double value = 0;
};

struct exposition {
    std::map<std::string, std::string> types;   // family -> type
    std::vector<sample> samples;
};

// Parses and checks the text; every violation is a Catch failure naming the line.
exposition check_exposition(const std::string& text) {
    exposition out;
    std::set<std::string> helped;
    std::set<std::string> series;
    std::set<std::string> finished_families;
    std::string current;
    const std::regex help_re(R"(^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) (.*)$)");
    const std::regex type_re(R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$)");
    const std::regex sample_re(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$)");
    const std::regex label_re(R"(([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)\"(,|$))");
    REQUIRE(!text.empty());
    REQUIRE(text.back() == '\n');
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        INFO("line: " << line);
        std::smatch mt;
        if (std::regex_match(line, mt, help_re)) {
            CHECK(helped.insert(mt[1]).second);  // one HELP per family
            continue;
        }
        if (std::regex_match(line, mt, type_re)) {
            CHECK_FALSE(out.types.contains(mt[1]));  // one TYPE per family
            if (!current.empty()) finished_families.insert(current);
            current = mt[1];
            out.types[current] = mt[2];
            continue;
        }
        REQUIRE(line.rfind("#", 0) != 0);
        REQUIRE(std::regex_match(line, mt, sample_re));
        sample s;
        s.name = mt[1];
        std::string labels = mt[3];
        for (std::sregex_iterator it(labels.begin(), labels.end(), label_re), end; it != end; ++it) {
            CHECK(s.labels.emplace((*it)[1], (*it)[2]).second);
        }
        std::string rebuilt;
        for (std::sregex_iterator it(labels.begin(), labels.end(), label_re), end; it != end; ++it) rebuilt += it->str();
        CHECK(rebuilt == labels);
        const std::string v = mt[4];
        if (v == "+Inf" || v == "-Inf" || v == "NaN") s.value = v == "NaN" ? NAN : (v[0] == '+' ? INFINITY : -INFINITY);
        else {
            std::size_t used = 0;
            s.value = std::stod(v, &used);
            CHECK(used == v.size());
        }
        // The sample belongs to the current family (histogram suffixes allowed).
        std::string fam = s.name;
        for (const char* suf : {"_bucket", "_sum", "_count"}) {
            if (out.types[current] == "histogram" && fam == current + suf) fam = current;
        }
        CHECK(fam == current);
        CHECK_FALSE(finished_families.contains(fam));
        CHECK(helped.contains(fam));
        if (out.types[current] == "counter") CHECK(s.name.ends_with("_total"));
        if (s.name.ends_with("_bucket")) CHECK(s.labels.contains("le"));
        CHECK(series.insert(s.name + labels).second);  // no duplicate series
        out.samples.push_back(s);
    }
    // Histograms: cumulative buckets, +Inf present and equal to _count.
    std::map<std::string, std::vector<const sample*>> buckets;  // family+labels w/o le
    std::map<std::string, double> counts;
    for (const auto& s : out.samples) {
        auto key_labels = s.labels;
        key_labels.erase("le");
        std::string key;
        for (auto& [k, v] : key_labels) key += k + "=" + v + ",";
        if (s.name.ends_with("_bucket")) buckets[s.name.substr(0, s.name.size() - 7) + "|" + key].push_back(&s);
        if (s.name.ends_with("_count")) counts[s.name.substr(0, s.name.size() - 6) + "|" + key] = s.value;
    }
    for (const auto& [key, bs] : buckets) {
        INFO(key);
        REQUIRE(bs.back()->labels.at("le") == "+Inf");
        for (std::size_t i = 1; i < bs.size(); ++i) {
            CHECK(bs[i]->value >= bs[i - 1]->value);
            if (i + 1 < bs.size()) CHECK(std::stod(bs[i]->labels.at("le")) > std::stod(bs[i - 1]->labels.at("le")));
        }
        REQUIRE(counts.contains(key));
        CHECK(counts[key] == bs.back()->value);
    }
    return out;
}

double value_of(const exposition& e, const std::string& name, const std::map<std::string, std::string>& labels = {}) {
    for (const auto& s : e.samples) {
        if (s.name == name && s.labels == labels) return s.value;
    }
    return NAN;
}
}  // namespace

TEST_CASE("Registry renders counters, gauges and histograms in exposition format") {
    m::registry r;
    auto c = r.add_counter("x_requests_total", "Requests.\nSecond line \\ backslash.", {"kind"});
    auto g = r.add_gauge("x_depth", "Depth.");
    static constexpr double bounds[] = {0.1, 1, 10};
    auto h = r.add_histogram("x_latency_seconds", "Latency.", bounds, {"phase"});
    c.labels({"a\"b\\c\nd"}).inc(2);
    c.labels({"plain"}).inc();
    c.labels({"plain"}).inc(-5);  // ignored: counters never go down
    g.get().set(3.5);
    g.get().dec();
    for (double v : {0.05, 0.1, 0.5, 5.0, 50.0}) h.labels({"infer"}).observe(v);
    auto e = check_exposition(r.render());
    CHECK(e.types.at("x_requests_total") == "counter");
    CHECK(value_of(e, "x_requests_total", {{"kind", "plain"}}) == 1);
    CHECK(value_of(e, "x_requests_total", {{"kind", "a\\\"b\\\\c\\nd"}}) == 2);
    CHECK(value_of(e, "x_depth") == 2.5);
    CHECK(value_of(e, "x_latency_seconds_bucket", {{"phase", "infer"}, {"le", "0.1"}}) == 2);  // le is inclusive
    CHECK(value_of(e, "x_latency_seconds_bucket", {{"phase", "infer"}, {"le", "1"}}) == 3);
    CHECK(value_of(e, "x_latency_seconds_bucket", {{"phase", "infer"}, {"le", "10"}}) == 4);
    CHECK(value_of(e, "x_latency_seconds_bucket", {{"phase", "infer"}, {"le", "+Inf"}}) == 5);
    CHECK(value_of(e, "x_latency_seconds_count", {{"phase", "infer"}}) == 5);
    CHECK(value_of(e, "x_latency_seconds_sum", {{"phase", "infer"}}) == Approx(55.65));
    CHECK(h.labels({"infer"}).count() == 5);
}

TEST_CASE("Registry refuses bad names, duplicates and wrong label counts") {
    m::registry r;
    CHECK_THROWS(r.add_counter("no_suffix", "x"));
    CHECK_THROWS(r.add_gauge("9bad", "x"));
    CHECK_THROWS(r.add_gauge("ok_name", "x", {"le"}));
    r.add_gauge("dup", "x");
    CHECK_THROWS(r.add_gauge("dup", "x"));
    auto c = r.add_counter("c_total", "x", {"a"});
    CHECK_THROWS(c.labels({"1", "2"}));
    static constexpr double bad_bounds[] = {1, 0.5};
    auto h = r.add_histogram("h_seconds", "x", bad_bounds);
    CHECK_THROWS(h.get());
}

TEST_CASE("Recording is thread-safe") {
    m::registry r;
    m::calserve_metrics cm(r);
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; ++t) {
        ts.emplace_back([&] {
            for (int i = 0; i < 10000; ++i) {
                cm.phase_seconds(m::phase::infer).observe(1e-4);
                cm.faults_total.labels({"wait_timeout"}).inc();
                cm.device_busy_seconds.inc(0.5);
            }
        });
    }
    for (auto& t : ts) t.join();
    CHECK(cm.phase_seconds(m::phase::infer).count() == 40000);
    CHECK(cm.faults_total.labels({"wait_timeout"}).value() == 40000);
    CHECK(cm.device_busy_seconds.value() == 20000);
    cm.set_device_state("Resetting");
    CHECK(cm.device_state.value() == 5);
}

TEST_CASE("/metrics serves every calserve family and passes the exposition checks") {
    server_fixture f;
    REQUIRE(post(f.port, "/v1/completions", R"({"prompt":"x","max_tokens":3,"stream":true})").result_int() == 200);
    REQUIRE(post(f.port, "/v1/completions", R"({"prompt":"x","temperature":7})").result_int() == 400);
    auto r = call(f.port, http::verb::get, "/metrics");
    REQUIRE(r.result_int() == 200);
    CHECK(std::string(r[http::field::content_type]).find("version=0.0.4") != std::string::npos);
    auto e = check_exposition(r.body());
    for (const char* fam :
         {"calserve_time_to_first_token_seconds", "calserve_inter_token_latency_seconds",
          "calserve_e2e_request_latency_seconds", "calserve_request_queue_time_seconds", "calserve_phase_seconds",
          "calserve_requests_running", "calserve_requests_waiting", "calserve_kv_blocks_used",
          "calserve_kv_blocks_capacity", "calserve_device_state", "calserve_device_busy_seconds_total",
          "calserve_inflight_slots", "calserve_requests_total", "calserve_faults_total",
          "calserve_device_resets_total", "calserve_recovery_seconds", "calserve_requests_recovered_total",
          "calserve_requests_failed_total", "calserve_requests_waiting_limit", "calserve_kv_wait_limit_seconds",
          "calserve_http_responses_total"}) {
        INFO(fam);
        CHECK(e.types.contains(fam));
    }
    for (const char* ph : {"tokenize", "queue", "h2d", "infer", "d2h", "convert", "sample", "flush"}) {
        CHECK(value_of(e, "calserve_phase_seconds_count", {{"phase", ph}}) >= 0);
    }
    CHECK(value_of(e, "calserve_requests_total", {{"outcome", "length"}}) == 1);
    CHECK(value_of(e, "calserve_requests_total", {{"outcome", "rejected"}}) == 1);
    CHECK(value_of(e, "calserve_time_to_first_token_seconds_count") == 1);
    CHECK(value_of(e, "calserve_inter_token_latency_seconds_count") == 2);
    CHECK(value_of(e, "calserve_phase_seconds_count", {{"phase", "tokenize"}}) == 1);  // the rejected body never reached tokenization
    CHECK(value_of(e, "calserve_faults_total", {{"point", "logits_nan"}}) == 0);
    // By status code: the stream's 200 (its header), the 400; codes not yet answered exist at 0.
    CHECK(value_of(e, "calserve_http_responses_total", {{"code", "200"}}) == 1);
    CHECK(value_of(e, "calserve_http_responses_total", {{"code", "400"}}) == 1);
    CHECK(value_of(e, "calserve_http_responses_total", {{"code", "503"}}) == 0);
}

TEST_CASE("/metrics serves the standard process families with plausible values") {
    server_fixture f;
    auto r = call(f.port, http::verb::get, "/metrics");
    REQUIRE(r.result_int() == 200);
    auto e = check_exposition(r.body());
    CHECK(e.types.at("process_resident_memory_bytes") == "gauge");
    CHECK(e.types.at("process_open_fds") == "gauge");
    CHECK(e.types.at("process_threads") == "gauge");
    CHECK(e.types.at("process_cpu_seconds_total") == "counter");
    CHECK(e.types.at("process_start_time_seconds") == "gauge");
    CHECK(value_of(e, "process_resident_memory_bytes") > 1024 * 1024);
    CHECK(value_of(e, "process_open_fds") >= 4);  // std streams + the listening socket at least
    CHECK(value_of(e, "process_threads") >= 2);   // the test thread + the server's threads
    CHECK(value_of(e, "process_cpu_seconds_total") >= 0);
    CHECK(value_of(e, "process_start_time_seconds") > 1.5e9);
}
