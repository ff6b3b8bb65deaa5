// `calserve tokenize` / `calserve detokenize`: line-oriented JSON filters over the
// model tokenizer, for scripts and for checking the server's tokenizer by hand.
//   tokenize:   stdin one JSON string per line  -> stdout one JSON array of ids per line
//   detokenize: stdin one JSON array of ids per line -> stdout one JSON string per line
// No special tokens are added. The tokenizer directory comes from --tokenizer, else
// the shared data lookup (tools/data_paths.hpp). A malformed line stops the run
// with exit code 2 and names the line; stdout keeps the lines already converted.
#include <CLI/CLI.hpp>
#include <boost/json.hpp>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include "config/json_text.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "tools/command.hpp"
#include "tools/data_paths.hpp"

namespace calserve::tools::cmd_tokenize {
namespace {

namespace json = boost::json;

struct options {
    std::string dir;
};

std::shared_ptr<const model::tokenizer> open_tokenizer(const std::string& cmd, const options& o) {
    auto dir = find_tokenizer(o.dir);
    if (!dir) {
        std::cerr << cmd << ": " << dir.error().message << "\n";
        return nullptr;
    }
    auto tok = model::tokenizer::load(*dir);
    if (!tok) {
        std::cerr << cmd << ": " << tok.error().what() << "\n";
        return nullptr;
    }
    return tok.value();
}

int fail_line(const std::string& cmd, std::size_t line, const std::string& why) {
    std::cerr << cmd << ": line " << line << ": " << why << "\n";
    return 2;
}

int run_tokenize(const options& o) {
    auto tok = open_tokenizer("tokenize", o);
    if (!tok) return 2;
    std::string line;
    for (std::size_t n = 1; std::getline(std::cin, line); ++n) {
        boost::system::error_code ec;
        json::value v = json::parse(line, ec);
        if (ec) return fail_line("tokenize", n, "invalid JSON: " + ec.message());
        if (!v.is_string()) return fail_line("tokenize", n, "expected a JSON string");
        auto ids = tok->encode(std::string_view(v.as_string()));
        if (!ids) return fail_line("tokenize", n, ids.error().message);
        json::array out;
        out.reserve(ids->size());
        for (model::token_id id : *ids) out.push_back(id);
        std::cout << json_text(out) << '\n';
    }
    return 0;
}

int run_detokenize(const options& o) {
    auto tok = open_tokenizer("detokenize", o);
    if (!tok) return 2;
    std::string line;
    for (std::size_t n = 1; std::getline(std::cin, line); ++n) {
        boost::system::error_code ec;
        json::value v = json::parse(line, ec);
        if (ec) return fail_line("detokenize", n, "invalid JSON: " + ec.message());
        if (!v.is_array()) return fail_line("detokenize", n, "expected a JSON array of token ids");
        std::vector<model::token_id> ids;
        for (const json::value& x : v.as_array()) {
            if (!x.is_int64() || x.as_int64() < INT32_MIN || x.as_int64() > INT32_MAX) {
                return fail_line("detokenize", n, "token ids must be integers");
            }
            ids.push_back(static_cast<model::token_id>(x.as_int64()));
        }
        auto text = tok->decode(ids);
        if (!text) return fail_line("detokenize", n, text.error().message);
        std::cout << json_text(json::string(*text)) << '\n';
    }
    return 0;
}

command_setup make_setup(bool encode) {
    return [encode](CLI::App& app) {
        auto o = std::make_shared<options>();
        app.add_option("--tokenizer", o->dir,
                       "directory with tokenizer.json + tokenizer_config.json (default: the data lookup)");
        return command_runner([o, encode] { return encode ? run_tokenize(*o) : run_detokenize(*o); });
    };
}

const bool registered_tokenize = register_command(
    "tokenize", "stdin JSON strings (one per line) -> stdout JSON arrays of token ids", make_setup(true));
const bool registered_detokenize = register_command(
    "detokenize", "stdin JSON arrays of token ids (one per line) -> stdout JSON strings", make_setup(false));

}  // namespace
}  // namespace calserve::tools::cmd_tokenize
