// load_package: manifest plus the parameter segments of the reservation file.
#include <fstream>
#include <sstream>

#include "model/package/manifest.hpp"
#include "model/package/package.hpp"

namespace calserve::model::package {

result<package> load_package(const std::filesystem::path& dir) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec))
        return make_error(status::not_found, "package directory not found: " + dir.string());
    const auto path = dir / k_manifest_file;
    std::ifstream in(path, std::ios::binary);
    if (!in) return make_error(status::package_invalid, "missing " + path.string());
    std::ostringstream text;
    text << in.rdbuf();
    if (!in.good() && !in.eof()) return make_error(status::io_error, "cannot read " + path.string());
    auto root = std::filesystem::absolute(dir, ec);
    return parse_manifest(text.str(), ec ? dir : root);
}

}  // namespace calserve::model::package
