// Checkpoint directory loading (single file or sharded); see weights.hpp.
#include "model/weights/weights.hpp"

#include <algorithm>
#include <boost/json.hpp>
#include <set>

#include "config/read_file.hpp"
#include "model/weights/gguf_model.hpp"
#include "model/weights/stored_rows.hpp"

namespace calserve::model {
namespace {
namespace json = boost::json;

error_info bad(const std::string& msg) { return make_error(status::package_invalid, msg); }

// The shard files named by model.safetensors.index.json, in first-seen order.
result<std::vector<std::filesystem::path>> shards_from_index(const std::filesystem::path& index_path) {
    auto doc = read_json_file(index_path);
    if (!doc && doc.code() != status::parse_error) return doc.error();
    const json::object* root = doc ? doc->if_object() : nullptr;
    const json::value* weight_map = root ? root->if_contains("weight_map") : nullptr;
    if (!weight_map || !weight_map->is_object())
        return bad(index_path.filename().string() + ": not a JSON object with a weight_map");
    std::vector<std::filesystem::path> files;
    std::set<std::string> seen;
    for (const auto& [name, file] : weight_map->as_object()) {
        if (!file.is_string()) return bad(index_path.filename().string() + ": weight_map[" + std::string(name) + "] is not a string");
        std::string f(file.as_string());
        if (f.find('/') != std::string::npos) return bad("shard name " + f + " must be a plain file name");
        if (seen.insert(f).second) files.push_back(index_path.parent_path() / f);
    }
    return files;
}

result<std::vector<std::filesystem::path>> checkpoint_files(const std::filesystem::path& dir) {
    if (!std::filesystem::is_directory(dir)) return make_error(status::not_found, "model directory " + dir.string() + " not found");
    auto index = dir / "model.safetensors.index.json";
    if (std::filesystem::exists(index)) return shards_from_index(index);
    if (std::filesystem::exists(dir / "model.safetensors")) return std::vector{dir / "model.safetensors"};
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(dir))
        if (e.path().extension() == ".safetensors") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    if (files.empty()) return make_error(status::not_found, "no *.safetensors in " + dir.string());
    return files;
}

}  // namespace

result<checkpoint> checkpoint::load(const std::filesystem::path& dir, const io::read_options& opts,
                                    io::read_report* report) {
    if (is_gguf_file(dir)) {
        auto h = read_gguf_header(dir, opts);
        if (!h) return h.error();
        auto f = load_gguf_tensors(dir, *h, opts, report);
        if (!f) return f.error();
        checkpoint c;
        if (auto r = c.add_file(std::move(*f)); !r) return r.error();
        return c;
    }
    auto files = checkpoint_files(dir);
    if (!files) return files.error();
    checkpoint c;
    for (const auto& path : *files) {
        auto f = load_safetensors(path, opts, report);
        if (!f) return f.error();
        if (auto r = c.add_file(std::move(*f)); !r) return r.error();
    }
    return c;
}

void_result checkpoint::add_file(safetensors_file f) {
    const std::size_t file_idx = files_.size();
    for (std::size_t i = 0; i < f.header.tensors.size(); ++i) {
        const auto& t = f.header.tensors[i];
        if (!index_.emplace(t.name, entry{file_idx, i}).second)
            return bad("tensor " + t.name + " appears twice (again in " + f.path.filename().string() + ")");
        total_bytes_ += static_cast<std::int64_t>(t.end - t.begin);
    }
    files_.push_back(std::move(f));
    return {};
}

result<const tensor_info*> checkpoint::find(const std::string& name) const {
    auto it = index_.find(name);
    if (it == index_.end()) return make_error(status::package_invalid, "missing tensor " + name);
    return &files_[it->second.file].header.tensors[it->second.tensor];
}

result<tensor_view> checkpoint::matrix(const std::string& name, std::int64_t rows, std::int64_t cols) const {
    auto t = find(name);
    if (!t) return t.error();
    const tensor_info& info = **t;
    const bool as_vector = rows == 1 && info.shape.size() == 1 && info.shape[0] == cols;
    const bool as_matrix = info.shape.size() == 2 && info.shape[0] == rows && info.shape[1] == cols;
    if (!as_vector && !as_matrix) {
        std::string got;
        for (auto d : info.shape) got += (got.empty() ? "" : ", ") + std::to_string(d);
        return make_error(status::shape_mismatch, "tensor " + name + " has shape [" + got + "], expected [" +
                                                      std::to_string(rows) + ", " + std::to_string(cols) + "]");
    }
    const auto it = index_.find(name);
    return tensor_view{info.type, rows, cols, cols, files_[it->second.file].tensor_data(info)};
}

result<std::vector<float>> checkpoint::vector_f32(const std::string& name, std::int64_t n) const {
    auto m = matrix(name, 1, n);
    if (!m) return m.error();
    std::vector<float> out(static_cast<std::size_t>(n));
    convert_row_to_f32(*m, 0, out.data());
    return out;
}

}  // namespace calserve::model
