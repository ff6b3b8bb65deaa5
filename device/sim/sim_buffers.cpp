// Simulated NPU: per-submodel ping/pong buffers, slicing, CSR registers and outputs.
#include <cstring>

#include "device/sim/sim_device.hpp"

namespace calserve::device::sim {

result<std::size_t> sim_device::find_index(std::string_view submodel) const {
    for (std::size_t i = 0; i < spec_.submodels.size(); ++i) {
        if (spec_.submodels[i].name == submodel) return i;
    }
    return make_error(status::submodel_not_found, "no submodel named exactly '" + std::string(submodel) + "'");
}

std::int64_t sim_device::tokens_of(const submodel_desc& sm, const buffer_set& b) const {
    return b.sliced_tokens < 0 ? sm.max_tokens : b.sliced_tokens;
}

namespace {
// Bytes one token occupies in an input (its shape divided by the token dimension).
std::uint64_t bytes_per_token(const tensor_desc& t, std::int64_t max_tokens) {
    return t.bytes / static_cast<std::uint64_t>(max_tokens > 0 ? max_tokens : 1);
}

void_result slot_idle(const std::optional<job_id>& busy, slot s) {
    if (busy) return make_error(status::invalid_argument, std::string("slot ") + std::string(to_string(s)) +
                                                              " has a job in flight; its buffers are the device's");
    return {};
}
}  // namespace

void_result sim_device::slice(std::string_view submodel, slot s, std::int64_t tokens) {
    std::lock_guard lock(mutex_);
    if (auto r = check_usable(false); !r) return r;
    auto index = find_index(submodel);
    if (!index) return index.error();
    if (auto r = slot_idle(slot_job_[index_of(s)], s); !r) return r;
    const auto& sm = spec_.submodels[*index];
    if (tokens < 1 || tokens > sm.max_tokens)
        return make_error(status::slice_out_of_range, "slice of " + std::to_string(tokens) + " tokens outside [1, " +
                                                          std::to_string(sm.max_tokens) + "] of " + sm.name);
    auto& b = buffers(*index, s);
    b.sliced_tokens = tokens;
    return {};
}

void_result sim_device::write_input(std::string_view submodel, slot s, std::string_view tensor,
                                    std::span<const std::byte> data) {
    std::lock_guard lock(mutex_);
    if (auto r = check_usable(false); !r) return r;
    auto index = find_index(submodel);
    if (!index) return index.error();
    if (auto r = slot_idle(slot_job_[index_of(s)], s); !r) return r;
    const auto& sm = spec_.submodels[*index];
    std::size_t k = 0;
    while (k < sm.inputs.size() && sm.inputs[k].name != tensor) ++k;
    if (k == sm.inputs.size())
        return make_error(status::invalid_argument, sm.name + " has no input named '" + std::string(tensor) + "'");
    auto& b = buffers(*index, s);
    const std::uint64_t expected = bytes_per_token(sm.inputs[k], sm.max_tokens) * tokens_of(sm, b);
    if (data.size() != expected)
        return make_error(status::slice_out_of_range, sm.name + "/" + std::string(tensor) + ": " +
                                                          std::to_string(data.size()) + " B written, the slice of " +
                                                          std::to_string(tokens_of(sm, b)) + " tokens holds " +
                                                          std::to_string(expected) + " B");
    const fault_site site{1u << sm.inputs[k].chip, sm.name, {}, {}};
    if (options_.faults->check(fault_point::h2d_error, site)) {
        set_state(device_state::faulted, "injected h2d_error");
        return make_error(status::h2d_error, "injected h2d_error on " + sm.name + "/" + std::string(tensor));
    }
    std::memcpy(b.inputs[k].data(), data.data(), data.size());
    if (!b.written[k]) b.written_bytes += data.size();
    b.written[k] = true;
    return {};
}

void_result sim_device::write_csr(std::string_view submodel, slot s, std::string_view csr, std::uint32_t value) {
    return write_csr_row(submodel, s, csr, 0, value);
}

void_result sim_device::write_csr_row(std::string_view submodel, slot s, std::string_view csr, std::int64_t row,
                                      std::uint32_t value) {
    std::lock_guard lock(mutex_);
    if (auto r = check_usable(false); !r) return r;
    auto index = find_index(submodel);
    if (!index) return index.error();
    if (auto r = slot_idle(slot_job_[index_of(s)], s); !r) return r;
    auto& b = buffers(*index, s);
    if (row < 0 || row >= static_cast<std::int64_t>(b.csr_cur.size()))
        return make_error(status::bad_csr, "CSR row " + std::to_string(row) + " outside the batch of " +
                                               std::to_string(b.csr_cur.size()) + " of " + std::string(submodel));
    const auto r = static_cast<std::size_t>(row);
    if (csr == k_csr_cur_seq_len) {
        b.csr_cur[r] = value;
    } else if (csr == k_csr_past_kv_len) {
        b.csr_past[r] = value;
    } else {
        return make_error(status::bad_csr, "no CSR register named '" + std::string(csr) + "'");
    }
    return {};
}

result<std::span<const std::byte>> sim_device::output(std::string_view submodel, slot s,
                                                      std::string_view tensor) const {
    std::lock_guard lock(mutex_);
    auto k = output_index(submodel, s, tensor);
    if (!k) return k.error();
    auto index = find_index(submodel);
    return std::span<const std::byte>(buffers(*index, s).outputs[*k]);
}

void_result sim_device::read_output(std::string_view submodel, slot s, std::string_view tensor,
                                    std::vector<std::byte>& host) {
    std::lock_guard lock(mutex_);
    auto k = output_index(submodel, s, tensor);
    if (!k) return k.error();
    auto& b = buffers(*find_index(submodel), s);
    b.outputs[*k].swap(host);
    b.output_valid = false;  // consumed: the next completed job writes it again
    return {};
}

// mutex_ held: which output of the slot `tensor` is, once its job completed and before it was read.
result<std::size_t> sim_device::output_index(std::string_view submodel, slot s, std::string_view tensor) const {
    auto index = find_index(submodel);
    if (!index) return index.error();
    if (auto r = slot_idle(slot_job_[index_of(s)], s); !r) return r.error();
    const auto& sm = spec_.submodels[*index];
    const auto& b = buffers(*index, s);
    for (std::size_t k = 0; k < sm.outputs.size(); ++k) {
        if (sm.outputs[k].name != tensor) continue;
        if (!b.output_valid)
            return make_error(status::not_found, sm.name + "/" + std::string(tensor) + " holds no completed job's output");
        return k;
    }
    return make_error(status::invalid_argument, sm.name + " has no output named '" + std::string(tensor) + "'");
}

}  // namespace calserve::device::sim
