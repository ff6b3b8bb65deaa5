// Gate B: parse every present file with its grammar and keep the parsed values.
#include <boost/json.hpp>

#include "config/read_file.hpp"
#include "model/package/gguf.hpp"
#include "model/package/validate_internal.hpp"

namespace calserve::model::package {

namespace json = boost::json;

namespace {

constexpr std::uint64_t k_max_metadata_bytes = 256ull << 20;

void grammar_error(validation_context& c, const std::string& file, const std::string& code, const error_info& e) {
    const bool syntax = e.message.find("syntax:") != std::string::npos;
    c.add(syntax ? "B_YAML_SYNTAX" : code, severity::error, 'B', file, e.message);
}

bool negative_sizes(const submodel_file& f) {
    if (f.batch <= 0 || f.max_seq_len <= 0 || f.chip_nums <= 0) return true;
    for (const auto* list : {&f.inputs, &f.outputs})
        for (const auto& t : *list) {
            if (t.size < 0) return true;
            for (auto d : t.shape)
                if (d <= 0) return true;
        }
    return false;
}

bool negative_sizes(const reservation_file& f) {
    if (f.chip_nums <= 0 || f.calcore_nums <= 0) return true;
    for (const auto& r : f.param_files)
        if (r.size < 0) return true;
    for (const auto& s : f.segments)
        if (s.size < 0 || s.file_offset < 0) return true;
    return false;
}

template <class T>
void keep_unless_negative(validation_context& c, const std::string& file, result<T>&& r, std::optional<T>& slot,
                          const char* code) {
    if (!r) return grammar_error(c, file, code, r.error());
    if (negative_sizes(r.value())) {
        c.add("B_NEGATIVE_SIZE", severity::error, 'B', file, "a size, count or dimension is zero or negative");
        return;
    }
    slot = std::move(r.value());
}

void parse_cmd(validation_context& c, parsed_submodel& s, const layout_entry& e, std::string_view text) {
    if (e.kind == file_kind::cmd_text) {
        auto r = parse_commands_text(text);
        if (!r) return c.add("B_CMD_TEXT_GRAMMAR", severity::error, 'B', e.path, r.error().message);
        s.text_cmds[e.path] = std::move(r.value());
        return;
    }
    auto r = parse_commands_binary(text);
    if (!r) return c.add("B_CMD_BINARY_GRAMMAR", severity::error, 'B', e.path, r.error().message);
    s.bin_cmds[e.path] = std::move(r.value());
}

void parse_elf_file(validation_context& c, parsed_submodel& s, const layout_entry& e, std::string_view bytes) {
    auto r = parse_elf(bytes);
    if (!r) return c.add("B_ELF_INVALID", severity::error, 'B', e.path, r.error().message);
    const bool helper = e.kind == file_kind::cpu_helper;
    const std::uint16_t machine = (helper && e.engine == "x86") ? k_em_x86_64 : k_em_riscv;
    const std::uint16_t type = helper ? k_et_dyn : k_et_exec;
    if (r->machine != machine || r->type != type)
        return c.add("B_ELF_INVALID", severity::error, 'B', e.path, "wrong ELF machine or type");
    if (helper) {
        if (std::find(r->exports.begin(), r->exports.end(), "Process") == r->exports.end())
            return c.add("B_ELF_INVALID", severity::error, 'B', e.path, "D2D helper does not export Process");
        s.helpers[e.engine] = r.value();
    }
}

void parse_submodel_file(validation_context& c, parsed_submodel& s, const layout_entry& e, std::string&& text) {
    switch (e.kind) {
        case file_kind::submodel_reservation:
            return keep_unless_negative(c, e.path, parse_submodel_info(text), s.info, "B_SUBMODEL_INFO_GRAMMAR");
        case file_kind::compile_config: {
            auto r = parse_compile_config(text);
            if (!r) return grammar_error(c, e.path, "B_YAML_SCHEMA", r.error());
            s.compile = std::move(r.value());
            return;
        }
        case file_kind::op_map: {
            auto r = parse_op_map_yaml(text);
            if (!r) return grammar_error(c, e.path, "B_OP_MAP_GRAMMAR", r.error());
            s.ops = std::move(r.value());
            return;
        }
        case file_kind::profparts: {
            auto r = parse_profparts(text);
            if (!r) return c.add("B_PROFPARTS_GRAMMAR", severity::error, 'B', e.path, r.error().message);
            if (s.profparts.size() <= e.chip) s.profparts.resize(e.chip + 1);
            s.profparts[e.chip] = std::move(r.value());
            return;
        }
        case file_kind::cmd_text:
        case file_kind::cmd_binary: return parse_cmd(c, s, e, text);
        case file_kind::ccu_elf:
        case file_kind::cpu_helper: return parse_elf_file(c, s, e, text);
        default: return;
    }
}

std::optional<json::value> parse_json_file(validation_context& c, const std::string& rel, const std::string& text) {
    boost::system::error_code ec;
    auto v = json::parse(text, ec);
    if (ec || !v.is_object()) {
        c.add("B_TOKENIZER_INVALID", severity::error, 'B', rel, "not a JSON object");
        return std::nullopt;
    }
    return v;
}

std::optional<std::uint64_t> json_uint(const json::object& o, std::string_view key) {
    const auto* v = o.if_contains(key);
    if (!v) return std::nullopt;
    if (v->is_int64() && v->get_int64() >= 0) return static_cast<std::uint64_t>(v->get_int64());
    if (v->is_uint64()) return v->get_uint64();
    if (v->is_double() && v->get_double() >= 0 && v->get_double() < 1e18) return static_cast<std::uint64_t>(v->get_double());
    return std::nullopt;
}

void tokenizer_json_facts(tokenizer_facts& t, const json::object& o) {
    std::uint64_t max_id = 0;
    bool any = false;
    if (const auto* m = o.if_contains("model"); m && m->is_object())
        if (const auto* v = m->get_object().if_contains("vocab"); v && v->is_object())
            for (const auto& kv : v->get_object())
                if (kv.value().is_int64()) max_id = std::max<std::uint64_t>(max_id, kv.value().get_int64()), any = true;
    if (const auto* a = o.if_contains("added_tokens"); a && a->is_array())
        for (const auto& tok : a->get_array())
            if (tok.is_object())
                if (auto id = json_uint(tok.get_object(), "id")) max_id = std::max(max_id, *id), any = true;
    if (any) t.vocab_entries = max_id + 1;
}

void parse_tokenizer_file(validation_context& c, const std::string& rel, const std::string& text) {
    const auto name = std::filesystem::path(rel).filename().string();
    if (name.ends_with(".gguf")) {
        auto tokens = vocab_gguf_token_count(text, rel);
        if (!tokens) return c.add("B_TOKENIZER_INVALID", severity::error, 'B', rel, tokens.error().message);
        c.tok.gguf_tokens = *tokens;
        return;
    }
    if (!name.ends_with(".json")) return;
    auto v = parse_json_file(c, rel, text);
    if (!v) return;
    const auto& o = v->get_object();
    if (name == "tokenizer.json") tokenizer_json_facts(c.tok, o);
    if (name == "tokenizer_config.json") c.tok.model_max_length = json_uint(o, "model_max_length");
    if (name == "config.json") {
        c.tok.config_vocab = json_uint(o, "vocab_size");
        c.tok.config_max_positions = json_uint(o, "max_position_embeddings");
        c.tok.config_experts = json_uint(o, "num_experts");
        if (const auto* t = o.if_contains("model_type"); t && t->is_string()) c.tok.config_model_type = t->get_string();
    }
}

void parse_root_file(validation_context& c, const layout_entry& e, std::string&& text) {
    switch (e.kind) {
        case file_kind::model_reservation:
            return keep_unless_negative(c, e.path, parse_model_reservation(text), c.reservation, "B_RESERVATION_GRAMMAR");
        case file_kind::hparam: {
            auto r = parse_hparam(text);
            if (!r) return grammar_error(c, e.path, "B_YAML_SCHEMA", r.error());
            c.hparam = std::move(r.value());
            return;
        }
        case file_kind::model_yaml: {
            auto r = parse_model_yaml(text);
            if (!r) return grammar_error(c, e.path, "B_YAML_SCHEMA", r.error());
            c.yaml = std::move(r.value());
            return;
        }
        case file_kind::version_py: {
            auto r = parse_version_py(text);
            if (!r) return c.add("B_VERSION_PY_GRAMMAR", severity::error, 'B', e.path, r.error().message);
            c.version = std::move(r.value());
            return;
        }
        case file_kind::tokenizer: return parse_tokenizer_file(c, e.path, text);
        default: return;
    }
}

void reference_model_facts(validation_context& c) {
    if (c.pkg.reference_model_dir.empty()) return;
    auto v = read_json_file(c.pkg.reference_model_dir / "config.json");
    if (v && v->is_object()) c.tok.reference_vocab = json_uint(v->get_object(), "vocab_size");
}

}  // namespace

void gate_grammar(validation_context& c) {
    for (const auto& m : c.pkg.submodels) c.subs.push_back({&m, {}, {}, {}, {}, {}, {}, {}});
    for (const auto& e : c.layout) {
        if (e.kind == file_kind::param_block || !c.readable.contains(e.path)) continue;
        auto text = read_text_file(c.root / e.path, k_max_metadata_bytes);
        if (!text) {
            c.add("A_IO_ERROR", severity::error, 'B', e.path, text.error().message);
            continue;
        }
        if (e.sub) {
            for (auto& s : c.subs)
                if (s.manifest == e.sub) parse_submodel_file(c, s, e, std::move(text.value()));
        } else {
            parse_root_file(c, e, std::move(text.value()));
        }
    }
    reference_model_facts(c);
}

}  // namespace calserve::model::package
