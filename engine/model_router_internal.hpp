#pragma once
// What the model router's sources share: model_router.cpp (start-up, the hooks it
// gives the generation_controller, housekeeping), model_router_state.cpp (the state
// file) and model_router_engine.cpp (the `engine` interface: routing and the
// board-wide view). The records of aliases and generations are the controller's.
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/model_router.hpp"
#include "engine/serving_engine.hpp"

namespace calserve::engine {

// The state file's mapping, as start-up restores it (model_router_state.cpp).
struct saved_generation {
    std::uint64_t number = 0;
    std::string dir;
};
struct saved_alias {
    std::string name;
    saved_generation current;
    std::optional<saved_generation> previous;
    std::uint64_t next_number = 1;
};
// The mapping in `file`, or why it is unusable (missing, torn, corrupt, unknown version).
result<std::vector<saved_alias>> read_state(const std::filesystem::path& file);

}  // namespace calserve::engine
