#include "tools/candidate_spec.hpp"

#include "tools/data_paths.hpp"

namespace calserve::tools {

result<candidate_spec> parse_candidate(const std::string& spec) {
    auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0)
        return make_error(status::invalid_argument, "--candidate \"" + spec + "\": expected LABEL=ITEM[,ITEM]...");
    candidate_spec c;
    c.label = spec.substr(0, eq);
    std::string rest = spec.substr(eq + 1);
    for (std::size_t at = 0; at <= rest.size();) {
        auto comma = rest.find(',', at);
        std::string item = rest.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
        at = comma == std::string::npos ? rest.size() + 1 : comma + 1;
        if (item.empty()) continue;
        if (item.starts_with("package:")) {
            c.package_dir = item.substr(8);
        } else if (item.starts_with("preset:")) {
            auto dir = ensure_preset_package(item.substr(7));
            if (!dir) return dir.error();
            c.package_dir = *dir;
        } else if (item.find('=') != std::string::npos) {
            c.overrides.push_back(item);
        } else {
            return make_error(status::invalid_argument, "--candidate item \"" + item + "\": package:DIR, preset:NAME or key=value");
        }
    }
    return c;
}

}  // namespace calserve::tools
