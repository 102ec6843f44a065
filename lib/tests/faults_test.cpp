// The fault model of DESIGN.md, exercised through the fault-injecting runtime:
// atomic primitives, committed plan prefixes, protection kept without proof,
// best-effort telemetry, no lost contents, no hangs.
#include <gtest/gtest.h>

#include "fhelium/harness/fault_injecting_runtime.hpp"
#include "support.hpp"

namespace fhelium::residency {
namespace {

using namespace testing;
using harness::FaultEffect;
using harness::FaultInjectingRuntime;
using harness::FaultOperation;
using harness::FaultRule;

struct FaultFixture : ::testing::Test {
  std::shared_ptr<harness::SimulatedRuntime> simulated = std::make_shared<harness::SimulatedRuntime>();
  std::shared_ptr<FaultInjectingRuntime> faults = std::make_shared<FaultInjectingRuntime>(simulated,
                                                                                          std::vector<FaultRule>{}, 7);
  ResidencyManager manager{ManagerOptions{{{CUDA0, 1 << 20}}, 64, faults, {}}};

  FaultRule rule(const std::string& name, FaultOperation operation) {
    FaultRule result;
    result.name = name;
    result.operation = operation;
    return result;
  }
  static ResidencySnapshot without_time_and_version(ResidencySnapshot snapshot) {
    snapshot.captured_at_ns = 0;
    snapshot.state_version = 0;
    return snapshot;
  }
};

// A copy that hands back storage another materialization owns is refused:
// the value gains nothing, the owner keeps its bytes, no charge is taken.
TEST_F(FaultFixture, CopiesThatAliasOwnedStorageAreRefused) {
  const ResidencyHandle owner = manager.adopt(make_value(64, 1.0f), std::nullopt, ReplicaMode::replicable);
  const ResidencyHandle other = manager.adopt(make_value(64, 2.0f), std::nullopt, ReplicaMode::replicable);
  FaultRule alias = rule("alias", FaultOperation::copy);
  alias.effect = FaultEffect::alias;
  alias.nth = 2;
  faults->add_rule(alias);
  manager.ensure(owner, CUDA0);
  EXPECT_THROW(manager.ensure(other, CUDA0), ResidencyOwnershipError);
  EXPECT_EQ(resident_at(manager, other), std::vector<ResidencyLocation>{PAGEABLE_HOST});
  EXPECT_EQ(location_state(manager, CUDA0).used_bytes, 256);
  ResidencyLease lease = manager.acquire({owner}, CUDA0, simulated->stream(0, 1));
  EXPECT_TRUE(same_contents(lease.value(owner), make_value(64, 1.0f)));
  lease.release(true);
  EXPECT_EQ(faults->fired().size(), 1u);
  FaultRule misplaced = rule("misplaced", FaultOperation::record_event);
  misplaced.effect = FaultEffect::alias;
  EXPECT_THROW(faults->add_rule(misplaced), std::invalid_argument);
}

// Device calls that fail below the fault layer are counted apart from the
// faults it injects: the replay tells a device's own failures (which explain
// does not predict) from its rules' by them.
TEST(FaultInjection, CountsTheFailuresOfTheRuntimeBelowButNotItsOwnFaults) {
  harness::SimulatedRuntimeOptions options;
  options.can_pin = false;
  auto simulated = std::make_shared<harness::SimulatedRuntime>(options);
  FaultRule fail_copies;
  fail_copies.name = "cuda-copies";
  fail_copies.operation = FaultOperation::copy;
  fail_copies.location = CUDA0;
  auto faults = std::make_shared<FaultInjectingRuntime>(simulated, std::vector<FaultRule>{fail_copies}, 7);
  ResidencyManager manager{ManagerOptions{{}, 64, faults, {}}};
  const ResidencyHandle value = manager.adopt(make_value(64), std::nullopt, ReplicaMode::replicable);
  EXPECT_ANY_THROW(manager.ensure(value, CUDA0));  // injected
  EXPECT_EQ(faults->fired().size(), 1u);
  EXPECT_EQ(faults->upstream_failures(), 0);
  EXPECT_ANY_THROW(manager.ensure(value, PINNED_HOST));  // the simulated device cannot pin
  EXPECT_EQ(faults->fired().size(), 1u);
  EXPECT_EQ(faults->upstream_failures(), 1);
  manager.ensure(value, CUDA1);  // a call that succeeds below counts nothing
  EXPECT_EQ(faults->upstream_failures(), 1);
}

TEST_F(FaultFixture, FailedCopiesChangeNothingVisibleAndKeepTheirType) {
  const ResidencyHandle value = manager.adopt(make_value(64));
  const ResidencyHandle lazy = manager.register_source(
      ResidencyValueSpec("Blob", 256, 256, ReplicaMode::exclusive, Recoverability::reconstructible),
      [] { return make_value(64, 9.0f); });
  const ResidencySnapshot before = manager.snapshot();
  FaultRule oom = rule("oom", FaultOperation::copy);
  oom.location = CUDA0;
  faults->add_rule(oom);
  try {
    manager.move(value, CUDA0);
    FAIL();
  } catch (const c10::OutOfMemoryError& error) {
    EXPECT_EQ(harness::injected_rule(error), "oom");
  }
  EXPECT_THROW(manager.ensure(lazy, CUDA0), c10::OutOfMemoryError);
  EXPECT_EQ(without_time_and_version(manager.snapshot()).values, without_time_and_version(before).values);
  const ResidencySnapshot after = manager.snapshot();
  EXPECT_EQ(after.location(CUDA0)->used_bytes, 0);
  EXPECT_EQ(after.location(PAGEABLE_HOST)->reserved_bytes, 0);  // temporary charge released
  EXPECT_EQ(after.location(PAGEABLE_HOST)->peak_charged_bytes, 256 + 256);
  EXPECT_EQ(faults->fired().size(), 2u);
  faults->clear_rules();
  manager.move(value, CUDA0);
  auto lease = manager.acquire({value}, CUDA0, simulated->stream(0));
  EXPECT_TRUE(same_contents(lease.value(value), make_value(64)));  // nothing lost
}

TEST_F(FaultFixture, PlansKeepTheCommittedPrefix) {
  const ResidencyHandle a = manager.adopt(make_value(4, 1));
  const ResidencyHandle b = manager.adopt(make_value(4, 2));
  const ResidencyHandle c = manager.adopt(make_value(4, 3));
  FaultRule second_copy = rule("second-copy", FaultOperation::copy);
  second_copy.nth = 2;
  faults->add_rule(second_copy);
  try {
    manager.execute_actions({MoveResident{a, CUDA0, {}}, MoveResident{b, CUDA0, {}}, MoveResident{c, CUDA0, {}}},
                            "stage");
    FAIL();
  } catch (const ResidencyPlanExecutionError& error) {
    EXPECT_EQ(error.failed_action_index(), 1);
    EXPECT_EQ(error.partial_report().transitions.size(), 1u);
    try {
      error.rethrow_cause();
    } catch (const c10::OutOfMemoryError& cause) {
      EXPECT_EQ(harness::injected_rule(cause), "second-copy");
    }
  }
  EXPECT_EQ(resident_at(manager, a), std::vector<ResidencyLocation>{CUDA0});
  EXPECT_EQ(resident_at(manager, b), std::vector<ResidencyLocation>{PAGEABLE_HOST});
  EXPECT_EQ(resident_at(manager, c), std::vector<ResidencyLocation>{PAGEABLE_HOST});
}

TEST_F(FaultFixture, ScopeReservationsOnMissingDevicesFailPreflight) {
  const ResidencyHandle a = manager.adopt(make_value(4));
  ResidencyScope scope = manager.scope(
      ResidencyPlan{"s", {MoveResident{a, CUDA0, {}}}, {}, {MemoryReservation(cuda_location(7), 1, "far")}});
  try {
    scope.enter();
    FAIL();
  } catch (const ResidencyPlanError& error) {
    EXPECT_NE(std::string(error.what()).find("cuda:7"), std::string::npos);
  }
  EXPECT_EQ(resident_at(manager, a), std::vector<ResidencyLocation>{PAGEABLE_HOST});
}

TEST_F(FaultFixture, EventRecordFailureFallsBackToStreamSynchronization) {
  const ResidencyHandle value = manager.adopt(make_value(4));
  manager.move(value, CUDA0);
  faults->add_rule(rule("record", FaultOperation::record_event));
  const c10::Stream consumer = simulated->stream(0, 1);
  auto lease = manager.acquire({value}, CUDA0, consumer);
  simulated->enqueue(consumer, 40);
  const std::int64_t before = simulated->now_ns();
  lease.release();
  EXPECT_EQ(simulated->now_ns(), before + 40);  // the fallback waited for the stream
  EXPECT_EQ(location_state(manager, CUDA0).pending_event_count, 0);
  ASSERT_FALSE(manager.diagnostics().empty());
  EXPECT_NE(manager.diagnostics().back().find("event recording failed"), std::string::npos);
}

TEST_F(FaultFixture, WithoutAnyProofProtectionStaysUntilForcedClose) {
  const ResidencyHandle value = manager.adopt(make_value(4));
  const ResidencyHandle other = manager.adopt(make_value(4, 5));
  manager.move(value, CUDA0);
  faults->add_rule(rule("record", FaultOperation::record_event));
  faults->add_rule(rule("sync", FaultOperation::synchronize_stream));
  auto lease = manager.acquire({value}, CUDA0, simulated->stream(0, 1));
  lease.release();
  EXPECT_FALSE(lease.active());
  EXPECT_EQ(location_state(manager, CUDA0).pending_event_count, 1);
  simulated->advance(1'000'000);
  EXPECT_EQ(location_state(manager, CUDA0).pending_event_count, 1);
  EXPECT_THROW(manager.move(value, PAGEABLE_HOST), ResidencyInUseError);
  EXPECT_NO_THROW(manager.move(other, CUDA0));  // unrelated work is unaffected
  EXPECT_THROW(manager.close(), ResidencyInUseError);
  manager.close(true, true);
  EXPECT_TRUE(manager.closed());
}

TEST_F(FaultFixture, FailedEventQueriesKeepProtectionWithoutBreakingOtherWork) {
  const ResidencyHandle value = manager.adopt(make_value(4));
  const ResidencyHandle other = manager.adopt(make_value(4, 5));
  manager.move(value, CUDA0);
  const c10::Stream consumer = simulated->stream(0, 1);
  auto lease = manager.acquire({value}, CUDA0, consumer);
  lease.release();
  FaultRule query = rule("query", FaultOperation::query_event);
  query.max_fires = 3;
  faults->add_rule(query);
  EXPECT_EQ(location_state(manager, CUDA0).pending_event_count, 1);  // query 1 failed
  EXPECT_NO_THROW(manager.move(other, CUDA1));                       // query 2 failed
  EXPECT_FALSE(manager.explain(ResidencyPlan{"d", {DropResident{value, CUDA0}}}).feasible);  // query 3
  EXPECT_EQ(location_state(manager, CUDA0).pending_event_count, 0);  // a working query proves completion
  EXPECT_EQ(faults->fired().size(), 3u);
}

// A failed query keeps protection, and a query may fail where an earlier one
// for the same event succeeded. A plan's preflight that saw the event
// complete planned a drop; when the action's own reaping then cannot prove
// completion, the materialization is still protected and the drop is refused
// cleanly (a plan execution error, nothing changed) instead of removing it.
TEST_F(FaultFixture, APlannedDropRefusedWhenProtectionOutlivesThePreflight) {
  const ResidencyHandle value = manager.adopt(make_value(4), std::nullopt, ReplicaMode::replicable);
  manager.ensure(value, CUDA0);
  const std::vector<ResidencyLocation> both = resident_at(manager, value);
  ASSERT_EQ(both.size(), 2u);
  auto lease = manager.acquire({value}, CUDA0, simulated->stream(0, 1));
  lease.release();
  // execute_actions queries the event three times: reaping before the
  // preflight (fails), the preflight's protection check (succeeds), and
  // reaping before the drop runs (fails).
  FaultRule first = rule("first", FaultOperation::query_event);
  first.nth = 1;
  FaultRule third = rule("third", FaultOperation::query_event);
  third.nth = 3;
  faults->add_rule(third);  // first: a rule counts only the calls no earlier rule took
  faults->add_rule(first);
  try {
    manager.execute_actions({DropResident{value, CUDA0}}, "drop");
    ADD_FAILURE() << "the drop ran over a materialization still protected";
  } catch (const ResidencyPlanExecutionError& error) {
    EXPECT_EQ(error.failed_action_index(), 0);
    EXPECT_TRUE(error.partial_report().transitions.empty());
    EXPECT_THROW(error.rethrow_cause(), ResidencyInUseError);
  }
  EXPECT_EQ(faults->fired().size(), 2u);
  EXPECT_EQ(resident_at(manager, value), both);
  // The next working query proves completion; the drop then runs.
  EXPECT_EQ(location_state(manager, CUDA0).pending_event_count, 0);
  EXPECT_EQ(manager.execute_actions({DropResident{value, CUDA0}}, "drop").transitions.size(), 1u);
  EXPECT_EQ(resident_at(manager, value), std::vector<ResidencyLocation>{PAGEABLE_HOST});
}

// A rule sees only the calls of its window: a `step` rule passes by the
// calls made inside begin_checking/end_checking spans, uncounted, and a
// `checks` rule passes by all others; spans nest, and an end without a
// begin is refused.
TEST_F(FaultFixture, RulesSeeOnlyTheCallsOfTheirWindow) {
  FaultRule second_step_copy = rule("second-step-copy", FaultOperation::copy);
  second_step_copy.nth = 2;
  second_step_copy.during = harness::FaultCalls::step;
  FaultRule first_check_copy = rule("first-check-copy", FaultOperation::copy);
  first_check_copy.nth = 1;
  first_check_copy.during = harness::FaultCalls::checks;
  faults->add_rule(second_step_copy);
  faults->add_rule(first_check_copy);
  const ResidentValue value = make_value(4);
  const auto copy = [&] { return faults->copy_to(value, CUDA0, simulated->stream(0, 1)); };
  EXPECT_NO_THROW(copy());  // step call 1
  faults->begin_checking();
  faults->begin_checking();
  EXPECT_THROW(copy(), c10::OutOfMemoryError);  // check call 1
  faults->end_checking();
  EXPECT_NO_THROW(copy());  // check call 2: still inside the outer span
  faults->end_checking();
  EXPECT_THROW(copy(), c10::OutOfMemoryError);  // step call 2: the checks were not counted
  EXPECT_NO_THROW(copy());
  EXPECT_THROW(faults->end_checking(), std::logic_error);
  const auto fired = faults->fired();
  ASSERT_EQ(fired.size(), 2u);
  EXPECT_EQ(fired[0].rule, "first-check-copy");
  EXPECT_EQ(fired[0].call_index, 1);
  EXPECT_EQ(fired[1].rule, "second-step-copy");
  EXPECT_EQ(fired[1].call_index, 2);
}

TEST_F(FaultFixture, DelayedAndNeverCompletingEvents) {
  const ResidencyHandle value = manager.adopt(make_value(4));
  manager.move(value, CUDA0);
  FaultRule delay = rule("delay", FaultOperation::record_event);
  delay.effect = FaultEffect::delay;
  delay.delay_ns = 1000;
  delay.max_fires = 1;
  faults->add_rule(delay);
  auto lease = manager.acquire({value}, CUDA0, simulated->stream(0, 1));
  lease.release();
  simulated->advance(999);
  EXPECT_EQ(location_state(manager, CUDA0).pending_event_count, 1);
  simulated->advance(1);
  EXPECT_EQ(location_state(manager, CUDA0).pending_event_count, 0);

  FaultRule never = rule("never", FaultOperation::record_event);
  never.effect = FaultEffect::never_complete;
  faults->add_rule(never);
  auto stuck = manager.acquire({value}, CUDA0, simulated->stream(0, 1));
  EXPECT_THROW(stuck.release(true), c10::Error);  // a wait that can never return is an error, not a hang
  simulated->advance(1'000'000'000);
  EXPECT_EQ(location_state(manager, CUDA0).pending_event_count, 1);
}

TEST_F(FaultFixture, AllocatorTelemetryIsBestEffort) {
  const ResidencyHandle value = manager.adopt(make_value(4));
  faults->add_rule(rule("stats", FaultOperation::allocator_stats));
  const ResidencyTransitionReport report = manager.move(value, CUDA0);
  EXPECT_EQ(report.allocator_device, CUDA0.device());
  EXPECT_FALSE(report.allocator_allocated_bytes_before.has_value());
  EXPECT_FALSE(report.allocator_allocated_bytes_after.has_value());
  EXPECT_FALSE(location_state(manager, CUDA0).allocator_allocated_bytes.has_value());
  EXPECT_EQ(resident_at(manager, value), std::vector<ResidencyLocation>{CUDA0});
}

TEST(FaultRules, AreValidatedAndSelectDeterministically) {
  FaultRule bad;
  EXPECT_THROW(bad.validate(), std::invalid_argument);
  bad.name = "x";
  bad.nth = 0;
  EXPECT_THROW(bad.validate(), std::invalid_argument);
  bad.nth.reset();
  bad.effect = FaultEffect::delay;
  EXPECT_THROW(bad.validate(), std::invalid_argument);  // delay applies to record_event only
  EXPECT_THROW(harness::parse_fault_operation("malloc"), std::invalid_argument);
  EXPECT_EQ(harness::parse_fault_effect("never_complete"), FaultEffect::never_complete);

  const auto fire_pattern = [](std::uint64_t seed) {
    auto simulated = std::make_shared<harness::SimulatedRuntime>();
    FaultRule coin;
    coin.name = "coin";
    coin.operation = FaultOperation::copy;
    coin.probability = 0.5;
    FaultInjectingRuntime runtime(simulated, {coin}, seed);
    std::string pattern;
    for (int i = 0; i < 32; ++i) {
      try {
        runtime.copy_to(make_value(1), CUDA0, std::nullopt);
        pattern += '.';
      } catch (const c10::OutOfMemoryError&) {
        pattern += 'x';
      }
    }
    return pattern;
  };
  EXPECT_EQ(fire_pattern(11), fire_pattern(11));
  EXPECT_NE(fire_pattern(11), fire_pattern(12));
  EXPECT_NE(fire_pattern(11).find('x'), std::string::npos);
}

}  // namespace
}  // namespace fhelium::residency
