// `calserve inspect DIR`: what a device sees in a package -- versions, submodels,
// I/O buffers (ping/pong), CSRs, capacities per chip -- and the simulator's modelled
// step times with every latency constant printed (document 004 G7 `inspect`), per decode
// batch profile too.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>
#include <vector>

#include "device/package_spec.hpp"
#include "device/sim/latency_model.hpp"
#include "device/sim/sim_device.hpp"
#include "model/package/capacity.hpp"
#include "tools/command.hpp"

namespace calserve::tools::cmd_inspect {
namespace {
namespace dev = calserve::device;

struct options {
    std::string package;
    std::string config_file;
    std::vector<std::string> overrides;
};

std::string hex(std::uint64_t v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
    return buf;
}

std::string shape(const std::vector<std::int64_t>& s) {
    std::ostringstream out;
    out << '[';
    for (std::size_t i = 0; i < s.size(); ++i) out << (i ? "," : "") << s[i];
    out << ']';
    return out.str();
}

std::string gib(double bytes) {
    std::ostringstream o;
    o.precision(4);
    o << bytes / (1024.0 * 1024.0 * 1024.0) << " GiB";
    return o.str();
}

void print_package(const model::package::package& p, const dev::package_spec& s) {
    std::cout << "package   " << p.root.string() << "\n"
              << "model     " << p.model_name << " (" << p.architecture << "), preset '" << p.preset << "'\n"
              << "runtime   " << p.runtime_name << " " << p.runtime_version << ", manifest schema " << p.schema << "\n"
              << "context   " << p.context << "  batch " << p.batch << "  vocab " << p.vocab << "\n"
              << "topology  " << p.topo.chips << " chip(s) x " << p.topo.calcores_per_chip << " CalCores, tensor parallel "
              << p.topo.tensor_parallel << ", placement " << p.placement << "\n"
              << "reference " << p.reference_model_dir.string() << "\n\nsubmodels\n";
    for (const auto& sm : p.submodels) {
        std::cout << "  " << sm.name << "  role " << to_string(sm.role) << "  type_label '" << sm.type_label << "'  batch "
                  << sm.batch << "  max_tokens " << sm.max_tokens << "  dynamic_d2d " << (sm.dynamic_d2d ? "yes" : "no")
                  << "\n";
        for (const auto* list : {&sm.inputs, &sm.outputs}) {
            for (const auto& t : *list) {
                std::cout << "    " << (list == &sm.inputs ? "in  " : "out ") << t.port << " " << t.name << " "
                          << shape(t.shape) << " " << model::package::to_string(t.type) << " " << t.byte_size
                          << " B  ping " << hex(t.ping_addr) << "  pong " << hex(t.pong_addr) << "  chip " << t.chip << "\n";
            }
        }
        for (const auto& c : sm.csrs) {
            std::cout << "    csr " << c.name << " offset " << hex(c.offset);
            if (sm.batch > 1)
                std::cout << "  rows 0.." << sm.batch - 1 << " at offset + 4*b (last "
                          << hex(c.offset + (sm.batch - 1) * model::package::k_csr_row_stride) << ")";
            std::cout << "\n";
        }
    }
    (void)s;
}

// BF16 V against S8 V on this package (the capacity planner's comparison).
void print_kv_dtypes(const model::package::package& p, const dev::sim::sim_options& so, const config& cfg) {
    namespace pkg = model::package;
    pkg::capacity_limits l;
    l.dram_bytes_per_chip = so.dram_bytes_per_chip;
    l.sram_bytes_per_chip = so.sram_bytes_per_chip;
    l.guard_bytes = static_cast<std::uint64_t>(cfg.integer("device.plan.guard_bytes"));
    constexpr std::uint32_t batches[] = {1, 2, 4, 8, 16};
    const auto c = pkg::compare_kv_dtypes(p, batches, l);
    std::cout << "\nKV dtype  this package: " << pkg::to_string(pkg::package_kv_choice(p)) << "; per chip, bf16 V "
              << c.bf16.bytes_per_token << " B/token vs s8v " << c.s8v.bytes_per_token << " B/token; largest batch at "
              << c.context << " tokens: bf16 " << c.bf16.max_batch_at_context << ", s8v " << c.s8v.max_batch_at_context
              << "\n  largest context (bf16 / s8v):";
    for (std::size_t i = 0; i < c.batches.size(); ++i)
        std::cout << "  b" << c.batches[i] << " " << c.bf16.max_context[i] << " / " << c.s8v.max_context[i];
    std::cout << "\n";
}

void print_capacity(const dev::package_spec& s, const dev::sim::sim_options& so) {
    std::cout << "\nKV layout  " << s.kv.layers << " layers x " << s.kv.kv_heads << " KV heads x (" << s.kv.head_dim
              << " x (K " << s.kv.k_bytes << " B + V " << s.kv.v_bytes << " B) + V scale " << s.kv.v_scale_bytes
              << " B) = " << s.kv.bytes_per_token()
              << " B/token; " << s.kv.slots << " slot(s) x " << s.kv.context << " tokens = " << s.kv.total_bytes() << " B ("
              << gib(static_cast<double>(s.kv.total_bytes())) << "), " << s.kv.total_bytes() / s.chip_count
              << " B per chip; blocks of " << so.kv_block_tokens << " tokens\n\nper-chip memory (configure)\n";
    for (const auto& m : dev::sim::plan_memory(s, so)) {
        std::cout << "  chip " << m.chip << "  DRAM " << m.dram_used << " / " << m.dram_capacity << " B ("
                  << gib(static_cast<double>(m.dram_used)) << " / " << gib(static_cast<double>(m.dram_capacity))
                  << ")  SRAM " << m.sram_used << " / " << m.sram_capacity << " B  "
                  << (m.dram_used <= m.dram_capacity && m.sram_used <= m.sram_capacity ? "fits" : "DOES NOT FIT") << "\n";
    }
}

void print_step(const char* what, const dev::sim::step_breakdown& b, const std::string& suffix = "") {
    std::printf("  %-28s %9.3f ms  (weights %.3f, kv %.3f, sync %.3f, flops %.3f, d2d %.3f, launch %.3f)%s%s\n", what,
                b.total_ms, b.weights_ms, b.kv_ms, b.sync_ms, b.flops_ms, b.d2d_ms, b.launch_ms,
                b.overridden ? "  [device.sim.step_ms override]" : "", suffix.c_str());
}

// One decode step of a batch-B profile, every row at `past` (latency_model::decode_batch_step:
// weights read once, KV read and compute per row, launch and syncs once).
dev::sim::step_breakdown batch_step(const dev::sim::latency_model& m, std::int64_t batch, std::int64_t past) {
    const std::vector<std::int64_t> pasts(static_cast<std::size_t>(batch), past);
    return m.decode_batch_step(pasts, batch);
}

void print_profiles(const dev::package_spec& s, const dev::sim::latency_model& m) {
    std::cout << "\ndecode batch profiles (largest " << s.batch << "; KV region " << s.kv.slots << " x " << s.kv.context
              << " tokens; modelled step with every row at the same past)\n";
    for (const auto& sm : s.submodels) {
        if (sm.kind != dev::submodel_kind::decode) continue;
        std::cout << "  b" << sm.batch << "  " << sm.name << "\n";
        if (sm.has_sampling_head()) {
            // What one step's output copy moves with every live row in each head mode.
            const auto bytes = [&](dev::head_mode mode) {
                return std::uint64_t(sm.batch) * dev::head_row_d2h_bytes(mode, sm.head_k, s.vocab_size);
            };
            std::printf("  %-28s top-k %lld; D2H per full step: logits %llu B (%.3f ms), drawn %llu B (%.3f ms), "
                        "top-k %llu B; head %.3f ms\n",
                        "sampling head", static_cast<long long>(sm.head_k),
                        static_cast<unsigned long long>(bytes(dev::head_mode::logits)), m.d2h_ms(bytes(dev::head_mode::logits)),
                        static_cast<unsigned long long>(bytes(dev::head_mode::sample)), m.d2h_ms(bytes(dev::head_mode::sample)),
                        static_cast<unsigned long long>(bytes(dev::head_mode::top_k)), m.head_ms(sm.batch));
        }
        for (std::int64_t past : {std::int64_t{0}, s.context / 2, s.context - 1}) {
            const auto b = batch_step(m, sm.batch, past);
            const std::string label = "b" + std::to_string(sm.batch) + ", past " + std::to_string(past);
            const double tokens_per_s = b.total_ms > 0 ? static_cast<double>(sm.batch) * 1e3 / b.total_ms : 0.0;
            print_step(label.c_str(), b, "  " + std::to_string(static_cast<long long>(tokens_per_s)) + " tokens/s");
        }
    }
}

void print_latency(const dev::package_spec& s, const dev::sim::latency_constants& c) {
    std::cout << "\nlatency constants\n";
    for (const auto& [k, v] : dev::sim::describe_constants(c)) std::cout << "  " << k << " = " << v << "\n";
    dev::sim::latency_model m(s, c);
    std::cout << "\nmodelled step times\n";
    const std::int64_t ctx = s.context;
    for (std::int64_t past : {std::int64_t{0}, ctx / 2, ctx - 1}) {
        const std::string label = "decode, past " + std::to_string(past);
        print_step(label.c_str(), m.step(dev::submodel_kind::decode, 1, past));
    }
    for (std::int64_t n : {std::int64_t{1}, std::int64_t{128}, std::int64_t{1024}, ctx - 1}) {
        if (n >= ctx) continue;
        const std::string label = "prefill " + std::to_string(n) + " tokens";
        print_step(label.c_str(), m.step(dev::submodel_kind::prefill, n, 0));
    }
    // KV sequence operations (C3 extension; docs/device.md): a prefix cache hit is a seq copy.
    const std::int64_t copied = std::min<std::int64_t>(2048, ctx);
    const std::string copy_label = "kv_copy " + std::to_string(copied) + " tokens";
    std::printf("  %-28s %9.3f ms  (seq copy: KV bytes read + written / DRAM bw; prefill of them %.3f ms)\n",
                copy_label.c_str(), m.kv_copy_ms(copied), m.step(dev::submodel_kind::prefill, copied, 0).total_ms);
    std::printf("  %-28s copy, keep (add, div, state, shift: unsupported)\n", "KV sequence operations");
    std::uint64_t logits = 0;
    if (const auto* d = s.first_of(dev::submodel_kind::decode))
        if (const auto* t = d->output("logits")) logits = t->bytes;
    std::printf("  %-28s %9.3f ms\n  %-28s %9.3f ms\n  %-28s %9.3f ms  (%llu parameter bytes)\n", "H2D decode inputs (8 B)",
                m.h2d_ms(8), "D2H logits", m.d2h_ms(logits), "configure", m.configure_ms(),
                static_cast<unsigned long long>(s.total_parameter_bytes()));
    std::printf("  MoE active weight fraction: decode %.4f, prefill 1024 %.4f\n", m.active_weight_fraction(1),
                m.active_weight_fraction(1024));
    print_profiles(s, m);
}

int run(const options& o) {
    std::optional<std::filesystem::path> file;
    if (!o.config_file.empty()) file = o.config_file;
    auto cfg = config::load(file, o.overrides);
    if (!cfg) {
        std::cerr << "inspect: " << cfg.error().what() << "\n";
        return 2;
    }
    auto pkg = model::package::load_package(o.package);
    if (!pkg) {
        std::cerr << "inspect: " << pkg.error().what() << "\n";
        return 2;
    }
    auto spec = dev::package_spec_from(*pkg);
    if (!spec) {
        std::cerr << "inspect: the device cannot represent this package: " << spec.error().what() << "\n";
        return 2;
    }
    const auto so = dev::sim::sim_options::from_config(*cfg);
    std::cout << "device    sim (CalRT 0.7.6 semantics), board " << so.board_chips << " chip(s) x "
              << so.calcores_per_chip << " CalCores, DRAM " << so.dram_bytes_per_chip << " B + SRAM "
              << so.sram_bytes_per_chip << " B per chip (config device.sim.*)\n";
    print_package(*pkg, *spec);
    print_capacity(*spec, so);
    print_kv_dtypes(*pkg, so, *cfg);
    print_latency(*spec, so.latency.for_package(*spec));
    return 0;
}

const bool registered = register_command("inspect", "show what the device sees in a package, with modelled step times",
                                         [](CLI::App& app) {
                                             auto o = std::make_shared<options>();
                                             app.add_option("package", o->package, "package directory")->required();
                                             app.add_option("--config", o->config_file, "config file");
                                             app.add_option("--set", o->overrides, "key.path=value override (repeatable)");
                                             return [o] { return run(*o); };
                                         });
}  // namespace
}  // namespace calserve::tools::cmd_inspect
