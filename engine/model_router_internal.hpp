#pragma once
// The model router's records of aliases and generations, shared by its sources:
// model_router.cpp (start-up, housekeeping), model_router_generations.cpp (the
// generation state machine: load, switch, rollback, unload), model_router_state.cpp
// (the state file) and model_router_engine.cpp (the `engine` interface: routing and
// the board-wide view). Every field of a generation or an alias is guarded by the
// router's mutex.
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/model_router.hpp"
#include "engine/serving_engine.hpp"

namespace calserve::actors {

using clock_type = std::chrono::steady_clock;

// How often the housekeeper looks at draining generations (also the slice in which a
// load's waits notice a stopping daemon).
constexpr auto k_housekeeping_period = std::chrono::milliseconds(20);

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

struct model_router::generation {
    std::string alias;
    std::uint64_t number = 0;
    std::filesystem::path dir;
    bool cpu = false;
    std::vector<std::uint32_t> chips;
    std::vector<std::uint64_t> bytes;   // resident bytes per chip (guard excluded)
    generation_state state = generation_state::loading;
    std::string reason;
    std::shared_ptr<serving_engine> engine;
    bool keep = false;
    double switch_ms = 0;
    double drain_ms = 0;                // its tail: switch away to the last request done
    std::int64_t tail_requests = 0;     // requests in flight when it started draining
    clock_type::time_point drain_since{}, grave_since{};
};

struct model_router::alias {
    std::string name;
    std::vector<std::shared_ptr<generation>> generations;
    std::shared_ptr<generation> current, previous;
    std::uint64_t next_number = 1;
    std::vector<std::uint32_t> chips;   // models.NAME.chips at start-up, reused by its loads
};

}  // namespace calserve::actors
