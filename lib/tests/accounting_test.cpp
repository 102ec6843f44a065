// Budgets, reservations and peaks at the edges.
#include <gtest/gtest.h>

#include <limits>

#include "support.hpp"

namespace fhelium::residency {
namespace {

using namespace testing;

TEST(Budget, ExactlyFullIsAdmittedAndOneByteOverIsRefused) {
  auto fixture = make_fixture({{CUDA0, 128}});
  ResidencyManager& manager = *fixture.manager;
  const ResidencyHandle a = manager.adopt(make_value(16));  // 64 bytes
  const ResidencyHandle b = manager.adopt(make_value(16, 9.0f));
  auto reservation = manager.reserve(CUDA0, 63, "workspace");
  manager.move(a, CUDA0);  // 64 + 63 = 127 of 128
  ResidencyLocationSnapshot state = location_state(manager, CUDA0);
  EXPECT_EQ(state.remaining_budget_bytes, 1);
  const ResidencySnapshot before = manager.snapshot();
  try {
    manager.move(b, CUDA0);
    FAIL() << "expected a budget error";
  } catch (const ResidencyBudgetError& error) {
    EXPECT_EQ(error.location(), CUDA0);
    EXPECT_EQ(error.budget_bytes(), 128);
    EXPECT_EQ(error.used_bytes(), 64);
    EXPECT_EQ(error.reserved_bytes(), 63);
    EXPECT_EQ(error.requested_bytes(), 64);
    EXPECT_NE(std::string(error.what()).find("cuda:0"), std::string::npos);
  }
  EXPECT_EQ(resident_at(manager, b), std::vector<ResidencyLocation>{PAGEABLE_HOST});
  EXPECT_EQ(fixture.runtime->live_bytes(CUDA0), 64);  // nothing was allocated for b
  reservation.release();
  manager.move(b, CUDA0);  // exactly full
  state = location_state(manager, CUDA0);
  EXPECT_EQ(state.used_bytes, 128);
  EXPECT_EQ(state.remaining_budget_bytes, 0);
  EXPECT_EQ(state.peak_used_bytes, 128);
  EXPECT_EQ(state.peak_charged_bytes, 128);
  EXPECT_THROW(manager.reserve(CUDA0, 1, "one more"), ResidencyBudgetError);
  EXPECT_NO_THROW(manager.reserve(CUDA0, 0, "nothing").release());
}

TEST(Budget, UnbudgetedLocationsReportNoBudgetOrRemaining) {
  auto fixture = make_fixture();
  fixture.manager->adopt(make_value(4));
  const ResidencyLocationSnapshot state = location_state(*fixture.manager, PAGEABLE_HOST);
  EXPECT_FALSE(state.budget_bytes.has_value());
  EXPECT_FALSE(state.remaining_budget_bytes.has_value());
  EXPECT_EQ(state.used_bytes, 16);
}

TEST(Budget, ReconstructionChargesTheSourceBudgetWhileLoading) {
  auto fixture = make_fixture({{PAGEABLE_HOST, 300}});
  ResidencyManager& manager = *fixture.manager;
  auto reservation = manager.reserve(PAGEABLE_HOST, 100, "other");
  std::int64_t reserved_during_load = -1;
  ResidencyManager* observed = &manager;
  const ResidencyHandle lazy = manager.register_source(
      ResidencyValueSpec("Blob", 256, 256, ReplicaMode::exclusive, Recoverability::reconstructible), [&] {
        // The manager rejects calls during load, so observe through the error path.
        EXPECT_THROW(observed->snapshot(), ResidencyReentrancyError);
        reserved_during_load = 1;
        return make_value(64);
      });
  // 100 reserved + 256 temporary > 300: the load is refused before it starts.
  EXPECT_THROW(manager.ensure(lazy, CUDA0), ResidencyBudgetError);
  EXPECT_EQ(reserved_during_load, -1);
  reservation.release();
  manager.ensure(lazy, CUDA0);
  EXPECT_EQ(reserved_during_load, 1);
  const ResidencyLocationSnapshot host = location_state(manager, PAGEABLE_HOST);
  EXPECT_EQ(host.reserved_bytes, 0);
  EXPECT_EQ(host.peak_charged_bytes, 256);
  EXPECT_EQ(host.peak_used_bytes, 0);
}

TEST(Peaks, PeakUsedExcludesReservationsAndPeaksNeverFall) {
  auto fixture = make_fixture({{PAGEABLE_HOST, 1000}});
  ResidencyManager& manager = *fixture.manager;
  const ResidencyHandle value = manager.adopt(make_value(25));  // 100 bytes
  {
    auto reservation = manager.reserve(PAGEABLE_HOST, 400, "burst");
    const ResidencyLocationSnapshot state = location_state(manager, PAGEABLE_HOST);
    EXPECT_EQ(state.reserved_bytes, 400);
    EXPECT_EQ(state.reservation_count, 1);
    EXPECT_EQ(state.remaining_budget_bytes, 500);
    EXPECT_EQ(state.peak_used_bytes, 100);
    EXPECT_EQ(state.peak_charged_bytes, 500);
    const ResidencySnapshot snapshot = manager.snapshot();
    ASSERT_EQ(snapshot.reservations.size(), 1u);
    EXPECT_EQ(snapshot.reservations[0].label, "burst");
    EXPECT_EQ(snapshot.reservations[0].nbytes, 400);
  }
  manager.discard(value);
  ResidencyLocationSnapshot state = location_state(manager, PAGEABLE_HOST);
  EXPECT_EQ(state.used_bytes, 0);
  EXPECT_EQ(state.reserved_bytes, 0);
  EXPECT_EQ(state.peak_used_bytes, 100);
  EXPECT_EQ(state.peak_charged_bytes, 500);
  EXPECT_EQ(state.remaining_budget_bytes, 1000);
}

TEST(Reservations, ValidateArgumentsAndRegisterTheirLocation) {
  auto fixture = make_fixture();
  ResidencyManager& manager = *fixture.manager;
  EXPECT_THROW(manager.reserve(CUDA0, -1, "x"), std::invalid_argument);
  EXPECT_THROW(manager.reserve(CUDA0, 1, ""), std::invalid_argument);
  EXPECT_THROW(manager.reserve(cuda_location(3), 1, "x"), std::invalid_argument);
  EXPECT_TRUE(manager.locations().empty());
  auto reservation = manager.reserve(CUDA1, 10, "kv");
  EXPECT_EQ(manager.locations(), std::vector<ResidencyLocation>{CUDA1});
  EXPECT_TRUE(reservation.active());
  EXPECT_EQ(reservation.nbytes(), 10);
  EXPECT_EQ(reservation.label(), "kv");
  const std::uint64_t version = manager.state_version();
  reservation.release();
  reservation.release();  // idempotent
  EXPECT_FALSE(reservation.active());
  EXPECT_EQ(manager.state_version(), version + 1);
  EXPECT_EQ(location_state(manager, CUDA1).reserved_bytes, 0);
}

TEST(Snapshot, CountsMatchEntriesAndCudaLocationsCarryAllocatorMetrics) {
  auto fixture = make_fixture();
  ResidencyManager& manager = *fixture.manager;
  const ResidencyHandle a = manager.adopt(make_value(4), std::nullopt, ReplicaMode::replicable);
  const ResidencyHandle b = manager.adopt(make_value(8));
  manager.ensure(a, CUDA0);
  manager.move(b, CUDA0);
  auto hold = manager.hold({a, b}, CUDA0);
  auto lease = manager.acquire({a}, CUDA0, fixture.runtime->stream(0));
  const ResidencySnapshot snapshot = manager.snapshot();
  const ResidencyLocationSnapshot* cuda = snapshot.location(CUDA0);
  ASSERT_NE(cuda, nullptr);
  EXPECT_EQ(cuda->value_count, 2);
  EXPECT_EQ(cuda->hold_count, 2);
  EXPECT_EQ(cuda->use_count, 1);
  EXPECT_EQ(cuda->used_bytes, 48);
  EXPECT_EQ(cuda->allocator_allocated_bytes, 48);
  EXPECT_EQ(cuda->allocator_reserved_bytes, 48);
  EXPECT_FALSE(snapshot.location(PAGEABLE_HOST)->allocator_allocated_bytes.has_value());
  EXPECT_EQ(snapshot.manager_id, manager.manager_id());
  EXPECT_EQ(snapshot.values.size(), 2u);
  EXPECT_EQ(snapshot.values[0].handle, a);  // registration order
}


// Byte counts never overflow: a charge that would push used + reserved past
// INT64_MAX is refused like a budget, before any change, with or without a
// budget, in execution as in explain.
TEST(Budget, ChargesPastTheLargestInt64AreRefusedBeforeAnyChange) {
  constexpr std::int64_t huge = 4'000'000'000'000'000'000;
  constexpr std::int64_t limit = std::numeric_limits<std::int64_t>::max();
  for (const bool budgeted : {false, true}) {
    auto fixture = budgeted ? make_fixture({{PAGEABLE_HOST, limit}}) : make_fixture();
    ResidencyManager& manager = *fixture.manager;
    ResidencyReservation first = manager.reserve(PAGEABLE_HOST, huge, "first");
    ResidencyReservation second = manager.reserve(PAGEABLE_HOST, huge, "second");
    try {
      manager.reserve(PAGEABLE_HOST, huge, "third");
      FAIL() << "a third reservation overflowed silently";
    } catch (const ResidencyBudgetError& error) {
      EXPECT_EQ(error.location(), PAGEABLE_HOST);
      EXPECT_EQ(error.budget_bytes(), limit);
      EXPECT_EQ(error.reserved_bytes(), 2 * huge);
      EXPECT_EQ(error.requested_bytes(), huge);
      const std::string message = error.what();
      EXPECT_NE(message.find(budgeted ? "budget exceeded" : "largest representable byte count"), std::string::npos)
          << message;
    }
    // A reconstruction's temporary charge is checked the same way, before the load.
    int loads = 0;
    const ResidencyHandle lazy = manager.register_source(
        ResidencyValueSpec("Blob", 16, huge, ReplicaMode::replicable, Recoverability::reconstructible), [&] {
          ++loads;
          return make_value(4);
        });
    const ResidencySnapshot registered = manager.snapshot();
    EXPECT_THROW(manager.ensure(lazy, CUDA0), ResidencyBudgetError);
    EXPECT_EQ(loads, 0);
    ResidencySnapshot after = manager.snapshot();
    after.captured_at_ns = registered.captured_at_ns;
    EXPECT_EQ(after, registered);

    // Explain predicts the same refusal instead of wrapping around.
    const ResidencyPlan plan{"three", {}, {}, {MemoryReservation(PAGEABLE_HOST, huge, "third")}};
    const ResidencyPlanExplanation explanation = manager.explain(plan);
    EXPECT_FALSE(explanation.feasible);
    EXPECT_NE(explanation.reason.value_or("").find(budgeted ? "exceeds budget" : "largest representable"),
              std::string::npos)
        << explanation.reason.value_or("");
    EXPECT_EQ(explanation.predicted_peak(PAGEABLE_HOST), 2 * huge);
    ResidencyScope scope = manager.scope(plan);
    EXPECT_THROW(scope.enter(), ResidencyPlanError);
    first.release();
    second.release();
    EXPECT_EQ(location_state(manager, PAGEABLE_HOST).reserved_bytes, 0);
    EXPECT_EQ(location_state(manager, PAGEABLE_HOST).peak_charged_bytes, 2 * huge);
  }
}

}  // namespace
}  // namespace fhelium::residency
