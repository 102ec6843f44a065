// close(wait, force) in every variant, with every combination of outstanding
// lifetimes: an active lease, a pending lease whose work finishes, a pending
// lease whose work never finishes, a hold, a reservation and an entered scope
// (which holds a reservation). 2^6 combinations x 4 variants, each checked
// against the rule stated in manager.hpp, exactly: the outcome, what stays
// after a refused close, the diagnostics, and that a closed manager refuses
// every call while its lifetimes release quietly.
#include <gtest/gtest.h>

#include <bitset>
#include <optional>

#include "support.hpp"

namespace fhelium::residency {
namespace {

using namespace testing;

enum Outstanding { active_lease, finishing_lease, stuck_lease, hold_lifetime, reservation_lifetime, scope_lifetime };
constexpr int kinds = 6;

struct Case {
  std::bitset<kinds> outstanding;
  bool wait = false;
  bool force = false;

  std::string name() const {
    static const char* names[] = {"active-lease", "finishing-lease", "stuck-lease", "hold", "reservation", "scope"};
    std::string text = std::string("close(wait=") + (wait ? "true" : "false") + ", force=" + (force ? "true" : "false") +
                       ") with {";
    for (int kind = 0; kind < kinds; ++kind) {
      if (outstanding[kind]) text += std::string(text.back() == '{' ? "" : ", ") + names[kind];
    }
    return text + "}";
  }
};

struct World {
  SimulatedFixture fixture = make_fixture();
  ResidencyManager& manager = *fixture.manager;
  harness::SimulatedRuntime& runtime = *fixture.runtime;
  ResidencyHandle a = manager.adopt(make_value(8, 1.0f), std::nullopt, ReplicaMode::replicable);
  std::optional<ResidencyLease> active;
  std::optional<ResidencyLease> finishing;
  std::optional<ResidencyLease> stuck;
  std::optional<ResidencyHold> hold;
  std::optional<ResidencyReservation> reservation;
  std::optional<ResidencyScope> scope;

  explicit World(const Case& c) {
    manager.ensure(a, CUDA0);
    if (c.outstanding[active_lease]) active.emplace(manager.acquire({a}, PAGEABLE_HOST));
    if (c.outstanding[finishing_lease]) {
      const c10::Stream stream = runtime.stream(0, 1);
      finishing.emplace(manager.acquire({a}, CUDA0, stream));
      runtime.enqueue(stream, 100);
      finishing->release(false);  // pending for 100 ns more
    }
    if (c.outstanding[stuck_lease]) {
      const c10::Stream stream = runtime.stream(0, 2);
      stuck.emplace(manager.acquire({a}, CUDA0, stream));
      runtime.enqueue(stream, harness::SimulatedRuntime::never);
      stuck->release(false);  // pending for ever
    }
    if (c.outstanding[hold_lifetime]) hold.emplace(manager.hold({a}, CUDA0));
    if (c.outstanding[reservation_lifetime]) reservation.emplace(manager.reserve(CUDA1, 64, "workspace"));
    if (c.outstanding[scope_lifetime]) {
      scope.emplace(manager.scope(ResidencyPlan{"layer", {}, {}, {MemoryReservation(PINNED_HOST, 32, "act")}}));
      scope->enter();
    }
  }
};

std::vector<Case> every_case() {
  std::vector<Case> cases;
  for (unsigned mask = 0; mask < (1u << kinds); ++mask) {
    for (const bool wait : {false, true}) {
      for (const bool force : {false, true}) cases.push_back(Case{std::bitset<kinds>(mask), wait, force});
    }
  }
  return cases;
}

TEST(CloseVariants, EveryVariantWithEveryCombinationOfLifetimesFollowsTheRule) {
  int refused = 0, closed = 0;
  for (const Case& c : every_case()) {
    SCOPED_TRACE(c.name());
    World world(c);
    const std::size_t diagnostics_before = world.manager.diagnostics().size();
    // What remains when the check runs: waiting finishes the finishing lease;
    // the stuck one stays pending either way; without waiting nothing has
    // completed yet (no time passed).
    const bool remains = c.outstanding[active_lease] || c.outstanding[stuck_lease] || c.outstanding[hold_lifetime] ||
                         c.outstanding[reservation_lifetime] || c.outstanding[scope_lifetime] ||
                         (c.outstanding[finishing_lease] && !c.wait);
    const ResidencySnapshot before = world.manager.snapshot();
    bool threw_in_use = false;
    try {
      world.manager.close(c.wait, c.force);
    } catch (const ResidencyInUseError& error) {
      threw_in_use = true;
      const std::string message = error.what();
      EXPECT_NE(message.find("cannot close with active or pending lifetimes"), std::string::npos) << message;
    }
    EXPECT_EQ(threw_in_use, remains && !c.force);
    const std::size_t new_diagnostics = world.manager.diagnostics().size() - diagnostics_before;
    // Waiting on work that never finishes is reported; a forced close reports
    // what it cleared and each consumer stream it could not synchronize.
    const std::size_t expected_diagnostics = (c.wait && c.outstanding[stuck_lease] ? 1 : 0) +
                                             (c.force && remains ? 1 : 0) +
                                             (c.force && c.outstanding[stuck_lease] ? 1 : 0);
    EXPECT_EQ(new_diagnostics, expected_diagnostics);

    if (threw_in_use) {
      ++refused;
      EXPECT_FALSE(world.manager.closed());
      // A refused close changed nothing but what waiting finished.
      const ResidencySnapshot after = world.manager.snapshot();
      EXPECT_EQ(after.values.size(), before.values.size());
      EXPECT_EQ(after.reservations.size(), before.reservations.size());
      EXPECT_EQ(after.location(CUDA0)->hold_count, before.location(CUDA0)->hold_count);
      const std::int64_t pending =
          (c.outstanding[stuck_lease] ? 1 : 0) + (c.outstanding[finishing_lease] && !c.wait ? 1 : 0);
      EXPECT_EQ(after.location(CUDA0)->pending_event_count, pending);
      EXPECT_EQ(after.location(PAGEABLE_HOST)->use_count, c.outstanding[active_lease] ? 1 : 0);
      continue;
    }
    ++closed;
    EXPECT_TRUE(world.manager.closed());
    EXPECT_THROW(world.manager.snapshot(), ResidencyClosedError);
    EXPECT_THROW(world.manager.state_version(), ResidencyClosedError);
    EXPECT_THROW(world.manager.ensure(world.a, CUDA1), ResidencyClosedError);
    EXPECT_THROW(world.manager.reserve(CUDA0, 1, "late"), ResidencyClosedError);
    EXPECT_NO_THROW(world.manager.close(c.wait, c.force));  // idempotent
    // Lifetimes of a closed manager release and destroy quietly.
    const std::size_t diagnostics_closed = world.manager.diagnostics().size();
    if (world.active) {
      EXPECT_THROW(world.active->value(world.a), ResidencyLifetimeClosedError);
      EXPECT_NO_THROW(world.active->release());
    }
    if (world.hold) {
      EXPECT_NO_THROW(world.hold->release());
    }
    if (world.reservation) {
      EXPECT_NO_THROW(world.reservation->release());
    }
    if (world.scope) {
      EXPECT_NO_THROW(world.scope.reset());
    }
    world.stuck.reset();
    world.finishing.reset();
    EXPECT_EQ(world.manager.diagnostics().size(), diagnostics_closed);
  }
  EXPECT_EQ(refused + closed, 256);
  EXPECT_GT(refused, 0);
  EXPECT_GT(closed, 0);
}

}  // namespace
}  // namespace fhelium::residency
