// model_router's state file: the alias mapping (each alias' current and previous
// generation) in <server.state_dir>/models.json, written atomically and checksummed so
// that start-up tells a torn or corrupt file from a good one (model_router.hpp).
#include "config/json_text.hpp"
#include "engine/model_router.hpp"
#include "engine/model_router_internal.hpp"

#include "config/read_file.hpp"

#include <boost/json.hpp>
#include <fstream>
#include <spdlog/spdlog.h>
#include <sstream>

#include "io/atomic_file.hpp"
#include "model/package/hashing.hpp"

namespace calserve::engine {

namespace json = boost::json;
namespace fs = std::filesystem;
namespace pkg = model::package;

constexpr int k_state_version = 1;

namespace {

json::object generation_json(const saved_generation& g) { return {{"generation", g.number}, {"dir", g.dir}}; }

result<saved_generation> generation_of(const json::value* v) {
    if (!v || !v->is_object()) return make_error(status::parse_error, "expected a generation object");
    const auto& o = v->get_object();
    const auto* n = o.if_contains("generation");
    const auto* d = o.if_contains("dir");
    if (!n || !n->is_number() || !d || !d->is_string()) return make_error(status::parse_error, "generation needs number and dir");
    return saved_generation{json::value_to<std::uint64_t>(*n), std::string(d->get_string())};
}

}  // namespace

result<std::vector<saved_alias>> read_state(const fs::path& file) {
    auto doc = read_json_file(file);
    if (!doc && doc.code() != status::parse_error) return doc.error();
    if (!doc || !doc->is_object()) return make_error(status::parse_error, "not a JSON object (torn write?)");
    const auto& o = doc->get_object();
    const auto* version = o.if_contains("version");
    const auto* sum = o.if_contains("sha256");
    const auto* mapping = o.if_contains("mapping");
    if (!version || !version->is_int64() || version->get_int64() != k_state_version)
        return make_error(status::parse_error, "unknown version");
    if (!sum || !sum->is_string() || !mapping || !mapping->is_string())
        return make_error(status::parse_error, "missing sha256 or mapping");
    if (pkg::sha256_hex(mapping->get_string()) != sum->get_string())
        return make_error(status::parse_error, "checksum mismatch (corrupted)");
    boost::system::error_code ec;
    auto m = json::parse(mapping->get_string(), ec);
    if (ec || !m.is_array()) return make_error(status::parse_error, "mapping is not an array");
    std::vector<saved_alias> out;
    for (const auto& a : m.get_array()) {
        if (!a.is_object()) return make_error(status::parse_error, "alias entry is not an object");
        const auto& ao = a.get_object();
        saved_alias s;
        const auto* name = ao.if_contains("name");
        if (!name || !name->is_string()) return make_error(status::parse_error, "alias without a name");
        s.name = std::string(name->get_string());
        auto cur = generation_of(ao.if_contains("current"));
        if (!cur) return cur.error();
        s.current = *cur;
        if (const auto* p = ao.if_contains("previous"); p && !p->is_null()) {
            auto prev = generation_of(p);
            if (!prev) return prev.error();
            s.previous = *prev;
        }
        if (const auto* n = ao.if_contains("next"); n && n->is_number()) s.next_number = json::value_to<std::uint64_t>(*n);
        out.push_back(std::move(s));
    }
    return out;
}

// Under the controller's lock (its mapping_changed hook), so writes keep the order of the changes.
void model_router::persist(const alias_list& aliases) const {
    if (options_.state_file.empty()) return;
    json::array mapping;
    for (const auto& a : aliases) {
        if (!a->current) continue;
        json::object o{{"name", a->name},
                       {"current", generation_json({a->current->number, a->current->dir.string()})},
                       {"next", a->next_number}};
        o["previous"] = a->previous ? json::value(generation_json({a->previous->number, a->previous->dir.string()}))
                                    : json::value(nullptr);
        mapping.push_back(std::move(o));
    }
    const std::string text = json_text(mapping);
    json::object doc{{"version", k_state_version}, {"sha256", pkg::sha256_hex(text)}, {"mapping", text}};
    if (auto w = io::write_file_atomically(options_.state_file, json_text(doc) + "\n"); !w)
        spdlog::error("models: cannot save the alias mapping: {}", w.error().what());
}

}  // namespace calserve::engine
