// model_router's `engine` side: routing a request to its alias' serving generation,
// and the board-wide view (health, in-flight, drain) over every resident engine.
#include "metrics/metrics.hpp"
#include "engine/model_router.hpp"
#include "engine/model_router_internal.hpp"

namespace calserve::engine {

namespace {
const generation_alias* find(const alias_list& aliases, std::string_view name) {
    for (const auto& a : aliases)
        if (a->name == name) return a.get();
    return nullptr;
}
}  // namespace

result<std::shared_ptr<actors::engine>> model_router::route(std::string_view model) {
    auto routed = controller_->read([&](const alias_list& aliases) -> result<std::pair<std::string, std::shared_ptr<actors::engine>>> {
        std::string served;
        const generation_alias* only = nullptr;
        int serving = 0;
        for (const auto& a : aliases) {
            if (!a->current) continue;
            served += (served.empty() ? "" : ", ") + a->name;
            only = a.get();
            ++serving;
        }
        const generation_alias* a = nullptr;
        if (model.empty()) {
            if (serving == 0) return make_error(status::not_ready, "no model is serving");
            if (serving > 1)
                return make_error(status::invalid_argument, "several models are served (" + served + "): name one in \"model\"");
            a = only;
        } else {
            a = find(aliases, model);
            if (!a) return make_error(status::not_found, "model '" + std::string(model) + "' does not exist (served: " + served + ")");
            if (!a->current)
                return make_error(status::not_ready, "model '" + std::string(model) + "' has no serving generation now");
        }
        return std::pair<std::string, std::shared_ptr<actors::engine>>(a->name, a->current->engine);
    });
    if (!routed) return routed.error();
    if (metrics_) metrics_->model_requests_total.labels({routed->first}).inc();
    return std::move(routed->second);
}

std::vector<actors::model_card> model_router::models() const {
    return controller_->read([](const alias_list& aliases) {
        std::vector<actors::model_card> out;
        for (const auto& a : aliases)
            if (a->current) out.push_back(a->current->engine->card());
        return out;
    });
}

std::shared_ptr<serving_engine> model_router::primary() const {
    return controller_->read([](const alias_list& aliases) -> std::shared_ptr<serving_engine> {
        for (const auto& a : aliases)
            if (a->current) return a->current->engine;
        return nullptr;
    });
}

std::shared_ptr<const actors::engine> model_router::text_engine() const { return primary(); }

std::vector<std::shared_ptr<serving_engine>> model_router::resident() const {
    return controller_->read([](const alias_list& aliases) {
        std::vector<std::shared_ptr<serving_engine>> out;
        for (const auto& a : aliases)
            for (const auto& g : a->generations)
                if (g->engine) out.push_back(g->engine);
        return out;
    });
}

void_result model_router::submit(actors::generation_request request, std::shared_ptr<actors::generation_sink> sink) {
    auto e = route("");
    if (!e) return e.error();
    return (*e)->submit(std::move(request), std::move(sink));
}

void model_router::cancel(const std::string& request_id) {
    for (auto& e : resident()) e->cancel(request_id);  // idempotent; unknown ids are ignored
}

std::optional<std::uint64_t> model_router::sequence_of(const std::string& request_id) const {
    for (const auto& e : resident())
        if (auto s = e->sequence_of(request_id)) return s;
    return std::nullopt;
}

const actors::model_card& model_router::card() const { return card_; }

actors::engine_health model_router::health() const {
    actors::engine_health h;
    h.ready = accepting_.load();
    bool any_ready = false, first = true;
    controller_->read([&](const alias_list& aliases) {
        for (const auto& a : aliases) {
            for (const auto& g : a->generations) {
                if (!g->engine) continue;
                auto e = g->engine->health();
                h.running += e.running;
                h.waiting += e.waiting;
                if (g != a->current) continue;
                any_ready = any_ready || e.ready;
                h.healthy = h.healthy && e.healthy;
                if (first) h.device_state = e.device_state;
                first = false;
            }
        }
        return 0;
    });
    h.ready = h.ready && any_ready;
    return h;
}
void model_router::drain() {
    accepting_.store(false);
    for (auto& e : resident()) e->drain();
}

void model_router::resume() {
    accepting_.store(true);
    auto current = controller_->read([](const alias_list& aliases) {
        std::vector<std::shared_ptr<serving_engine>> out;
        for (const auto& a : aliases)
            if (a->current) out.push_back(a->current->engine);
        return out;
    });
    for (auto& e : current) e->resume();
}

std::int64_t model_router::in_flight() const {
    std::int64_t n = 0;
    for (const auto& e : resident()) n += e->in_flight();
    return n;
}

}  // namespace calserve::engine
