// Leases, holds, reservations, pending completion events, abandonment, close.
#include <gtest/gtest.h>

#include <memory>
#include <optional>

#include "support.hpp"

namespace fhelium::residency {
namespace {

using namespace testing;

struct LeaseFixture : ::testing::Test {
  SimulatedFixture fixture = make_fixture();
  ResidencyManager& manager = *fixture.manager;
  harness::SimulatedRuntime& runtime = *fixture.runtime;
  ResidencyHandle a = manager.adopt(make_value(8, 1.0f), std::nullopt, ReplicaMode::replicable);
  ResidencyHandle b = manager.adopt(make_value(8, 2.0f), std::nullopt, ReplicaMode::replicable);

  void SetUp() override {
    manager.ensure(a, CUDA0);
    manager.ensure(b, CUDA0);
  }
  MaterializationSnapshot at(const ResidencyHandle& handle, const ResidencyLocation& location) {
    const ResidencySnapshot snapshot = manager.snapshot();
    const MaterializationSnapshot* item = snapshot.value(handle)->at(location);
    EXPECT_NE(item, nullptr);
    return item ? *item : MaterializationSnapshot(location, 0, 0, 0, 0, 0, 0);
  }
};

TEST_F(LeaseFixture, AcquireIsAtomicAndNeverMaterializes) {
  int loads = 0;
  const ResidencyHandle lazy = manager.register_source(
      ResidencyValueSpec("Blob", 32, 32, ReplicaMode::exclusive, Recoverability::reconstructible), [&] {
        ++loads;
        return make_value(8);
      });
  const std::uint64_t version = manager.state_version();
  EXPECT_THROW(manager.acquire({a, lazy}, CUDA0, runtime.stream(0)), ResidencyUnavailableError);
  EXPECT_EQ(loads, 0);
  EXPECT_EQ(at(a, CUDA0).use_count, 0);
  EXPECT_EQ(manager.state_version(), version);
  EXPECT_THROW(manager.acquire({}, PAGEABLE_HOST), std::invalid_argument);
  EXPECT_THROW(manager.acquire({a}, CUDA0), std::invalid_argument);  // CUDA needs a consumer stream
  EXPECT_THROW(manager.acquire({a}, PAGEABLE_HOST, runtime.stream(0)), std::invalid_argument);
  EXPECT_THROW(manager.acquire({a}, CUDA0, runtime.stream(1)), std::invalid_argument);
  EXPECT_THROW(manager.acquire({a}, cuda_location(6), runtime.stream(0)), std::invalid_argument);
  EXPECT_EQ(manager.state_version(), version);
}

// A host lease of one value is granted in a lane of the state gate; the
// calls on it that take the gate (a consumer stream, a handle it does not
// cover, an abandonment) find it there like a lease granted under the gate.
TEST_F(LeaseFixture, AHostLeaseOfOneValueAnswersCallsUnderTheGateLikeAnyOther) {
  const ResidentValue expected = make_value(8, 1.0f);  // a's value
  ResidencyLease lease = manager.acquire({a}, PAGEABLE_HOST);
  try {
    lease.add_consumer_stream(runtime.stream(0));
    ADD_FAILURE() << "a host lease took a consumer stream";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("does not use CUDA streams"), std::string::npos) << error.what();
  }
  try {
    lease.value(b);
    ADD_FAILURE() << "a lease read a value it does not cover";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("not covered by this lease"), std::string::npos) << error.what();
  }
  EXPECT_TRUE(lease.value(a).fields().front().second.equal(expected.fields().front().second));
  EXPECT_EQ(at(a, PAGEABLE_HOST).use_count, 1);
  EXPECT_THROW(manager.drop(a, PAGEABLE_HOST), ResidencyInUseError);
  lease.release();
  EXPECT_EQ(at(a, PAGEABLE_HOST).use_count, 0);
  EXPECT_THROW(lease.value(a), ResidencyLifetimeClosedError);
  { ResidencyLease abandoned = manager.acquire({a}, PAGEABLE_HOST); }
  EXPECT_EQ(at(a, PAGEABLE_HOST).use_count, 0);
  const std::vector<std::string> diagnostics = manager.diagnostics();
  ASSERT_EQ(diagnostics.size(), 1u);
  EXPECT_NE(diagnostics.front().find("abandoned"), std::string::npos) << diagnostics.front();
  EXPECT_NO_THROW(manager.drop(a, PAGEABLE_HOST));
}

TEST_F(LeaseFixture, RepeatedHandlesCountOnceInLargeRequestsToo) {
  std::vector<ResidencyHandle> many;
  for (int i = 0; i < 40; ++i) many.push_back(manager.adopt(make_value(1, static_cast<float>(i))));
  EXPECT_NO_THROW(manager.acquire(many, PAGEABLE_HOST).release());
  const std::vector<ResidencyHandle> unique = many;
  many.push_back(many[17]);
  many.push_back(many[0]);
  ResidencyHold hold = manager.hold(many, PAGEABLE_HOST);
  EXPECT_EQ(hold.handles(), unique);  // first occurrences, in order
  EXPECT_EQ(location_state(manager, PAGEABLE_HOST).hold_count, 40);
  EXPECT_EQ(at(many[17], PAGEABLE_HOST).hold_count, 1);
  hold.release();
  EXPECT_EQ(location_state(manager, PAGEABLE_HOST).hold_count, 0);
}

TEST_F(LeaseFixture, OneValueLifetimesShareThatValuesHandleList) {
  ResidencyLease first = manager.acquire({a}, PAGEABLE_HOST);
  ResidencyLease second = manager.acquire({a}, PAGEABLE_HOST);
  ResidencyHold hold = manager.hold({a}, PAGEABLE_HOST);
  ResidencyLease collapsed = manager.acquire({a, a}, PAGEABLE_HOST);  // one value, asked for twice
  ResidencyLease other = manager.acquire({b}, PAGEABLE_HOST);
  EXPECT_EQ(first.handles(), std::vector<ResidencyHandle>{a});
  EXPECT_EQ(collapsed.handles(), std::vector<ResidencyHandle>{a});
  EXPECT_EQ(other.handles(), std::vector<ResidencyHandle>{b});
  EXPECT_EQ(&first.handles(), &second.handles());  // the value's own list, not a copy each
  EXPECT_EQ(&first.handles(), &hold.handles());
  EXPECT_NE(&first.handles(), &other.handles());
  EXPECT_EQ(at(a, PAGEABLE_HOST).use_count, 3);
  EXPECT_EQ(at(a, PAGEABLE_HOST).hold_count, 1);

  // The list outlives the lease that made it, the value's discard and the manager's close.
  const std::vector<ResidencyHandle>* shared = &second.handles();
  first.release();
  ResidencyLease moved = std::move(second);
  EXPECT_TRUE(second.handles().empty());  // NOLINT(bugprone-use-after-move): a moved-from lease covers nothing
  EXPECT_EQ(&moved.handles(), shared);
  moved.release();
  hold.release();
  collapsed.release();
  other.release();
  manager.discard(a);
  EXPECT_EQ(moved.handles(), std::vector<ResidencyHandle>{a});
  manager.close();
  EXPECT_EQ(moved.handles(), std::vector<ResidencyHandle>{a});
}

TEST(Lifetimes, HandleListsStayReadableAfterTheManagerThatIssuedThemIsGone) {
  SimulatedFixture fixture = make_fixture();
  const ResidencyHandle one = fixture.manager->adopt(make_value(4, 1.0f));
  const ResidencyHandle two = fixture.manager->adopt(make_value(4, 2.0f));
  ResidencyLease borrowed = fixture.manager->acquire({one}, PAGEABLE_HOST);  // the value's own list
  ResidencyHold owned = fixture.manager->hold({one, two}, PAGEABLE_HOST);   // a list of its own
  borrowed.release();
  owned.release();
  fixture.manager.reset();  // closes and destroys the manager; the lifetimes keep its core
  EXPECT_EQ(borrowed.handles(), std::vector<ResidencyHandle>{one});
  EXPECT_EQ(owned.handles(), (std::vector<ResidencyHandle>{one, two}));
  ResidencyLease moved = std::move(borrowed);
  EXPECT_EQ(moved.handles(), std::vector<ResidencyHandle>{one});
  EXPECT_TRUE(borrowed.handles().empty());  // NOLINT(bugprone-use-after-move): a moved-from lease covers nothing
}

TEST_F(LeaseFixture, LeasedValuesAreIdenticalAndUnreadableAfterRelease) {
  auto lease = manager.acquire({a, b}, PAGEABLE_HOST);
  EXPECT_TRUE(lease.active());
  EXPECT_EQ(lease.handles(), (std::vector<ResidencyHandle>{a, b}));
  EXPECT_TRUE(same_contents(lease.value(b), make_value(8, 2.0f)));
  EXPECT_EQ(at(a, PAGEABLE_HOST).use_count, 1);
  const ResidencyHandle other = manager.adopt(make_value(2));
  EXPECT_THROW(lease.value(other), std::invalid_argument);
  EXPECT_THROW(lease.add_consumer_stream(runtime.stream(0)), std::invalid_argument);  // host lease
  lease.release();  // host leases end immediately
  EXPECT_FALSE(lease.active());
  EXPECT_EQ(at(a, PAGEABLE_HOST).use_count, 0);
  EXPECT_EQ(at(a, PAGEABLE_HOST).pending_event_count, 0);
  EXPECT_THROW(lease.value(a), ResidencyLifetimeClosedError);
  EXPECT_THROW(lease.add_consumer_stream(runtime.stream(0)), ResidencyLifetimeClosedError);
  lease.release();
}

TEST_F(LeaseFixture, ProtectedMaterializationsCannotBeRemoved) {
  auto lease = manager.acquire({a}, CUDA0, runtime.stream(0));
  auto hold = manager.hold({a}, PAGEABLE_HOST);
  try {
    manager.drop(a, CUDA0);
    FAIL();
  } catch (const ResidencyInUseError& error) {
    EXPECT_NE(std::string(error.what()).find("active_reads=1, holds=0, pending_events=0"), std::string::npos);
  }
  EXPECT_THROW(manager.move(a, CUDA1, CUDA0), ResidencyInUseError);
  EXPECT_THROW(manager.move(a, CUDA1), ResidencyInUseError);  // implicit source is pageable, held
  EXPECT_THROW(manager.discard(a), ResidencyInUseError);
  EXPECT_THROW(manager.drop(a, PAGEABLE_HOST), ResidencyInUseError);
  EXPECT_EQ(resident_at(manager, a), (std::vector<ResidencyLocation>{PAGEABLE_HOST, CUDA0}));
  EXPECT_NO_THROW(manager.ensure(a, CUDA1));  // replication is not removal
  hold.release();
  hold.release();
  EXPECT_FALSE(hold.active());
  manager.drop(a, PAGEABLE_HOST);
}

TEST_F(LeaseFixture, CudaReleaseKeepsProtectionPendingUntilTheEventCompletes) {
  const c10::Stream consumer = runtime.stream(0, 1);
  auto lease = manager.acquire({a, b}, CUDA0, consumer);
  runtime.enqueue(consumer, 100);  // a kernel reading a and b
  lease.release();
  MaterializationSnapshot item = at(a, CUDA0);
  EXPECT_EQ(item.use_count, 0);
  EXPECT_EQ(item.pending_event_count, 1);
  EXPECT_EQ(location_state(manager, CUDA0).pending_event_count, 2);
  EXPECT_THROW(manager.drop(a, CUDA0), ResidencyInUseError);
  const ResidencyPlan drop_plan{"drop", {DropResident{a, CUDA0}}};
  EXPECT_FALSE(manager.explain(drop_plan).feasible);
  runtime.advance(99);
  EXPECT_EQ(at(a, CUDA0).pending_event_count, 1);
  const std::uint64_t version = manager.state_version();
  runtime.advance(1);
  // explain sees the completion but reaps nothing: the version it checks stays current.
  EXPECT_TRUE(manager.explain(drop_plan, version).feasible);
  EXPECT_NO_THROW(manager.explain(drop_plan, version));
  EXPECT_EQ(at(a, CUDA0).pending_event_count, 0);     // the snapshot reaps
  EXPECT_NO_THROW(manager.drop(a, CUDA0));
}

TEST_F(LeaseFixture, EveryConsumerStreamMustFinish) {
  const c10::Stream first = runtime.stream(0, 1);
  const c10::Stream second = runtime.stream(0, 2);
  auto lease = manager.acquire({a}, CUDA0, first);
  EXPECT_THROW(lease.add_consumer_stream(runtime.stream(1, 2)), std::invalid_argument);
  lease.add_consumer_stream(second);
  lease.add_consumer_stream(second);  // duplicates collapse
  runtime.enqueue(first, 10);
  runtime.enqueue(second, 50);
  const std::int64_t events_before = runtime.events_recorded();
  lease.release();
  EXPECT_EQ(runtime.events_recorded(), events_before + 2);
  runtime.advance(20);
  EXPECT_EQ(at(a, CUDA0).pending_event_count, 1);
  runtime.complete(second);
  EXPECT_EQ(at(a, CUDA0).pending_event_count, 0);
}

TEST_F(LeaseFixture, ReleaseWithWaitSynchronizes) {
  const c10::Stream consumer = runtime.stream(0, 1);
  auto lease = manager.acquire({a}, CUDA0, consumer);
  runtime.enqueue(consumer, 500);
  const std::int64_t before = runtime.now_ns();
  lease.release(true);
  EXPECT_EQ(runtime.now_ns(), before + 500);  // the wait took the work's time
  EXPECT_EQ(at(a, CUDA0).pending_event_count, 0);
}

TEST_F(LeaseFixture, WorkThatNeverCompletesKeepsProtectionAndFailsWaits) {
  const c10::Stream consumer = runtime.stream(0, 1);
  auto lease = manager.acquire({a}, CUDA0, consumer);
  runtime.enqueue(consumer, harness::SimulatedRuntime::never);
  EXPECT_THROW(lease.release(true), std::runtime_error);
  EXPECT_FALSE(lease.active());
  EXPECT_EQ(at(a, CUDA0).pending_event_count, 1);
  runtime.advance(1'000'000'000);
  EXPECT_EQ(at(a, CUDA0).pending_event_count, 1);
  EXPECT_THROW(manager.drop(a, CUDA0), ResidencyInUseError);
  // Unrelated work is unaffected.
  EXPECT_NO_THROW(manager.drop(b, CUDA0));
  EXPECT_THROW(manager.close(), ResidencyInUseError);
  EXPECT_FALSE(manager.diagnostics().empty());
  manager.close(true, true);
  EXPECT_TRUE(manager.closed());
}

TEST_F(LeaseFixture, AbandonedLifetimesAreReleasedAndReported) {
  const c10::Stream consumer = runtime.stream(0, 1);
  {
    auto lease = manager.acquire({a}, CUDA0, consumer);
    runtime.enqueue(consumer, 70);
    auto hold = manager.hold({b}, CUDA0);
    auto reservation = manager.reserve(CUDA1, 5, "scratch");
  }
  const ResidencySnapshot snapshot = manager.snapshot();
  EXPECT_EQ(snapshot.location(CUDA0)->use_count, 0);
  EXPECT_EQ(snapshot.location(CUDA0)->pending_event_count, 0);  // the lease waited for its stream
  EXPECT_EQ(snapshot.location(CUDA0)->hold_count, 0);
  EXPECT_EQ(snapshot.location(CUDA1)->reserved_bytes, 0);
  const auto diagnostics = manager.diagnostics();
  ASSERT_EQ(diagnostics.size(), 3u);
  for (const auto& message : diagnostics) EXPECT_NE(message.find("abandoned"), std::string::npos) << message;
}

TEST_F(LeaseFixture, MovedLifetimesTransferOwnership) {
  auto lease = manager.acquire({a}, PAGEABLE_HOST);
  ResidencyLease moved = std::move(lease);
  EXPECT_FALSE(lease.active());  // NOLINT(bugprone-use-after-move): moved-from state is specified
  EXPECT_TRUE(moved.active());
  auto other = manager.acquire({b}, PAGEABLE_HOST);
  moved = std::move(other);  // releases a's lease
  EXPECT_EQ(at(a, PAGEABLE_HOST).use_count, 0);
  EXPECT_EQ(at(b, PAGEABLE_HOST).use_count, 1);
}

TEST_F(LeaseFixture, CloseChecksLifetimesAndThenRejectsUse) {
  auto hold = manager.hold({a}, CUDA0);
  auto reservation = manager.reserve(PAGEABLE_HOST, 1, "r");
  try {
    manager.close();
    FAIL();
  } catch (const ResidencyInUseError& error) {
    EXPECT_NE(std::string(error.what()).find("holds=1, reservations=1"), std::string::npos) << error.what();
  }
  hold.release();
  reservation.release();
  const c10::Stream consumer = runtime.stream(0, 1);
  auto lease = manager.acquire({a}, CUDA0, consumer);
  runtime.enqueue(consumer, 30);
  lease.release();
  manager.close();  // wait=true synchronizes the pending event
  EXPECT_TRUE(manager.closed());
  manager.close();  // idempotent
  EXPECT_THROW(manager.snapshot(), ResidencyClosedError);
  EXPECT_THROW(manager.adopt(make_value(1)), ResidencyClosedError);
  EXPECT_THROW(manager.ensure(a, CUDA1), ResidencyClosedError);
  EXPECT_THROW(manager.state_version(), ResidencyClosedError);
}

TEST_F(LeaseFixture, ForcedCloseClearsActiveLifetimes) {
  auto lease = manager.acquire({a}, PAGEABLE_HOST);
  auto hold = manager.hold({b}, PAGEABLE_HOST);
  manager.close(true, true);
  EXPECT_THROW(lease.value(a), ResidencyLifetimeClosedError);
  EXPECT_NO_THROW(lease.release());
  EXPECT_NO_THROW(hold.release());
  EXPECT_THROW(manager.acquire({a}, PAGEABLE_HOST), ResidencyClosedError);
}

TEST(Lifetimes, OutliveTheirManagerObject) {
  auto runtime = std::make_shared<harness::SimulatedRuntime>();
  std::optional<ResidencyLease> lease;
  ResidencyHandle handle;
  {
    ResidencyManager manager(ManagerOptions{{}, 16, runtime, {}});
    handle = manager.adopt(make_value(4));
    lease.emplace(manager.acquire({handle}, PAGEABLE_HOST));
  }
  EXPECT_TRUE(same_contents(lease->value(handle), make_value(4)));
  lease->release();
}

// The manager's core holds the runtime, so the runtime's use count tells
// whether the core is still alive.
TEST(Lifetimes, TheCoreLivesExactlyAsLongAsTheLastLifetimeThatOutlivesTheManager) {
  auto runtime = std::make_shared<harness::SimulatedRuntime>();
  std::optional<ResidencyLease> lease;
  std::optional<ResidencyHold> hold;
  std::optional<ResidencyReservation> reservation;
  ResidencyHandle handle;
  {
    ResidencyManager manager(ManagerOptions{{}, 16, runtime, {}});
    EXPECT_EQ(runtime.use_count(), 2);
    handle = manager.adopt(make_value(4));
    for (int i = 0; i < 3; ++i) {  // lifetimes that end while the manager lives change nothing
      manager.acquire({handle}, PAGEABLE_HOST).release();
      { auto abandoned = manager.hold({handle}, PAGEABLE_HOST); }
    }
    lease.emplace(manager.acquire({handle}, PAGEABLE_HOST));
    hold.emplace(manager.hold({handle}, PAGEABLE_HOST));
    reservation.emplace(manager.reserve(PAGEABLE_HOST, 64, "late"));
    EXPECT_EQ(runtime.use_count(), 2);
  }
  EXPECT_EQ(runtime.use_count(), 2);  // three lifetimes keep the core
  EXPECT_TRUE(same_contents(lease->value(handle), make_value(4)));
  lease->release();
  EXPECT_EQ(runtime.use_count(), 2);
  hold.reset();  // abandoned, not released
  EXPECT_EQ(runtime.use_count(), 2);
  ResidencyReservation moved = std::move(*reservation);
  reservation.reset();  // moved from: ends nothing
  EXPECT_EQ(runtime.use_count(), 2);
  moved.release();  // the last one: the core goes with it
  EXPECT_EQ(runtime.use_count(), 1);
  moved.release();  // idempotent, and touches nothing
  EXPECT_FALSE(moved.active());
  EXPECT_THROW(lease->value(handle), ResidencyLifetimeClosedError);
}

TEST(Lifetimes, AManagerWhoseLifetimesHaveEndedTakesItsCoreWithIt) {
  auto runtime = std::make_shared<harness::SimulatedRuntime>();
  {
    ResidencyManager manager(ManagerOptions{{}, 16, runtime, {}});
    const ResidencyHandle handle = manager.adopt(make_value(4));
    auto lease = manager.acquire({handle}, PAGEABLE_HOST);
    auto reservation = manager.reserve(PAGEABLE_HOST, 8, "scratch");
    lease.release();
  }  // the reservation is abandoned before the manager goes
  EXPECT_EQ(runtime.use_count(), 1);
  {
    ResidencyManager never_lent(ManagerOptions{{}, 16, runtime, {}});
    never_lent.adopt(make_value(4));
  }
  EXPECT_EQ(runtime.use_count(), 1);
}

}  // namespace
}  // namespace fhelium::residency
