// JSONL timing log. See timing_log.hpp.
#include "net/timing_log.hpp"

#include <boost/json.hpp>
#include <cerrno>
#include <cstring>

#include "config/json_text.hpp"

namespace calserve::net {

result<std::unique_ptr<timing_log>> timing_log::open(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "a");
    if (!f) return make_error(status::io_error, "timing log " + path + ": " + std::strerror(errno));
    return std::unique_ptr<timing_log>(new timing_log(f));
}

timing_log::~timing_log() {
    if (file_) std::fclose(file_);
}

void set_engine_times(timing_record& rec, const actors::generation_result& r) {
    rec.completion_tokens = r.tokens.completion_tokens;
    rec.queue_s = r.queue_s;
    rec.server_ttft_s = r.ttft_s;
    rec.server_e2e_s = r.e2e_s;
    rec.device_s = r.device_s;
    rec.device_first_s = r.device_first_s;
    rec.device_wall_s = r.device_wall_s;
    rec.device_steps = r.device_steps;
}

void timing_log::write(const timing_record& r) {
    boost::json::object o{{"id", r.id},
                          {"route", r.route},
                          {"stream", r.stream},
                          {"status", r.http_status},
                          {"finish_reason", r.finish_reason},
                          {"prompt_tokens", r.prompt_tokens},
                          {"completion_tokens", r.completion_tokens},
                          {"received_unix", r.received_unix},
                          {"tokenize_s", r.tokenize_s},
                          {"ttft_s", r.ttft_s},
                          {"e2e_s", r.e2e_s},
                          {"flush_s", r.flush_s},
                          {"queue_s", r.queue_s},
                          {"server_ttft_s", r.server_ttft_s},
                          {"server_e2e_s", r.server_e2e_s},
                          {"device_s", r.device_s},
                          {"device_first_s", r.device_first_s},
                          {"device_wall_s", r.device_wall_s},
                          {"device_steps", r.device_steps}};
    std::string line = json_text(o);
    line += '\n';
    std::lock_guard lock(mutex_);
    if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) ++failures_;
}

}  // namespace calserve::net
