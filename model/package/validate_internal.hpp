#pragma once
//! Shared state of one validation run: the manifest view, every parsed file and
//! the report being filled. Internal to the validator's translation units.
//! Invariant: a parsed_* optional is set only when its file was present and its
//! grammar check (gate B) passed, so later gates never see half-parsed data.
#include <optional>
#include <set>

#include "model/package/layout.hpp"
#include "model/package/metadata.hpp"
#include "model/package/op_map.hpp"
#include "model/package/validate.hpp"

namespace calserve::model::package {

struct parsed_submodel {
    const submodel* manifest = nullptr;
    std::optional<submodel_file> info;
    std::optional<compile_config> compile;
    std::optional<op_map> ops;
    std::vector<std::optional<std::vector<op_entry>>> profparts;  // per chip
    std::map<std::string, command_stream> text_cmds;              // by path
    std::map<std::string, command_stream> bin_cmds;               // by path (text path for pairing)
    std::map<std::string, elf_info> helpers;                      // libcpu_*.so by engine
};

struct tokenizer_facts {
    std::optional<std::uint64_t> model_max_length;   // tokenizer_config.json
    std::optional<std::uint64_t> vocab_entries;      // tokenizer.json model.vocab + added tokens
    std::optional<std::uint64_t> config_vocab;       // config.json
    std::optional<std::uint64_t> config_max_positions;
    std::string config_model_type;
    std::optional<std::uint64_t> config_experts;     // config.json num_experts (absent: dense)
    std::optional<std::uint64_t> gguf_tokens;
    std::optional<std::uint64_t> reference_vocab;    // reference model config.json
};

struct validation_context {
    std::filesystem::path root;
    validate_options opt;
    package pkg;
    validation_report* report = nullptr;
    std::vector<layout_entry> layout;
    std::set<std::string> readable;  // present with the expected size

    std::optional<reservation_file> reservation;
    std::optional<hparam_file> hparam;
    std::optional<model_yaml> yaml;
    std::optional<std::map<std::string, std::string>> version;
    std::vector<parsed_submodel> subs;
    tokenizer_facts tok;

    void add(std::string code, severity s, char gate, std::string file, std::string message) {
        report->findings.push_back({std::move(code), s, gate, std::move(file), std::move(message)});
    }
    parsed_submodel* sub(submodel_role r) {
        for (auto& s : subs)
            if (s.manifest->role == r) return &s;
        return nullptr;
    }
};

void gate_inventory(validation_context& c);
void gate_grammar(validation_context& c);
void gate_cross(validation_context& c);
void gate_semantics(validation_context& c);
void gate_capacity(validation_context& c);
void gate_reproducibility(validation_context& c);
void compute_figures(validation_context& c);

}  // namespace calserve::model::package
