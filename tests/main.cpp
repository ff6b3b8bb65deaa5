#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include "tests/support/test_paths.hpp"

namespace {
// Scratch directories live as long as the run: removed when it passes, named when it fails.
struct ScratchCleanup : Catch::TestEventListenerBase {
    using TestEventListenerBase::TestEventListenerBase;
    void testRunEnded(const Catch::TestRunStats& stats) override {
        const bool passed = stats.totals.assertions.failed == 0 && stats.totals.testCases.failed == 0;
        for (const auto& dir : calserve::test::end_scratch(passed))
            Catch::cerr() << "scratch kept: " << dir.string() << '\n';
    }
};
}  // namespace
CATCH_REGISTER_LISTENER(ScratchCleanup)
