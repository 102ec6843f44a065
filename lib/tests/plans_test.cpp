// Plans: execute_actions, explain, scopes, stale decisions and execution errors.
#include <gtest/gtest.h>

#include "support.hpp"

namespace fhelium::residency {
namespace {

using namespace testing;

struct PlanFixture : ::testing::Test {
  SimulatedFixture fixture = make_fixture({{CUDA0, 256}});
  ResidencyManager& manager = *fixture.manager;
  ResidencyHandle a = manager.adopt(make_value(16, 1.0f));  // 64 bytes each
  ResidencyHandle b = manager.adopt(make_value(16, 2.0f));
  ResidencyHandle c = manager.adopt(make_value(16, 3.0f));
};

ResidencySnapshot without_time(ResidencySnapshot snapshot) {
  snapshot.captured_at_ns = 0;
  return snapshot;
}

TEST_F(PlanFixture, ExecuteActionsRunsInOrderAndReportsEachTransition) {
  const ResidencyPlanReport report = manager.execute_actions(
      {MoveResident{a, CUDA0, {}}, MoveResident{b, CUDA0, {}}, EnsureResident{a, CUDA0}, DropResident{c, CUDA1}},
      "stage");
  EXPECT_EQ(report.plan_name, "stage");
  ASSERT_EQ(report.transitions.size(), 4u);
  EXPECT_EQ(report.transitions[0].source, PAGEABLE_HOST);
  EXPECT_TRUE(report.transitions[2].no_op);
  EXPECT_TRUE(report.transitions[3].no_op);
  // The preflight's decisions carry their no-op reasons into the reports.
  EXPECT_EQ(report.transitions[2].reason, "destination already resident");
  EXPECT_EQ(report.transitions[3].reason, "materialization already absent");
  EXPECT_FALSE(report.transitions[0].reason.has_value());
  EXPECT_LE(report.started_at_ns, report.completed_at_ns);
  EXPECT_EQ(location_state(manager, CUDA0).used_bytes, 128);
  EXPECT_THROW(manager.execute_actions({}, " "), std::invalid_argument);
}

// A run of a plan's actions is timed with one clock read per boundary: each
// action after the first starts exactly when the previous one completed. On
// the real clock, a fresh read for each start would differ.
TEST(PlanTimestamps, EachActionOfARunStartsWhenThePreviousOneCompleted) {
  ResidencyManager manager{ManagerOptions{}};  // the default runtime: real Unix time
  const ResidencyValueSpec spec("Blob", 64, 64, ReplicaMode::replicable, Recoverability::reconstructible);
  const auto source = make_source([] { return make_value(16, 1.0f); });
  std::vector<ResidencyHandle> handles;
  for (int index = 0; index < 6; ++index) handles.push_back(manager.register_source(spec, source, PAGEABLE_HOST));
  const auto expect_chained = [](const std::vector<ResidencyTransitionReport>& run, std::size_t first,
                                 std::size_t count) {
    for (std::size_t index = first; index < first + count; ++index) {
      EXPECT_LE(run[index].started_at_ns, run[index].completed_at_ns) << index;
      if (index > first) {
        EXPECT_EQ(run[index].started_at_ns, run[index - 1].completed_at_ns) << index;
      }
    }
  };
  const ResidencyPlanReport report = manager.execute_actions(
      {EnsureResident{handles[0], PAGEABLE_HOST}, EnsureResident{handles[1], PAGEABLE_HOST},
       DropResident{handles[0], PAGEABLE_HOST}, EnsureResident{handles[2], PAGEABLE_HOST}});
  ASSERT_EQ(report.transitions.size(), 4u);
  expect_chained(report.transitions, 0, 4);
  EXPECT_LE(report.started_at_ns, report.transitions.front().started_at_ns);
  EXPECT_GE(report.completed_at_ns, report.transitions.back().completed_at_ns);
  EXPECT_LT(report.transitions.front().started_at_ns, report.transitions.back().completed_at_ns);

  // A scope chains within each phase: reclaim, enter, and exit at close.
  ResidencyScope scope = manager.scope(ResidencyPlan{
      "phases",
      {EnsureResident{handles[4], PAGEABLE_HOST}, EnsureResident{handles[5], PAGEABLE_HOST}},
      {DropResident{handles[4], PAGEABLE_HOST}, DropResident{handles[5], PAGEABLE_HOST}},
      {},
      {DropResident{handles[1], PAGEABLE_HOST}, EnsureResident{handles[3], PAGEABLE_HOST}}});
  scope.enter();
  const auto closed = scope.close();
  ASSERT_TRUE(closed.has_value());
  ASSERT_EQ(closed->transitions.size(), 6u);
  expect_chained(closed->transitions, 0, 2);  // reclaim
  expect_chained(closed->transitions, 2, 2);  // enter
  expect_chained(closed->transitions, 4, 2);  // exit
}

// Execution reuses the value records its preflight resolved: each action must
// act on its own value (distinct sizes show a mix-up in the reports' bytes),
// in plans and in a scope's reclaim and enter phases alike.
TEST_F(PlanFixture, EachActionOfAPlanOrScopeActsOnItsOwnValue) {
  const ResidencyHandle small = manager.adopt(make_value(2, 7.0f), std::nullopt, ReplicaMode::replicable);  // 8 bytes
  const ResidencyHandle medium = manager.adopt(make_value(4, 8.0f));                                         // 16 bytes
  const ResidencyPlanReport report = manager.execute_actions(
      {EnsureResident{small, CUDA0}, MoveResident{medium, CUDA0, {}}, MoveResident{a, CUDA1, {}},
       DropResident{small, PAGEABLE_HOST}, MoveResident{medium, PAGEABLE_HOST, {}}, DiscardValue{small}});
  const std::vector<std::int64_t> bytes{8, 16, 64, 8, 16, 8};
  ASSERT_EQ(report.transitions.size(), bytes.size());
  for (std::size_t index = 0; index < bytes.size(); ++index) {
    EXPECT_EQ(report.transitions[index].logical_nbytes, bytes[index]) << index;
  }
  EXPECT_EQ(resident_at(manager, medium), std::vector<ResidencyLocation>{PAGEABLE_HOST});
  EXPECT_EQ(resident_at(manager, a), std::vector<ResidencyLocation>{CUDA1});
  EXPECT_TRUE(manager.snapshot().value(small)->discarded);

  ResidencyScope scope = manager.scope(ResidencyPlan{
      "phases", {MoveResident{medium, CUDA0, {}}}, {}, {}, {MoveResident{a, PAGEABLE_HOST, {}}, DropResident{b, CUDA0}}});
  scope.enter();
  const auto entered = scope.close();
  ASSERT_TRUE(entered.has_value());
  ASSERT_EQ(entered->transitions.size(), 3u);  // reclaim a, reclaim b (a no-op), then enter medium
  EXPECT_EQ(entered->transitions[0].logical_nbytes, 64);
  EXPECT_TRUE(entered->transitions[1].no_op);
  EXPECT_EQ(entered->transitions[2].logical_nbytes, 16);
  EXPECT_EQ(resident_at(manager, medium), std::vector<ResidencyLocation>{CUDA0});
  EXPECT_EQ(resident_at(manager, a), std::vector<ResidencyLocation>{PAGEABLE_HOST});
}

// The manager builds its reports, explanations and snapshots through the
// unchecked (trusted) constructors: every record it builds must be one the
// checked constructors accept. Rebuilding each through them is the check
// (they throw on a broken rule: negative bytes, storage below logical bytes,
// completion before start, aggregates that disagree with the values).
TEST_F(PlanFixture, RecordsTheManagerBuildsPassTheirCheckedConstructors) {
  const std::vector<ResidencyAction> actions{MoveResident{a, CUDA0, {}}, EnsureResident{a, CUDA0},
                                             MoveResident{b, CUDA1, {}}, MoveResident{b, PAGEABLE_HOST, CUDA1},
                                             DropResident{c, CUDA1}, DiscardValue{c}};
  const ResidencyPlanExplanation explanation = manager.explain(ResidencyPlan{"records", {}, actions});
  ASSERT_EQ(explanation.actions.size(), actions.size()) << explanation.reason.value_or("");
  for (const auto& item : explanation.actions) {
    EXPECT_NO_THROW(ResidencyActionExplanation(item.action, item.executable, item.no_op, item.source,
                                               item.destination, item.logical_nbytes, item.storage_nbytes,
                                               item.reason));
  }
  const ResidencyPlanReport report = manager.execute_actions(actions, "records");
  ASSERT_EQ(report.transitions.size(), actions.size());
  for (const auto& item : report.transitions) {
    EXPECT_NO_THROW(ResidencyTransitionReport(
        item.action, item.no_op, item.source, item.destination, item.logical_nbytes, item.storage_nbytes,
        item.started_at_ns, item.completed_at_ns, item.allocator_device, item.allocator_allocated_bytes_before,
        item.allocator_reserved_bytes_before, item.allocator_allocated_bytes_after,
        item.allocator_reserved_bytes_after, item.reason));
  }
  const ResidencyLease lease = manager.acquire({a}, CUDA0, fixture.runtime->stream(0, 1));
  const ResidencySnapshot snapshot = manager.snapshot();
  ASSERT_EQ(snapshot.value(a)->at(CUDA0)->use_count, 1);
  std::vector<ResidencyValueSnapshot> values;
  for (const auto& value : snapshot.values) {
    std::vector<MaterializationSnapshot> materializations;
    for (const auto& item : value.materializations) {
      materializations.emplace_back(item.location, item.logical_nbytes, item.storage_nbytes, item.charged_nbytes,
                                    item.use_count, item.hold_count, item.pending_event_count);
    }
    values.emplace_back(value.handle, value.spec, std::move(materializations), value.has_source,
                        value.source_location, value.discarded);
  }
  EXPECT_NO_THROW(ResidencySnapshot(snapshot.manager_id, snapshot.state_version, std::move(values),
                                    snapshot.locations, snapshot.reservations, snapshot.captured_at_ns));
}

TEST_F(PlanFixture, ReservationsChangedAfterConstructionAreArgumentErrorsBeforeAnyChange) {
  for (const bool negative : {true, false}) {
    ResidencyPlan plan{"bad", {MoveResident{a, CUDA0, {}}}, {}, {MemoryReservation(CUDA0, 8, "workspace")}};
    if (negative) {
      plan.reservations[0].nbytes = -1;  // the fields are public
    } else {
      plan.reservations[0].label = " ";
    }
    const std::uint64_t version = manager.state_version();
    EXPECT_THROW(manager.explain(plan), std::invalid_argument);
    ResidencyScope scope = manager.scope(plan);
    EXPECT_THROW(scope.enter(), std::invalid_argument);
    EXPECT_EQ(manager.state_version(), version);
    EXPECT_EQ(resident_at(manager, a), std::vector<ResidencyLocation>{PAGEABLE_HOST});
  }
}

TEST_F(PlanFixture, InfeasiblePlansChangeNothing) {
  manager.move(a, CUDA0);
  manager.move(b, CUDA0);
  manager.move(c, CUDA0);  // 192 of 256
  const ResidencyHandle d = manager.adopt(make_value(16, 4.0f));
  const ResidencyHandle e = manager.adopt(make_value(16, 5.0f));
  const ResidencySnapshot before = manager.snapshot();
  try {
    // The first move fits exactly; the second would exceed the budget.
    manager.execute_actions({MoveResident{d, CUDA0, {}}, MoveResident{e, CUDA0, {}}});
    FAIL();
  } catch (const ResidencyPlanError& error) {
    EXPECT_NE(std::string(error.what()).find("exceeds budget at cuda:0"), std::string::npos) << error.what();
  }
  EXPECT_EQ(without_time(manager.snapshot()), without_time(before));
}

TEST_F(PlanFixture, ExplainPredictsWithoutChangingState) {
  const ResidencyHandle lazy = manager.register_source(
      ResidencyValueSpec("Blob", 64, 64, ReplicaMode::exclusive, Recoverability::reconstructible),
      [] { return make_value(16); }, PINNED_HOST);
  auto reservation = manager.reserve(CUDA0, 32, "existing");
  const ResidencySnapshot before = manager.snapshot();
  const ResidencyPlan plan{"layer",
                           {MoveResident{a, CUDA0, {}}, EnsureResident{lazy, CUDA0}, EnsureResident{a, CUDA0}},
                           {MoveResident{a, PAGEABLE_HOST, {}}},
                           {MemoryReservation(CUDA0, 64, "workspace"), MemoryReservation(CUDA1, 10, "peer")},
                           {DropResident{c, PAGEABLE_HOST}}};
  // The reclaim drop fails (last MUST_PRESERVE copy): infeasible at the first action.
  ResidencyPlanExplanation explanation = manager.explain(plan);
  EXPECT_FALSE(explanation.feasible);
  ASSERT_EQ(explanation.actions.size(), 1u);
  EXPECT_EQ(explanation.actions[0].reason, "cannot drop the final MUST_PRESERVE materialization");
  EXPECT_EQ(explanation.reason, explanation.actions[0].reason);

  ResidencyPlan feasible = plan;
  feasible.reclaim = {EnsureResident{c, PAGEABLE_HOST}};
  explanation = manager.explain(feasible);
  EXPECT_TRUE(explanation.feasible);
  ASSERT_EQ(explanation.actions.size(), 5u);
  EXPECT_TRUE(explanation.actions[0].no_op);
  EXPECT_EQ(explanation.actions[0].reason, "destination already resident");
  EXPECT_EQ(explanation.actions[1].source, PAGEABLE_HOST);
  EXPECT_FALSE(explanation.actions[1].reason.has_value());
  EXPECT_EQ(explanation.actions[2].source, PINNED_HOST);  // reconstruction
  EXPECT_TRUE(explanation.actions[3].no_op);
  EXPECT_EQ(explanation.actions[3].reason, "destination already resident");
  EXPECT_EQ(explanation.actions[4].destination, PAGEABLE_HOST);
  // Tracked locations in registration order, then locations first referenced by the plan.
  ASSERT_EQ(explanation.predicted_peak_bytes.size(), 4u);
  EXPECT_EQ(explanation.predicted_peak_bytes[0].first, CUDA0);
  EXPECT_EQ(explanation.predicted_peak_bytes[1].first, PAGEABLE_HOST);
  EXPECT_EQ(explanation.predicted_peak_bytes[2].first, PINNED_HOST);
  EXPECT_EQ(explanation.predicted_peak_bytes[3].first, CUDA1);
  EXPECT_EQ(explanation.predicted_peak(CUDA0), 32 + 64 + 64 + 64);
  EXPECT_EQ(explanation.predicted_peak(PINNED_HOST), 64);  // temporary load
  EXPECT_EQ(explanation.predicted_peak(CUDA1), 10);
  EXPECT_EQ(without_time(manager.snapshot()), without_time(before));  // no bump, no registration

  // A reservation over budget is infeasible and named.
  ResidencyPlan greedy = feasible;
  greedy.reservations = {MemoryReservation(CUDA0, 300, "huge")};
  explanation = manager.explain(greedy);
  EXPECT_FALSE(explanation.feasible);
  EXPECT_EQ(explanation.reason, "reservation 'huge' exceeds budget at cuda:0");
  EXPECT_TRUE(explanation.actions.size() == 1u);  // reservations come after reclaim
}

TEST_F(PlanFixture, ExplainReportsBadHandlesAndLocationsAsReasons) {
  auto other = make_fixture();
  const ResidencyHandle foreign = other.manager->adopt(make_value(1));
  ResidencyPlanExplanation explanation = manager.explain(ResidencyPlan{"p", {EnsureResident{foreign, CUDA0}}});
  EXPECT_FALSE(explanation.feasible);
  EXPECT_EQ(explanation.actions[0].logical_nbytes, 0);
  EXPECT_NE(explanation.reason->find("belongs to manager"), std::string::npos);
  explanation = manager.explain(ResidencyPlan{"p", {EnsureResident{a, cuda_location(9)}}});
  EXPECT_FALSE(explanation.feasible);
  EXPECT_NE(explanation.reason->find("not available"), std::string::npos);
  explanation = manager.explain(ResidencyPlan{"p", {DiscardValue{a}, EnsureResident{a, CUDA0}}});
  EXPECT_FALSE(explanation.feasible);
  EXPECT_EQ(explanation.actions.size(), 2u);
  EXPECT_NE(explanation.reason->find("is discarded"), std::string::npos);
  EXPECT_THROW(manager.explain(ResidencyPlan{""}), std::invalid_argument);
}

// Explain checks only the handles it cannot resolve, which is sound only as
// long as no handle the manager issues is malformed: neither registration nor
// adoption may leave a value with a blank value_type.
TEST_F(PlanFixture, NoValueIsRegisteredOrAdoptedWithABlankValueType) {
  ResidencyValueSpec spec("Blob", 64, 64, ReplicaMode::exclusive, Recoverability::reconstructible);
  spec.value_type = " \t";  // the fields are public
  EXPECT_THROW(manager.register_source(spec, [] { return make_value(16); }), std::invalid_argument);
  EXPECT_THROW(manager.adopt(ResidentValue(), PAGEABLE_HOST), std::invalid_argument);  // no type name at all
  EXPECT_EQ(manager.snapshot().values.size(), 3u);  // a, b and c only
}

// A malformed handle is an argument error wherever it stands in the plan: after
// a refusal (where the dry run stops), beside a malformed reservation, with a
// stale expected version, from inside a source's load and on a closed manager.
TEST_F(PlanFixture, ExplainRefusesMalformedHandlesBeforeAnyOtherError) {
  const ResidencyHandle blank{a.manager_id, " ", a.value_type};
  const auto handle_error = [&](const ResidencyPlan& plan, std::optional<std::uint64_t> expected) {
    try {
      manager.explain(plan, expected);
    } catch (const std::invalid_argument& error) {
      return std::string(error.what());
    } catch (const std::exception& error) {
      return "other error: " + std::string(error.what());
    }
    return std::string("no error");
  };
  const std::string expected_text = "ResidencyHandle handle_id must be non-empty";
  const std::uint64_t version = manager.state_version();
  // After an action the dry run refuses (cuda:9 does not exist here).
  EXPECT_EQ(handle_error(ResidencyPlan{"p", {EnsureResident{a, cuda_location(9)}, DropResident{blank, CUDA0}}}, {}),
            expected_text);
  // After a reservation the budget refuses, in the exit list.
  EXPECT_EQ(handle_error(ResidencyPlan{"p", {}, {}, {MemoryReservation(CUDA0, 1024, "big")}, {DiscardValue{blank}}},
                         {}),
            expected_text);
  // Beside a reservation whose fields were made malformed.
  ResidencyPlan reserved{"p", {}, {DropResident{blank, CUDA0}}, {MemoryReservation(CUDA0, 8, "workspace")}};
  reserved.reservations[0].nbytes = -1;
  EXPECT_EQ(handle_error(reserved, {}), expected_text);
  // With a stale expected version.
  EXPECT_EQ(handle_error(ResidencyPlan{"p", {EnsureResident{a, CUDA0}, DropResident{blank, CUDA0}}}, version + 1),
            expected_text);
  // Well-formed, the same plans give their own errors and reasons.
  EXPECT_THROW(manager.explain(ResidencyPlan{"p", {EnsureResident{a, CUDA0}}}, version + 1), ResidencyStaleStateError);
  EXPECT_FALSE(manager.explain(ResidencyPlan{"p", {EnsureResident{a, cuda_location(9)}, DropResident{b, CUDA0}}})
                   .feasible);
  EXPECT_EQ(manager.state_version(), version);
  // From inside a source's load, where the manager refuses every call.
  std::string during_load;
  const ResidencyHandle lazy = manager.register_source(
      ResidencyValueSpec("Blob", 64, 64, ReplicaMode::exclusive, Recoverability::reconstructible), [&] {
        during_load = handle_error(ResidencyPlan{"p", {EnsureResident{a, CUDA0}, DropResident{blank, CUDA0}}}, {});
        EXPECT_THROW(manager.explain(ResidencyPlan{"p", {EnsureResident{a, CUDA0}}}), ResidencyReentrancyError);
        return make_value(16);
      });
  manager.ensure(lazy, PAGEABLE_HOST);
  EXPECT_EQ(during_load, expected_text);
  // On a closed manager.
  manager.close();
  EXPECT_EQ(handle_error(ResidencyPlan{"p", {EnsureResident{a, CUDA0}, DropResident{blank, CUDA0}}}, {}),
            expected_text);
  EXPECT_THROW(manager.explain(ResidencyPlan{"p", {EnsureResident{a, CUDA0}}}), ResidencyClosedError);
}

TEST_F(PlanFixture, ScopesRunReclaimReservationsEnterBodyExit) {
  manager.move(c, CUDA0);
  ResidencyPlan plan{"attention",
                     {MoveResident{a, CUDA0, {}}, MoveResident{b, CUDA0, {}}},
                     {MoveResident{b, PAGEABLE_HOST, {}}},
                     {MemoryReservation(CUDA0, 128, "activations")},
                     {MoveResident{c, PAGEABLE_HOST, {}}}};
  ResidencyScope scope = manager.scope(plan);
  EXPECT_FALSE(scope.active());
  EXPECT_THROW(scope.close(), std::logic_error);
  scope.enter();
  EXPECT_TRUE(scope.active());
  EXPECT_THROW(scope.enter(), std::logic_error);
  ResidencyLocationSnapshot state = location_state(manager, CUDA0);
  EXPECT_EQ(state.used_bytes, 128);
  EXPECT_EQ(state.reserved_bytes, 128);
  EXPECT_EQ(state.remaining_budget_bytes, 0);
  const auto report = scope.close();
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->transitions.size(), 4u);
  EXPECT_EQ(resident_at(manager, b), std::vector<ResidencyLocation>{PAGEABLE_HOST});
  state = location_state(manager, CUDA0);
  EXPECT_EQ(state.reserved_bytes, 0);
  EXPECT_EQ(state.peak_charged_bytes, 256);
  EXPECT_EQ(scope.close(), report);  // idempotent
}

TEST_F(PlanFixture, StaleDecisionsAreRejectedBeforeAnyChange) {
  const std::uint64_t version = manager.state_version();
  const ResidencyPlanExplanation explanation =
      manager.explain(ResidencyPlan{"p", {MoveResident{a, CUDA0, {}}}}, version);
  EXPECT_TRUE(explanation.feasible);
  manager.move(b, CUDA0);
  try {
    manager.execute_actions({MoveResident{a, CUDA0, {}}}, "p", {}, version);
    FAIL();
  } catch (const ResidencyStaleStateError& error) {
    EXPECT_EQ(error.expected_version(), version);
    EXPECT_EQ(error.actual_version(), manager.state_version());
  }
  EXPECT_THROW(manager.explain(ResidencyPlan{"p"}, version), ResidencyPlanError);
  ResidencyScope scope = manager.scope(ResidencyPlan{"p", {MoveResident{a, CUDA0, {}}}}, {}, version);
  EXPECT_THROW(scope.enter(), ResidencyStaleStateError);
  EXPECT_FALSE(scope.close().has_value());  // a failed entry consumes the scope
  EXPECT_EQ(resident_at(manager, a), std::vector<ResidencyLocation>{PAGEABLE_HOST});
}

struct Flaky : std::runtime_error {
  using std::runtime_error::runtime_error;
};

TEST_F(PlanFixture, ExecutionFailuresCarryPhaseIndexPartialReportAndCause) {
  int loads = 0;
  const ResidencyHandle flaky = manager.register_source(
      ResidencyValueSpec("Blob", 64, 64, ReplicaMode::exclusive, Recoverability::reconstructible),
      [&]() -> ResidentValue {
        if (++loads == 1) throw Flaky("first load fails");
        return make_value(16);
      });
  try {
    manager.execute_actions({MoveResident{a, CUDA0, {}}, EnsureResident{flaky, CUDA0}}, "warmup");
    FAIL();
  } catch (const ResidencyPlanError&) {
    FAIL() << "an execution failure is not a ResidencyPlanError";
  } catch (const ResidencyPlanExecutionError& error) {
    EXPECT_EQ(error.phase(), PlanPhase::execute);
    EXPECT_EQ(error.plan_name(), "warmup");
    EXPECT_EQ(error.failed_action_index(), 1);
    EXPECT_EQ(error.failed_action(), ResidencyAction(EnsureResident{flaky, CUDA0}));
    ASSERT_EQ(error.partial_report().transitions.size(), 1u);
    EXPECT_EQ(error.partial_report().transitions[0].destination, CUDA0);
    EXPECT_THROW(error.rethrow_cause(), Flaky);
    EXPECT_NE(std::string(error.what()).find("first load fails"), std::string::npos);
  }
  EXPECT_EQ(resident_at(manager, a), std::vector<ResidencyLocation>{CUDA0});  // committed prefix stays
  EXPECT_EQ(location_state(manager, PAGEABLE_HOST).reserved_bytes, 0);
}

TEST_F(PlanFixture, EntryFailuresReleaseAdmittedReservationsInEveryPhase) {
  int loads = 0;
  const ResidencyHandle flaky = manager.register_source(
      ResidencyValueSpec("Blob", 64, 64, ReplicaMode::exclusive, Recoverability::reconstructible),
      [&]() -> ResidentValue {
        ++loads;
        throw Flaky("load fails");
      });
  // enter phase
  ResidencyScope enter_fails = manager.scope(ResidencyPlan{
      "enter", {MoveResident{a, CUDA0, {}}, EnsureResident{flaky, CUDA0}}, {}, {MemoryReservation(CUDA0, 10, "w")}});
  try {
    enter_fails.enter();
    FAIL();
  } catch (const ResidencyPlanExecutionError& error) {
    EXPECT_EQ(error.phase(), PlanPhase::enter);
    EXPECT_EQ(error.failed_action_index(), 1);
    EXPECT_EQ(error.partial_report().transitions.size(), 1u);
  }
  EXPECT_EQ(location_state(manager, CUDA0).reserved_bytes, 0);
  EXPECT_FALSE(enter_fails.close().has_value());
  // reclaim phase
  ResidencyScope reclaim_fails =
      manager.scope(ResidencyPlan{"reclaim", {}, {}, {}, {EnsureResident{flaky, PAGEABLE_HOST}}});
  try {
    reclaim_fails.enter();
    FAIL();
  } catch (const ResidencyPlanExecutionError& error) {
    EXPECT_EQ(error.phase(), PlanPhase::reclaim);
    EXPECT_EQ(error.failed_action_index(), 0);
    EXPECT_TRUE(error.partial_report().transitions.empty());
  }
  EXPECT_EQ(loads, 2);
}

TEST_F(PlanFixture, ExitFailuresAreKeptWhileTheBodyErrorStaysPrimary) {
  bool fail = false;
  const ResidencyHandle lazy = manager.register_source(
      ResidencyValueSpec("Blob", 64, 64, ReplicaMode::exclusive, Recoverability::reconstructible),
      [&]() -> ResidentValue {
        if (fail) throw Flaky("exit load fails");
        return make_value(16);
      });
  ResidencyScope scope = manager.scope(ResidencyPlan{"body", {MoveResident{a, CUDA0, {}}}, {EnsureResident{lazy, CUDA1}},
                                                     {MemoryReservation(CUDA0, 16, "tmp")}});
  struct BodyError : std::runtime_error {
    using std::runtime_error::runtime_error;
  };
  EXPECT_THROW(scope.run([&] {
    fail = true;
    throw BodyError("kernel failed");
  }),
               BodyError);
  ASSERT_TRUE(scope.exit_error().has_value());
  EXPECT_EQ(scope.exit_error()->phase(), PlanPhase::exit);
  EXPECT_EQ(scope.exit_error()->partial_report().transitions.size(), 1u);  // the enter move
  EXPECT_EQ(location_state(manager, CUDA0).reserved_bytes, 0);
  EXPECT_FALSE(scope.active());
}

TEST_F(PlanFixture, AbandonedScopesReleaseReservationsWithoutRunningExit) {
  {
    ResidencyScope scope = manager.scope(
        ResidencyPlan{"leak", {MoveResident{a, CUDA0, {}}}, {MoveResident{a, PAGEABLE_HOST, {}}},
                      {MemoryReservation(CUDA0, 16, "tmp")}});
    scope.enter();
  }
  EXPECT_EQ(location_state(manager, CUDA0).reserved_bytes, 0);
  EXPECT_EQ(resident_at(manager, a), std::vector<ResidencyLocation>{CUDA0});
  ASSERT_EQ(manager.diagnostics().size(), 1u);
  EXPECT_NE(manager.diagnostics()[0].find("'leak' was abandoned"), std::string::npos);
}

TEST_F(PlanFixture, MovedScopesKeepOwnershipAndReassignmentAbandonsTheOldOne) {
  ResidencyScope first = manager.scope(ResidencyPlan{"first", {}, {}, {MemoryReservation(CUDA0, 16, "a")}});
  first.enter();
  ResidencyScope second = manager.scope(ResidencyPlan{"second", {}, {}, {MemoryReservation(CUDA0, 32, "b")}});
  second.enter();
  EXPECT_EQ(location_state(manager, CUDA0).reserved_bytes, 48);
  ResidencyScope moved = std::move(second);
  EXPECT_TRUE(moved.active());
  moved = std::move(first);  // abandons "second": its 32 bytes are released
  EXPECT_EQ(location_state(manager, CUDA0).reserved_bytes, 16);
  ASSERT_TRUE(moved.close().has_value());
  EXPECT_EQ(location_state(manager, CUDA0).reserved_bytes, 0);
  EXPECT_EQ(manager.diagnostics().size(), 1u);
}

TEST_F(PlanFixture, TransferStreamsAreValidatedBeforeAnyAction) {
  const TransferStreams good{{CUDA0, fixture.runtime->stream(0, 4)}};
  EXPECT_NO_THROW(manager.execute_actions({MoveResident{a, CUDA0, {}}}, "streamed", good));
  const TransferStreams wrong{{CUDA0, fixture.runtime->stream(1, 4)}};
  EXPECT_THROW(manager.execute_actions({MoveResident{b, CUDA0, {}}}, "streamed", wrong), std::invalid_argument);
  const TransferStreams host{{PAGEABLE_HOST, fixture.runtime->stream(0)}};
  EXPECT_THROW(manager.execute_actions({}, "streamed", host), std::invalid_argument);
  EXPECT_EQ(resident_at(manager, b), std::vector<ResidencyLocation>{PAGEABLE_HOST});
}

// Each planned ensure and move copies on the stream given for its
// destination; a drop takes none. In execute_actions and in a scope's reclaim,
// enter and exit phases alike.
TEST(PlanStreams, EachCopyRunsOnItsDestinationsStream) {
  harness::SimulatedRuntimeOptions options;
  options.record_activity = true;
  SimulatedFixture fixture = make_fixture({}, options);
  ResidencyManager& manager = *fixture.manager;
  const ResidencyHandle a = manager.adopt(make_value(16), PAGEABLE_HOST, ReplicaMode::replicable);
  const ResidencyHandle b = manager.adopt(make_value(16), PAGEABLE_HOST, ReplicaMode::replicable);
  const TransferStreams streams{{CUDA0, fixture.runtime->stream(0, 4)}, {CUDA1, fixture.runtime->stream(1, 5)}};
  const auto copies = [&] {
    std::vector<std::pair<ResidencyLocation, std::int64_t>> found;
    for (const harness::RuntimeActivity& item : fixture.runtime->activity()) {
      if (item.kind == harness::RuntimeActivity::Kind::copy) found.emplace_back(item.destination, item.stream_id);
    }
    return found;
  };
  manager.execute_actions({EnsureResident{a, CUDA0}, MoveResident{b, CUDA1, {}}, DropResident{a, CUDA0}}, "streamed",
                          streams);
  using Copies = std::vector<std::pair<ResidencyLocation, std::int64_t>>;
  EXPECT_EQ(copies(), (Copies{{CUDA0, 4}, {CUDA1, 5}}));

  // Reclaim, enter and exit each copy once: b to cuda:0, a to cuda:1, a to cuda:0.
  ResidencyScope scope = manager.scope(
      ResidencyPlan{"scoped", {EnsureResident{a, CUDA1}}, {EnsureResident{a, CUDA0}}, {}, {EnsureResident{b, CUDA0}}},
      streams);
  scope.enter();
  ASSERT_TRUE(scope.close().has_value());
  EXPECT_EQ(copies(), (Copies{{CUDA0, 4}, {CUDA1, 5}, {CUDA0, 4}, {CUDA1, 5}, {CUDA0, 4}}));
}

TEST_F(PlanFixture, FeasibleExplanationsExecuteWithinTheirPredictedPeaks) {
  const ResidencyHandle lazy = manager.register_source(
      ResidencyValueSpec("Blob", 64, 64, ReplicaMode::replicable, Recoverability::reconstructible),
      [] { return make_value(16); });
  const std::vector<ResidencyAction> actions{MoveResident{a, CUDA0, {}}, EnsureResident{lazy, CUDA0},
                                             EnsureResident{lazy, CUDA1}, MoveResident{a, CUDA1, {}},
                                             DropResident{lazy, CUDA0}, MoveResident{b, CUDA0, {}}};
  const ResidencyPlan plan{"mixed", actions};
  const ResidencyPlanExplanation explanation = manager.explain(plan);
  ASSERT_TRUE(explanation.feasible) << *explanation.reason;
  manager.execute_actions(actions, "mixed");
  const ResidencySnapshot after = manager.snapshot();
  for (const auto& location : after.locations) {
    const auto predicted = explanation.predicted_peak(location.location);
    ASSERT_TRUE(predicted.has_value()) << location.location.name();
    EXPECT_LE(location.peak_charged_bytes, *predicted) << location.location.name();
  }
}

}  // namespace
}  // namespace fhelium::residency
