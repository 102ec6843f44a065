// Behaviours that must match the reference implementation call for call
// (fhelium.residency, tests/test_resource_residency.py). Each test is named
// after the reference behaviour it pins.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "support.hpp"

namespace fhelium::residency {
namespace {

using namespace testing;

bool contains(const std::string& text, const std::string& phrase) { return text.find(phrase) != std::string::npos; }

// The message of the exception `call` throws as `Error`; fails the test when
// it throws nothing or something else.
template <class Error>
std::string message_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& error) {
    return error.what();
  } catch (const std::exception& other) {
    ADD_FAILURE() << "unexpected exception: " << other.what();
    return {};
  }
  ADD_FAILURE() << "nothing was thrown";
  return {};
}

// state_version() and snapshot() reap completed leases, which is exactly what
// some of these tests must not disturb. explain() with an expected version
// reads the version without reaping.
bool version_is(const ResidencyManager& manager, std::uint64_t expected) {
  try {
    manager.explain(ResidencyPlan{"probe"}, expected);
    return true;
  } catch (const ResidencyStaleStateError&) {
    return false;
  }
}

struct ParityFixture : ::testing::Test {
  SimulatedFixture fixture = make_fixture();
  ResidencyManager& manager = *fixture.manager;
  harness::SimulatedRuntime& runtime = *fixture.runtime;
  ResidencyHandle a = manager.adopt(make_value(8, 1.0f), std::nullopt, ReplicaMode::replicable);
  ResidencyHandle b = manager.adopt(make_value(8, 2.0f), std::nullopt, ReplicaMode::replicable);

  // A lease at cuda:0 whose release left it pending behind 100 ns of work;
  // after this the work has finished but nothing has reaped the lease yet.
  std::uint64_t completed_unreaped_lease() {
    manager.ensure(a, CUDA0);
    const c10::Stream stream = runtime.stream(0, 1);
    ResidencyLease lease = manager.acquire({a}, CUDA0, stream);
    runtime.enqueue(stream, 100);
    lease.release(false);
    const std::uint64_t version = manager.state_version();  // reaps nothing yet: the work still runs
    EXPECT_EQ(manager.snapshot().location(CUDA0)->pending_event_count, 1);
    runtime.advance(100);
    return version;
  }
};

// --- 1. acquire/hold: repeated handles collapse (_unique_handles) -----------

TEST_F(ParityFixture, AcquireKeepsTheFirstOccurrenceOfEachHandleAndIgnoresRepeats) {
  const std::uint64_t before = manager.state_version();
  ResidencyLease lease = manager.acquire({a, b, a}, PAGEABLE_HOST);
  EXPECT_EQ(lease.handles(), (std::vector<ResidencyHandle>{a, b}));
  EXPECT_EQ(manager.state_version(), before + 1);
  const ResidencySnapshot snapshot = manager.snapshot();
  EXPECT_EQ(snapshot.value(a)->at(PAGEABLE_HOST)->use_count, 1);
  EXPECT_EQ(snapshot.location(PAGEABLE_HOST)->use_count, 2);
  EXPECT_TRUE(same_contents(lease.value(a), make_value(8, 1.0f)));
  lease.release();
  EXPECT_EQ(manager.snapshot().location(PAGEABLE_HOST)->use_count, 0);
}

TEST_F(ParityFixture, HoldCountsEachHandleOnce) {
  ResidencyHold hold = manager.hold({b, b, a, b}, PAGEABLE_HOST);
  EXPECT_EQ(hold.handles(), (std::vector<ResidencyHandle>{b, a}));
  EXPECT_EQ(manager.snapshot().value(b)->at(PAGEABLE_HOST)->hold_count, 1);
  EXPECT_EQ(manager.snapshot().location(PAGEABLE_HOST)->hold_count, 2);
  hold.release();
  EXPECT_EQ(manager.snapshot().location(PAGEABLE_HOST)->hold_count, 0);
}

// --- 2. ResidencyPlan positional order ---------------------------------------

TEST_F(ParityFixture, PlanPositionalOrderIsNameEnterExitReservationsReclaim) {
  const ResidencyHandle lazy =
      manager.register_source(ResidencyValueSpec("Blob", 32, 32, ReplicaMode::replicable,
                                                 Recoverability::reconstructible),
                              [] { return make_value(8, 5.0f); });
  const ResidencyAction enter = EnsureResident{lazy, PAGEABLE_HOST};
  const ResidencyAction exit_action = DropResident{lazy, PAGEABLE_HOST};
  const MemoryReservation reservation(PAGEABLE_HOST, 0, "workspace");
  const ResidencyPlan plan{"positional-plan", {enter}, {exit_action}, {reservation}};
  EXPECT_EQ(plan.enter, std::vector<ResidencyAction>{enter});
  EXPECT_EQ(plan.exit, std::vector<ResidencyAction>{exit_action});
  EXPECT_EQ(plan.reservations, std::vector<MemoryReservation>{reservation});
  EXPECT_TRUE(plan.reclaim.empty());

  ResidencyScope scope = manager.scope(plan);
  scope.enter();
  EXPECT_EQ(resident_at(manager, lazy), std::vector<ResidencyLocation>{PAGEABLE_HOST});
  scope.close();
  EXPECT_TRUE(resident_at(manager, lazy).empty());
}

// --- 3. budgets keep the caller's order --------------------------------------

TEST(Parity, BudgetedLocationsAreRegisteredInTheCallersOrder) {
  auto fixture = make_fixture({{CUDA1, 4096}, {PINNED_HOST, 4096}, {CUDA0, 4096}});
  ResidencyManager& manager = *fixture.manager;
  const std::vector<ResidencyLocation> budgeted{CUDA1, PINNED_HOST, CUDA0};
  EXPECT_EQ(manager.locations(), budgeted);
  const ResidencyHandle value = manager.adopt(make_value(4), std::nullopt, ReplicaMode::replicable);
  const std::vector<ResidencyLocation> all{CUDA1, PINNED_HOST, CUDA0, PAGEABLE_HOST};
  EXPECT_EQ(manager.locations(), all);
  std::vector<ResidencyLocation> in_snapshot;
  for (const auto& location : manager.snapshot().locations) in_snapshot.push_back(location.location);
  EXPECT_EQ(in_snapshot, all);
  const ResidencyPlanExplanation explanation = manager.explain(ResidencyPlan{"p", {EnsureResident{value, CUDA0}}});
  std::vector<ResidencyLocation> in_peaks;
  for (const auto& [location, bytes] : explanation.predicted_peak_bytes) in_peaks.push_back(location);
  EXPECT_EQ(in_peaks, all);
}

TEST(Parity, ALocationBudgetedTwiceIsAnArgumentError) {
  auto fixture = make_fixture();
  ManagerOptions options;
  options.runtime = fixture.runtime;
  options.budgets = {{CUDA0, 10}, {PINNED_HOST, 5}, {CUDA0, 20}};
  const std::string message = message_of<std::invalid_argument>([&] { ResidencyManager manager(options); });
  EXPECT_TRUE(contains(message, "cuda:0 more than once")) << message;
}

// --- 4. no-op move with an explicit source equal to the destination -----------

TEST_F(ParityFixture, NoOpMoveWithAnExplicitSourceEqualToTheDestinationReportsThatSource) {
  manager.move(a, CUDA0);
  const ResidencyPlanExplanation explanation =
      manager.explain(ResidencyPlan{"p", {MoveResident{a, CUDA0, CUDA0}, MoveResident{a, CUDA0, std::nullopt}}});
  ASSERT_EQ(explanation.actions.size(), 2u);
  EXPECT_TRUE(explanation.actions[0].no_op);
  EXPECT_EQ(explanation.actions[0].source, CUDA0);
  EXPECT_TRUE(explanation.actions[1].no_op);
  EXPECT_EQ(explanation.actions[1].source, std::nullopt);  // implicit: no other replica to move from

  const std::uint64_t version = manager.state_version();
  const ResidencyTransitionReport explicit_source = manager.move(a, CUDA0, CUDA0);
  EXPECT_TRUE(explicit_source.no_op);
  EXPECT_EQ(explicit_source.source, CUDA0);
  EXPECT_EQ(explicit_source.destination, CUDA0);
  const ResidencyTransitionReport implicit_source = manager.move(a, CUDA0);
  EXPECT_TRUE(implicit_source.no_op);
  EXPECT_EQ(implicit_source.source, std::nullopt);
  EXPECT_EQ(manager.state_version(), version);  // no-ops never bump
}

// --- 5. explain corner cases -------------------------------------------------

TEST_F(ParityFixture, ExplainOfAnActionOnAValueDiscardedEarlierInThePlanReportsZeroBytes) {
  const ResidencyPlanExplanation explanation =
      manager.explain(ResidencyPlan{"p", {DiscardValue{a}, EnsureResident{a, CUDA0}}});
  ASSERT_EQ(explanation.actions.size(), 2u);
  EXPECT_EQ(explanation.actions[0].logical_nbytes, 32);
  const ResidencyActionExplanation& after_discard = explanation.actions[1];
  EXPECT_FALSE(after_discard.executable);
  EXPECT_FALSE(after_discard.no_op);
  EXPECT_EQ(after_discard.logical_nbytes, 0);
  EXPECT_EQ(after_discard.storage_nbytes, 0);
  EXPECT_EQ(after_discard.source, std::nullopt);
  EXPECT_EQ(after_discard.destination, std::nullopt);
  EXPECT_TRUE(contains(after_discard.reason.value_or(""), "is discarded"));
  EXPECT_FALSE(explanation.feasible);
}

TEST_F(ParityFixture, ExplainOfAMoveToAnInvalidDestinationReportsTheSourceLocationAsItsSource) {
  const ResidencyHandle lazy = manager.register_source(
      ResidencyValueSpec("Blob", 32, 32, ReplicaMode::replicable, Recoverability::reconstructible),
      [] { return make_value(8); }, PINNED_HOST);
  const ResidencyLocation missing = cuda_location(9);  // the simulated runtime has two devices
  const ResidencyPlanExplanation explanation = manager.explain(
      ResidencyPlan{"p", {MoveResident{lazy, missing, std::nullopt}, MoveResident{a, missing, std::nullopt}}});
  ASSERT_EQ(explanation.actions.size(), 1u);
  EXPECT_FALSE(explanation.actions[0].executable);
  EXPECT_EQ(explanation.actions[0].source, PINNED_HOST);
  EXPECT_EQ(explanation.actions[0].destination, missing);
  EXPECT_TRUE(contains(explanation.reason.value_or(""), "require available CUDA"));
  // An adopted value has no registered source location: no source.
  const ResidencyPlanExplanation adopted =
      manager.explain(ResidencyPlan{"p", {MoveResident{a, missing, std::nullopt}}});
  EXPECT_EQ(adopted.actions[0].source, std::nullopt);
}

// --- 6. pending-lease reaping points -----------------------------------------

TEST_F(ParityFixture, ReserveDoesNotReapCompletedPendingLeases) {
  const std::uint64_t version = completed_unreaped_lease();
  ResidencyReservation reservation = manager.reserve(PAGEABLE_HOST, 16, "workspace");
  EXPECT_TRUE(version_is(manager, version + 1));  // the reservation only
  EXPECT_EQ(manager.snapshot().location(CUDA0)->pending_event_count, 0);  // snapshot reaps
  reservation.release();
}

TEST_F(ParityFixture, ScopeExitReapsBeforeItRunsExitActions) {
  ResidencyScope scope = manager.scope(ResidencyPlan{"p", {}, {}, {MemoryReservation(PAGEABLE_HOST, 8, "w")}});
  scope.enter();
  const std::uint64_t version = completed_unreaped_lease();
  scope.close();
  EXPECT_TRUE(version_is(manager, version + 2));  // the reap, then the reservation release
}

TEST_F(ParityFixture, AcquireReapsBeforeValidatingItsStream) {
  const std::uint64_t version = completed_unreaped_lease();
  EXPECT_THROW(manager.acquire({a}, CUDA0, runtime.stream(1, 1)), std::invalid_argument);
  EXPECT_TRUE(version_is(manager, version + 1));  // the reap happened, nothing else
}

// --- 7. timestamps are positive Unix-like nanoseconds --------------------------

TEST_F(ParityFixture, TimestampsArePositiveUnixNanosecondsAndDeterministic) {
  const ResidencySnapshot snapshot = manager.snapshot();
  EXPECT_GE(snapshot.captured_at_ns, harness::SimulatedRuntimeOptions::default_start_ns);
  const ResidencyTransitionReport report = manager.ensure(a, CUDA0);
  EXPECT_GE(report.started_at_ns, snapshot.captured_at_ns);
  EXPECT_GE(report.completed_at_ns, report.started_at_ns);
  auto again = make_fixture();
  again.manager->adopt(make_value(8, 1.0f), std::nullopt, ReplicaMode::replicable);
  again.manager->adopt(make_value(8, 2.0f), std::nullopt, ReplicaMode::replicable);
  EXPECT_EQ(again.manager->snapshot().captured_at_ns, snapshot.captured_at_ns);
}

// --- 8. enum values outside their enumerators ----------------------------------

TEST_F(ParityFixture, EnumValuesOutsideTheirEnumeratorsAreArgumentErrorsBeforeAnythingIsInstalled) {
  const ResidencySnapshot before = manager.snapshot();
  const std::string adopt_message = message_of<std::invalid_argument>(
      [&] { manager.adopt(make_value(4), std::nullopt, static_cast<ReplicaMode>(42)); });
  EXPECT_TRUE(contains(adopt_message, "ReplicaMode")) << adopt_message;
  EXPECT_THROW(ResidencyValueSpec("Blob", 4, 4, static_cast<ReplicaMode>(42), Recoverability::reconstructible),
               std::invalid_argument);
  EXPECT_THROW(ResidencyValueSpec("Blob", 4, 4, ReplicaMode::replicable, static_cast<Recoverability>(7)),
               std::invalid_argument);
  ResidencyValueSpec spec("Blob", 16, 16, ReplicaMode::replicable, Recoverability::reconstructible);
  spec.replica_mode = static_cast<ReplicaMode>(-1);  // as a deserialiser might leave it
  EXPECT_THROW(manager.register_source(spec, [] { return make_value(4); }), std::invalid_argument);
  spec.replica_mode = ReplicaMode::replicable;
  spec.recoverability = static_cast<Recoverability>(9);
  EXPECT_THROW(manager.register_source(spec, [] { return make_value(4); }), std::invalid_argument);
  EXPECT_THROW(ResidencyLocation(static_cast<ResidencyLocationKind>(42)), std::invalid_argument);
  EXPECT_THROW(ResidencyLocation(static_cast<ResidencyLocationKind>(42), 3), std::invalid_argument);
  ResidencySnapshot after = manager.snapshot();
  after.captured_at_ns = before.captured_at_ns;
  EXPECT_EQ(after, before);  // nothing installed, no version bump
}

// --- 9. malformed handles --------------------------------------------------------

TEST_F(ParityFixture, HandlesWithBlankFieldsAreArgumentErrorsWhereverAccepted) {
  manager.ensure(a, CUDA0);
  const std::uint64_t version_before = manager.state_version();
  const ResidencySnapshot before = manager.snapshot();
  std::vector<ResidencyHandle> malformed;
  for (const std::string blank : {"", " ", "\t"}) {
    malformed.push_back(ResidencyHandle{blank, a.handle_id, a.value_type});
    malformed.push_back(ResidencyHandle{a.manager_id, blank, a.value_type});
    malformed.push_back(ResidencyHandle{a.manager_id, a.handle_id, blank});
  }
  for (const ResidencyHandle& handle : malformed) {
    EXPECT_THROW(manager.ensure(handle, PINNED_HOST), std::invalid_argument);
    EXPECT_THROW(manager.move(handle, PINNED_HOST), std::invalid_argument);
    EXPECT_THROW(manager.drop(handle, CUDA0), std::invalid_argument);
    EXPECT_THROW(manager.discard(handle), std::invalid_argument);
    EXPECT_THROW(manager.acquire({a, handle}, PAGEABLE_HOST), std::invalid_argument);
    EXPECT_THROW(manager.hold({handle}, PAGEABLE_HOST), std::invalid_argument);
    EXPECT_THROW(manager.explain(ResidencyPlan{"p", {DropResident{handle, CUDA0}}}), std::invalid_argument);
    EXPECT_THROW(manager.execute_actions({EnsureResident{a, CUDA1}, DiscardValue{handle}}), std::invalid_argument);
    ResidencyScope scope = manager.scope(ResidencyPlan{"p", {}, {DropResident{handle, CUDA0}}});
    EXPECT_THROW(scope.enter(), std::invalid_argument);
  }
  EXPECT_THROW(ResidencyValueSpec(" ", 4, 4, ReplicaMode::replicable, Recoverability::reconstructible),
               std::invalid_argument);
  EXPECT_THROW(validate_handle(ResidencyHandle{"m", "h", "\n"}), std::invalid_argument);
  EXPECT_THROW(validate_handle(ResidencyHandle{"m", "", "T"}), std::invalid_argument);
  EXPECT_THROW(validate_handle(ResidencyHandle{" \t\r\f\v", "h", "T"}), std::invalid_argument);
  EXPECT_NO_THROW(validate_handle(ResidencyHandle{" m", "\th", "\xC3\xA9"}));  // leading blanks, a UTF-8 byte
  EXPECT_NO_THROW(validate_handle(a));
  EXPECT_EQ(manager.state_version(), version_before);
  ResidencySnapshot after = manager.snapshot();
  after.captured_at_ns = before.captured_at_ns;
  EXPECT_EQ(after, before);
}

// Every record and call that needs non-empty text refuses the same blanks:
// what Python's str.strip() empties, as far as ASCII goes.
TEST_F(ParityFixture, EveryNonEmptyTextCheckRefusesTheSameBlanks) {
  const ResidencyHandle handle = a;
  for (const std::string blank : {"\f", "\v", "\x1c", "\x1f", " \f\r\n\t\v"}) {
    SCOPED_TRACE(::testing::PrintToString(blank));
    EXPECT_THROW(validate_handle(ResidencyHandle{blank, "1", "Blob"}), std::invalid_argument);
    EXPECT_THROW(ResidencyValueSpec(blank, 4, 4, ReplicaMode::replicable, Recoverability::reconstructible),
                 std::invalid_argument);
    // A value's type name becomes its handles' value_type.
    EXPECT_THROW(ResidentValue(blank, {}), std::invalid_argument);
    EXPECT_THROW(MemoryReservation(PINNED_HOST, 1, blank), std::invalid_argument);
    EXPECT_THROW(manager.execute_actions({}, blank), std::invalid_argument);
    EXPECT_THROW(manager.reserve(PINNED_HOST, 1, blank), std::invalid_argument);
    EXPECT_THROW(ResidencyRequest(blank, {{handle, PAGEABLE_HOST}}), std::invalid_argument);
    EXPECT_THROW(ResidencyReservationSnapshot(PINNED_HOST, 1, blank), std::invalid_argument);
    EXPECT_THROW(ResidencySnapshot(blank, 3, {}, {}, {}, 10), std::invalid_argument);
    EXPECT_THROW(ResidencyEviction(DropResident{handle, PINNED_HOST}, 0, PINNED_HOST, 1, blank),
                 std::invalid_argument);
  }
  // A non-breaking space (UTF-8) is text, as is any other byte outside ASCII.
  EXPECT_NO_THROW(MemoryReservation(PINNED_HOST, 1, "\xC2\xA0"));
  EXPECT_NO_THROW(ResidencyRequest("\xC2\xA0", {{handle, PAGEABLE_HOST}}));
}

// --- 10. abandoned scopes are diagnosed --------------------------------------------

TEST_F(ParityFixture, AnAbandonedActiveScopeIsReportedNamingItsPlan) {
  {
    ResidencyScope scope =
        manager.scope(ResidencyPlan{"layer-7", {}, {}, {MemoryReservation(PAGEABLE_HOST, 8, "activations")}});
    scope.enter();
  }
  const std::vector<std::string> diagnostics = manager.diagnostics();
  ASSERT_EQ(diagnostics.size(), 1u);
  EXPECT_TRUE(contains(diagnostics[0], "scope for plan 'layer-7' was abandoned")) << diagnostics[0];
  EXPECT_EQ(manager.snapshot().location(PAGEABLE_HOST)->reserved_bytes, 0);
  // A scope that was never entered, or was closed, is not abandoned.
  { ResidencyScope idle = manager.scope(ResidencyPlan{"idle"}); }
  {
    ResidencyScope closed = manager.scope(ResidencyPlan{"closed"});
    closed.enter();
    closed.close();
  }
  EXPECT_EQ(manager.diagnostics().size(), 1u);
}

// --- 11. the reference's key phrases in error messages -------------------------------

TEST_F(ParityFixture, ErrorMessagesKeepTheReferencesKeyPhrases) {
  const ResidencyHandle exclusive = manager.adopt(make_value(4, 9.0f));
  std::string message = message_of<ResidencyOwnershipError>([&] { manager.ensure(exclusive, CUDA0); });
  EXPECT_TRUE(contains(message, "use MoveResident")) << message;

  message = message_of<ResidencyUnavailableError>([&] { manager.move(a, CUDA0, PINNED_HOST); });
  EXPECT_TRUE(contains(message, "Explicit source")) << message;

  message = message_of<std::invalid_argument>([] { ResidencyLocation::parse("cuda"); });
  EXPECT_TRUE(contains(message, "indexed")) << message;
  for (const char* text : {"cuda:00", "cuda:01", "cuda:-1", "disk"}) {
    message = message_of<std::invalid_argument>([&] { ResidencyLocation::parse(text); });
    EXPECT_TRUE(contains(message, "canonical")) << message;
  }
  for (const char* text : {"cuda:128", "cuda:256", "cuda:999"}) {
    message = message_of<std::invalid_argument>([&] { ResidencyLocation::parse(text); });
    EXPECT_TRUE(contains(message, "between 0 and 127")) << message;
  }
  message = message_of<std::invalid_argument>([] { cuda_location(128); });
  EXPECT_TRUE(contains(message, "between 0 and 127")) << message;

  message = message_of<std::invalid_argument>([&] { manager.ensure(a, cuda_location(5)); });
  EXPECT_TRUE(contains(message, "require available CUDA")) << message;
  EXPECT_TRUE(contains(message, "2 CUDA device")) << message;  // the C++ detail stays

  const ResidencyHandle reentrant = manager.register_source(
      ResidencyValueSpec("Blob", 16, 16, ReplicaMode::replicable, Recoverability::reconstructible), [&] {
        manager.snapshot();
        return make_value(4);
      });
  message = message_of<ResidencyReentrancyError>([&] { manager.ensure(reentrant, PAGEABLE_HOST); });
  EXPECT_TRUE(contains(message, "source callback is active")) << message;

  const auto spec = ResidencyValueSpec("Blob", 16, 16, ReplicaMode::replicable, Recoverability::reconstructible);
  const ResidencyHandle wrong_type = manager.register_source(spec, [] { return make_value(4, 1.0f, "Other"); });
  message = message_of<ResidencyMaterializationError>([&] { manager.ensure(wrong_type, PAGEABLE_HOST); });
  EXPECT_TRUE(contains(message, "Expected Blob, got Other")) << message;

  const ResidencyHandle wrong_size = manager.register_source(spec, [] { return make_value(3); });
  message = message_of<ResidencyMaterializationError>([&] { manager.ensure(wrong_size, PAGEABLE_HOST); });
  EXPECT_TRUE(contains(message, "Logical payload size mismatch")) << message;
  EXPECT_TRUE(contains(message, "expected=16, actual=12")) << message;

  const ResidencyHandle too_big = manager.register_source(
      ResidencyValueSpec("Pair", 32, 32, ReplicaMode::replicable, Recoverability::reconstructible),
      [] { return make_view_value(16, 4); });  // two 16-byte views of one 64-byte storage
  message = message_of<ResidencyMaterializationError>([&] { manager.ensure(too_big, PAGEABLE_HOST); });
  EXPECT_TRUE(contains(message, "Backing-storage charge mismatch")) << message;
  EXPECT_TRUE(contains(message, "charge=32, actual=64")) << message;
}

}  // namespace
}  // namespace fhelium::residency
