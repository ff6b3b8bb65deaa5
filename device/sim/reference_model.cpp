// Default reference-model factory of the simulator (see reference_model.hpp).
#include "device/sim/reference_model.hpp"

#include "model/cpu/transformer.hpp"

namespace calserve::device::sim {

model_factory reference_model_factory(int threads, model::arithmetic arith) {
    return [threads, arith](const package_spec& spec) -> result<std::unique_ptr<model::causal_lm>> {
        if (spec.reference_model_dir.empty())
            return make_error(status::package_invalid, "package " + spec.name + " names no reference model directory");
        if (spec.chip_count > 2)
            return make_error(status::unsupported, "the reference model splits over at most 2 chips");
        model::load_options opts;
        opts.threads = threads;
        opts.tensor_parallel = static_cast<int>(spec.chip_count);
        opts.arith = arith;
        // An S8 V-cache package (1-byte V elements) runs the reference model's S8 V mode.
        opts.v_cache = spec.kv.v_bytes == 1 ? model::v_cache_dtype::s8 : model::v_cache_dtype::bf16;
        return model::load_causal_lm(spec.reference_model_dir, opts);
    };
}

sim_options sim_options_for(const config& cfg, sim_scheduler& scheduler, std::shared_ptr<fault_registry> faults) {
    sim_options o = sim_options::from_config(cfg);
    o.scheduler = &scheduler;
    o.faults = std::move(faults);
    o.make_model = reference_model_factory(static_cast<int>(cfg.integer("device.sim.model_threads")));
    return o;
}

result<std::shared_ptr<sim_device>> open_sim_device(const std::filesystem::path& package_dir, const config& cfg,
                                                    sim_scheduler& scheduler, std::shared_ptr<fault_registry> faults) {
    auto dev = sim_device::create(sim_options_for(cfg, scheduler, std::move(faults)));
    if (auto r = dev->load_package(package_dir); !r) return r.error();
    if (auto r = dev->configure(); !r) return r.error();
    if (auto r = dev->warmup(); !r) return r.error();
    return dev;
}

}  // namespace calserve::device::sim
