// libFuzzer target fuzz_control_line: bytes as they arrive on the control socket,
// cut into lines as its connection loop does (newline-delimited, a trailing CR
// dropped, empty lines skipped, a line over k_max_line_bytes ends the connection),
// each answered by handle_control_line (JSON, the command table, every argument's
// type and range). The target behind it is the real fault registry (what the
// daemon's fault.arm/clear/list reach); the other commands are stubs.
// Properties: no crash, leak, UB or exception; one reply per line, each a JSON
// object with a boolean `ok` and, when false, an `error` object with a `code`.
#include <boost/json.hpp>
#include <cstddef>
#include <cstdint>

#include "device/fault_points.hpp"
#include "net/control_socket.hpp"
#include "tests/fuzz/fuzz_check.hpp"
#include "tests/fuzz/fuzz_support.hpp"

namespace {
using namespace calserve;
namespace json = boost::json;

class registry_target final : public net::control_target {
public:
    result<std::uint64_t> fault_arm(const net::fault_arm_request& r) override {
        auto spec = device::make_fault_spec(r.point, r.mode, r.count, r.probability, r.seed, r.delay_ms,
                                            {r.chip, r.submodel, r.sequence, r.request});
        if (!spec) return spec.error();
        return registry_.arm(std::move(*spec));
    }
    result<std::size_t> fault_clear(const net::fault_clear_request& r) override {
        if (r.id) return registry_.clear_id(*r.id);
        if (r.point) {
            auto point = device::parse_fault_point(*r.point);
            if (!point) return make_error(status::invalid_argument, "unknown fault point: " + *r.point);
            return registry_.clear(*point);
        }
        return registry_.clear();
    }
    std::vector<net::fault_entry> fault_list() override {
        std::vector<net::fault_entry> out;
        for (const auto& a : registry_.list()) {
            net::fault_entry e;
            e.id = a.id;
            e.spec.point = std::string(device::to_string(a.spec.point));
            e.spec.mode = std::string(device::to_string(a.spec.mode));
            e.spec.count = a.spec.count;
            e.spec.submodel = a.spec.match.submodel;
            e.remaining = a.remaining;
            e.fires = a.fires;
            out.push_back(std::move(e));
        }
        return out;
    }
    void_result device_reset() override { return {}; }
    void_result drain() override { return {}; }
    void_result resume() override { return {}; }
    result<std::string> stats() override { return std::string(R"({"device_state":"ready","in_flight":0})"); }
    void_result trace_start(const std::string& path) override {
        if (path.empty()) return make_error(status::invalid_argument, "empty path");
        return {};
    }
    result<std::string> trace_stop() override { return std::string("no trace running"); }

private:
    device::fault_registry registry_{7};
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    constexpr std::size_t k_max_lines = 64;
    registry_target target;
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    for (auto line : fuzz::split(in, '\n', k_max_lines)) {
        if (line.size() > net::k_max_line_bytes) break;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.empty()) continue;
        const std::string reply = net::handle_control_line(target, line);
        boost::system::error_code ec;
        auto v = json::parse(reply, ec);
        CALSERVE_FUZZ_CHECK(!ec && v.is_object(), reply.c_str());
        const auto* ok = v.get_object().if_contains("ok");
        CALSERVE_FUZZ_CHECK(ok && ok->is_bool(), reply.c_str());
        if (!ok->get_bool()) {
            const auto* err = v.get_object().if_contains("error");
            CALSERVE_FUZZ_CHECK(err && err->is_object() && err->get_object().contains("code"), reply.c_str());
        }
    }
    return 0;
}
