// Primitive transitions: adopt, register_source, ensure/copy, move, drop,
// discard, handle validation, aliasing, streams and location registration.
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include <set>

#include "fhelium/harness/forwarding_runtime.hpp"
#include "support.hpp"

namespace fhelium::residency {
namespace {

using namespace testing;

struct SourceFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

ResidencyValueSpec blob_spec(std::int64_t elements, ReplicaMode mode = ReplicaMode::exclusive) {
  return ResidencyValueSpec("Blob", elements * 4, elements * 4, mode, Recoverability::reconstructible);
}

TEST(Adopt, ChargesMaxOfLogicalAndStorageAndInfersLocation) {
  auto fixture = make_fixture();
  ResidencyManager& manager = *fixture.manager;
  const std::uint64_t before = manager.state_version();
  const ResidencyHandle handle = manager.adopt(make_value(256));
  EXPECT_EQ(handle.manager_id, manager.manager_id());
  EXPECT_EQ(handle.value_type, "Blob");
  EXPECT_FALSE(handle.handle_id.empty());
  // Registering pageable host and installing the materialization are two changes.
  EXPECT_EQ(manager.state_version(), before + 2);
  const ResidencySnapshot snapshot = manager.snapshot();
  const ResidencyValueSnapshot* value = snapshot.value(handle);
  ASSERT_NE(value, nullptr);
  EXPECT_EQ(value->spec.recoverability, Recoverability::must_preserve);
  EXPECT_EQ(value->spec.replica_mode, ReplicaMode::exclusive);
  EXPECT_EQ(value->spec.storage_nbytes, 1024);
  EXPECT_FALSE(value->has_source);
  ASSERT_EQ(value->materializations.size(), 1u);
  EXPECT_EQ(value->materializations[0].location, PAGEABLE_HOST);
  EXPECT_EQ(location_state(manager, PAGEABLE_HOST).used_bytes, 1024);

  // Views of one storage: logical 128 bytes, storage 256 bytes, charge 256.
  const ResidencyHandle views = manager.adopt(make_view_value(64, 16));
  const ResidencySnapshot after = manager.snapshot();
  EXPECT_EQ(after.value(views)->spec.logical_nbytes, 128);
  EXPECT_EQ(after.value(views)->spec.storage_nbytes, 256);
  EXPECT_EQ(after.location(PAGEABLE_HOST)->used_bytes, 1024 + 256);
}

TEST(Adopt, HandlesAreFreshAndRejectedByOtherManagers) {
  auto first = make_fixture();
  auto second = make_fixture();
  const ResidencyHandle a = first.manager->adopt(make_value(4));
  const ResidencyHandle b = first.manager->adopt(make_value(4));
  EXPECT_NE(a, b);
  EXPECT_NE(first.manager->manager_id(), second.manager->manager_id());
  EXPECT_THROW(second.manager->ensure(a, PAGEABLE_HOST), ResidencyHandleError);
  EXPECT_THROW(first.manager->drop(ResidencyHandle{first.manager->manager_id(), "999", "Blob"}, PAGEABLE_HOST),
               ResidencyHandleError);
  EXPECT_THROW(first.manager->drop(ResidencyHandle{first.manager->manager_id(), "x1", "Blob"}, PAGEABLE_HOST),
               ResidencyHandleError);
  // A handle id with the wrong value type is not the same handle.
  EXPECT_THROW(first.manager->discard(ResidencyHandle{a.manager_id, a.handle_id, "Other"}), ResidencyHandleError);
}

TEST(Adopt, RejectsWrongLocationMissingDeviceAndAliasedStorage) {
  auto fixture = make_fixture();
  ResidencyManager& manager = *fixture.manager;
  EXPECT_THROW(manager.adopt(make_value(4), CUDA0), ResidencyMaterializationError);
  EXPECT_THROW(manager.adopt(make_value(4), cuda_location(5)), std::invalid_argument);
  EXPECT_TRUE(manager.locations().empty());
  const ResidentValue value = make_value(8);
  manager.adopt(value);
  const ResidentValue alias("Blob", {{"data", value.field("data").narrow(0, 0, 4)}});
  EXPECT_THROW(manager.adopt(alias), ResidencyOwnershipError);
  const ResidencySnapshot snapshot = manager.snapshot();
  EXPECT_EQ(snapshot.values.size(), 1u);
  EXPECT_EQ(snapshot.location(PAGEABLE_HOST)->used_bytes, 32);
}

// Managed storage is refused before the budget is consulted, and storage the
// budget refused is not left claimed: it can be adopted once there is room.
TEST(Adopt, AliasingIsRefusedBeforeTheBudgetAndARefusedChargeClaimsNothing) {
  auto fixture = make_fixture({{PAGEABLE_HOST, 32}});
  ResidencyManager& manager = *fixture.manager;
  const ResidentValue value = make_value(8);  // 32 bytes: the whole budget
  const ResidencyHandle first = manager.adopt(value);
  const ResidentValue alias("Blob", {{"data", value.field("data").narrow(0, 0, 4)}});
  EXPECT_THROW(manager.adopt(alias), ResidencyOwnershipError);
  const ResidentValue fresh = make_value(8);
  const std::uint64_t version = manager.state_version();
  EXPECT_THROW(manager.adopt(fresh), ResidencyBudgetError);
  EXPECT_EQ(manager.state_version(), version);
  EXPECT_EQ(manager.snapshot().values.size(), 1u);
  manager.discard(first);
  const ResidencyHandle second = manager.adopt(fresh);
  EXPECT_EQ(resident_at(manager, second), std::vector<ResidencyLocation>{PAGEABLE_HOST});
  // And the first value's storage is free again too.
  EXPECT_THROW(manager.adopt(value), ResidencyBudgetError);
  manager.discard(second);
  EXPECT_EQ(resident_at(manager, manager.adopt(value)), std::vector<ResidencyLocation>{PAGEABLE_HOST});
}

TEST(Adopt, AtPinnedOrCudaNeedsAValueThatLivesThere) {
  auto fixture = make_fixture();
  const ResidentValue on_cuda = fixture.runtime->copy_to(make_value(16), CUDA1, std::nullopt);
  const ResidencyHandle handle = fixture.manager->adopt(on_cuda);
  EXPECT_EQ(resident_at(*fixture.manager, handle), std::vector<ResidencyLocation>{CUDA1});
  const ResidentValue pinned = fixture.runtime->copy_to(make_value(16), PINNED_HOST, std::nullopt);
  EXPECT_THROW(fixture.manager->adopt(pinned, PAGEABLE_HOST), ResidencyMaterializationError);
  EXPECT_EQ(resident_at(*fixture.manager, fixture.manager->adopt(pinned, PINNED_HOST)),
            std::vector<ResidencyLocation>{PINNED_HOST});
}

TEST(RegisterSource, IsLazyAndReconstructsWithATemporaryCharge) {
  auto fixture = make_fixture();
  ResidencyManager& manager = *fixture.manager;
  int loads = 0;
  const ResidencyHandle handle = manager.register_source(blob_spec(64), [&] {
    ++loads;
    return make_value(64, 5.0f);
  });
  EXPECT_EQ(loads, 0);
  EXPECT_EQ(manager.locations(), std::vector<ResidencyLocation>{PAGEABLE_HOST});
  const ResidencyValueSnapshot value = *manager.snapshot().value(handle);
  EXPECT_TRUE(value.has_source);
  EXPECT_EQ(value.source_location, PAGEABLE_HOST);
  EXPECT_TRUE(value.materializations.empty());

  const ResidencyTransitionReport report = manager.ensure(handle, CUDA0);
  EXPECT_EQ(loads, 1);
  EXPECT_EQ(report.source, PAGEABLE_HOST);
  EXPECT_EQ(report.destination, CUDA0);
  EXPECT_FALSE(report.no_op);
  EXPECT_EQ(resident_at(manager, handle), std::vector<ResidencyLocation>{CUDA0});
  const ResidencyLocationSnapshot host = location_state(manager, PAGEABLE_HOST);
  EXPECT_EQ(host.used_bytes, 0);
  EXPECT_EQ(host.reserved_bytes, 0);
  EXPECT_EQ(host.peak_used_bytes, 0);
  EXPECT_EQ(host.peak_charged_bytes, 256);  // the temporary reconstruction charge
  EXPECT_EQ(location_state(manager, CUDA0).used_bytes, 256);
  auto lease = manager.acquire({handle}, CUDA0, fixture.runtime->stream(0));
  EXPECT_TRUE(same_contents(lease.value(handle), make_value(64, 5.0f)));
}

TEST(RegisterSource, LoadingAtTheDestinationChargesOnce) {
  auto fixture = make_fixture({{PAGEABLE_HOST, 256}});
  ResidencyManager& manager = *fixture.manager;
  const ResidencyHandle handle = manager.register_source(blob_spec(64), [] { return make_value(64); });
  manager.ensure(handle, PAGEABLE_HOST);
  const ResidencyLocationSnapshot host = location_state(manager, PAGEABLE_HOST);
  EXPECT_EQ(host.used_bytes, 256);
  EXPECT_EQ(host.reserved_bytes, 0);
  EXPECT_EQ(host.peak_charged_bytes, 256);
  EXPECT_EQ(host.remaining_budget_bytes, 0);
  auto lease = manager.acquire({handle}, PAGEABLE_HOST);
  EXPECT_TRUE(same_contents(lease.value(handle), make_value(64)));
}

// A load that returns storage another value already owns is refused, also
// when the loaded value would only be copied from (the copy is fresh, but its
// bytes would be the other value's).
TEST(RegisterSource, LoadsThatAliasManagedStorageAreRefusedEvenWhenOnlyCopied) {
  auto fixture = make_fixture();
  ResidencyManager& manager = *fixture.manager;
  const ResidentValue owned = make_value(64, 2.0f);
  const ResidencyHandle owner = manager.adopt(owned);
  const ResidencyHandle echo =
      manager.register_source(blob_spec(64, ReplicaMode::replicable), [owned] { return owned; });
  for (const ResidencyLocation& at : {PAGEABLE_HOST, PINNED_HOST}) {
    const std::uint64_t version = manager.state_version();
    EXPECT_THROW(manager.ensure(echo, at), ResidencyOwnershipError) << at.name();
    EXPECT_TRUE(resident_at(manager, echo).empty());
    EXPECT_EQ(location_state(manager, PAGEABLE_HOST).reserved_bytes, 0);
    EXPECT_EQ(manager.state_version(), version);
  }
  EXPECT_EQ(resident_at(manager, owner), std::vector<ResidencyLocation>{PAGEABLE_HOST});
}

TEST(RegisterSource, RejectsMustPreserveAndNullSources) {
  auto fixture = make_fixture();
  EXPECT_THROW(fixture.manager->register_source(
                   ResidencyValueSpec("Blob", 4, 4, ReplicaMode::exclusive, Recoverability::must_preserve),
                   [] { return make_value(1); }),
               std::invalid_argument);
  EXPECT_THROW(fixture.manager->register_source(blob_spec(1), std::shared_ptr<ResidencySource>()),
               std::invalid_argument);
  EXPECT_THROW(fixture.manager->register_source(blob_spec(1), [] { return make_value(1); }, cuda_location(9)),
               std::invalid_argument);
  EXPECT_TRUE(fixture.manager->snapshot().values.empty());
}

// A load that is refused, or that throws, leaves nothing behind: neither when
// it would have been copied elsewhere (CUDA0 here) nor when it was made in
// the materialization it would have become at its own location. The
// temporary charge is returned, the failed copy registers no location, and
// the storage the loads returned was never claimed.
TEST(RegisterSource, BadMaterializationsAndLoadFailuresLeaveNothingBehind) {
  auto fixture = make_fixture();
  ResidencyManager& manager = *fixture.manager;
  const ResidentValue short_value = make_value(63);
  const ResidentValue other_type = make_value(64, 1, "Key");
  const ResidencyHandle wrong_size = manager.register_source(blob_spec(64), [short_value] { return short_value; });
  const ResidencyHandle wrong_type = manager.register_source(blob_spec(64), [other_type] { return other_type; });
  const ResidencyHandle wrong_place =
      manager.register_source(blob_spec(64), [] { return make_value(64); }, PINNED_HOST);
  const ResidencyHandle failing =
      manager.register_source(blob_spec(64), []() -> ResidentValue { throw SourceFailure("disk gone"); });
  const std::uint64_t version = manager.state_version();
  // Copied elsewhere after the load.
  EXPECT_THROW(manager.ensure(wrong_size, CUDA0), ResidencyMaterializationError);
  EXPECT_THROW(manager.ensure(wrong_type, CUDA0), ResidencyMaterializationError);
  EXPECT_THROW(manager.move(wrong_place, CUDA0), ResidencyMaterializationError);
  EXPECT_THROW(manager.ensure(failing, CUDA0), SourceFailure);  // type preserved
  // Kept where it was loaded.
  EXPECT_THROW(manager.ensure(wrong_size, PAGEABLE_HOST), ResidencyMaterializationError);
  EXPECT_THROW(manager.ensure(wrong_type, PAGEABLE_HOST), ResidencyMaterializationError);
  EXPECT_THROW(manager.ensure(wrong_place, PINNED_HOST), ResidencyMaterializationError);
  EXPECT_THROW(manager.ensure(failing, PAGEABLE_HOST), SourceFailure);
  EXPECT_EQ(manager.state_version(), version);
  const ResidencySnapshot snapshot = manager.snapshot();
  EXPECT_EQ(snapshot.location(CUDA0), nullptr);  // never registered by a failed copy
  for (const ResidencyLocation& at : {PAGEABLE_HOST, PINNED_HOST}) {
    EXPECT_EQ(snapshot.location(at)->used_bytes, 0) << at.name();
    EXPECT_EQ(snapshot.location(at)->reserved_bytes, 0) << at.name();
    EXPECT_EQ(snapshot.location(at)->peak_charged_bytes, 256) << at.name();
  }
  for (const auto& value : snapshot.values) EXPECT_TRUE(value.materializations.empty());
  EXPECT_NO_THROW(manager.adopt(short_value));
  EXPECT_NO_THROW(manager.adopt(other_type));
}

TEST(Ensure, ReplicatesReplicableAndRefusesExclusive) {
  auto fixture = make_fixture();
  ResidencyManager& manager = *fixture.manager;
  const ResidencyHandle shared = manager.adopt(make_value(16), std::nullopt, ReplicaMode::replicable);
  const ResidencyHandle exclusive = manager.adopt(make_value(16));
  const ResidencyTransitionReport report = manager.copy(shared, CUDA1);
  EXPECT_EQ(report.source, PAGEABLE_HOST);
  EXPECT_EQ(report.allocator_device, CUDA1.device());
  EXPECT_EQ(report.allocator_allocated_bytes_before, 0);
  EXPECT_EQ(report.allocator_allocated_bytes_after, 64);
  EXPECT_EQ(resident_at(manager, shared), (std::vector<ResidencyLocation>{PAGEABLE_HOST, CUDA1}));
  EXPECT_THROW(manager.ensure(exclusive, CUDA1), ResidencyOwnershipError);

  const std::uint64_t version = manager.state_version();
  const ResidencyTransitionReport again = manager.ensure(shared, CUDA1);
  EXPECT_TRUE(again.no_op);
  EXPECT_EQ(again.reason, "destination already resident");
  EXPECT_FALSE(again.source.has_value());
  EXPECT_EQ(manager.state_version(), version);  // no-ops do not bump
  EXPECT_EQ(manager.trace().back(), again);     // but they are traced
  auto lease = manager.acquire({shared}, CUDA1, fixture.runtime->stream(1));
  EXPECT_TRUE(same_contents(lease.value(shared), make_value(16)));
}

TEST(Move, MovesExclusiveValuesAndChoosesSourcesDeterministically) {
  auto fixture = make_fixture();
  ResidencyManager& manager = *fixture.manager;
  const ResidencyHandle exclusive = manager.adopt(make_value(16));
  EXPECT_EQ(manager.move(exclusive, CUDA0).source, PAGEABLE_HOST);
  EXPECT_EQ(resident_at(manager, exclusive), std::vector<ResidencyLocation>{CUDA0});
  EXPECT_EQ(manager.move(exclusive, PINNED_HOST).source, CUDA0);
  EXPECT_EQ(location_state(manager, CUDA0).used_bytes, 0);

  const ResidencyHandle shared = manager.adopt(fixture.runtime->copy_to(make_value(8), CUDA1, std::nullopt),
                                               std::nullopt, ReplicaMode::replicable);
  manager.ensure(shared, CUDA0);
  manager.ensure(shared, PINNED_HOST);
  // Pageable first, then pinned, then CUDA by index.
  EXPECT_EQ(manager.move(shared, PAGEABLE_HOST).source, PINNED_HOST);
  EXPECT_EQ(manager.move(shared, PINNED_HOST).source, PAGEABLE_HOST);
  EXPECT_EQ(manager.move(shared, PAGEABLE_HOST).source, PINNED_HOST);
  // Moving onto an existing replica removes only the source.
  const ResidencyTransitionReport onto = manager.move(shared, CUDA0);
  EXPECT_FALSE(onto.no_op);
  EXPECT_EQ(onto.source, PAGEABLE_HOST);
  EXPECT_EQ(resident_at(manager, shared), (std::vector<ResidencyLocation>{CUDA1, CUDA0}));
  // Explicit sources must be resident.
  EXPECT_THROW(manager.move(shared, PINNED_HOST, PAGEABLE_HOST), ResidencyUnavailableError);
  EXPECT_EQ(manager.move(shared, PINNED_HOST, CUDA1).source, CUDA1);
  auto lease = manager.acquire({shared}, PINNED_HOST);
  EXPECT_TRUE(same_contents(lease.value(shared), make_value(8)));
}

TEST(Move, NoOpReportsNoSourceAndNeverLoadedValuesKeepOnlyTheDestination) {
  auto fixture = make_fixture();
  ResidencyManager& manager = *fixture.manager;
  const ResidencyHandle value = manager.adopt(make_value(4));
  const ResidencyTransitionReport no_op = manager.move(value, PAGEABLE_HOST);
  EXPECT_TRUE(no_op.no_op);
  EXPECT_FALSE(no_op.source.has_value());
  EXPECT_EQ(no_op.reason, "destination already owns the selected replica");
  EXPECT_TRUE(manager.move(value, PAGEABLE_HOST, PAGEABLE_HOST).no_op);

  int loads = 0;
  const ResidencyHandle lazy = manager.register_source(blob_spec(4), [&] {
    ++loads;
    return make_value(4);
  });
  const ResidencyTransitionReport moved = manager.move(lazy, CUDA1);
  EXPECT_EQ(moved.source, PAGEABLE_HOST);
  EXPECT_EQ(loads, 1);
  EXPECT_EQ(resident_at(manager, lazy), std::vector<ResidencyLocation>{CUDA1});
  EXPECT_EQ(location_state(manager, PAGEABLE_HOST).reserved_bytes, 0);
}

TEST(Drop, RefusesTheLastMustPreserveCopyAndAllowsReconstructibleOnes) {
  auto fixture = make_fixture();
  ResidencyManager& manager = *fixture.manager;
  const ResidencyHandle kept = manager.adopt(make_value(4), std::nullopt, ReplicaMode::replicable);
  EXPECT_THROW(manager.drop(kept, PAGEABLE_HOST), ResidencyOwnershipError);
  const ResidencyTransitionReport absent = manager.drop(kept, CUDA0);
  EXPECT_TRUE(absent.no_op);
  EXPECT_EQ(absent.reason, "materialization already absent");
  EXPECT_EQ(manager.snapshot().location(CUDA0), nullptr);  // a no-op registers nothing
  manager.ensure(kept, CUDA0);
  EXPECT_EQ(manager.drop(kept, PAGEABLE_HOST).source, PAGEABLE_HOST);
  EXPECT_EQ(resident_at(manager, kept), std::vector<ResidencyLocation>{CUDA0});

  const ResidencyHandle lazy = manager.register_source(blob_spec(4), [] { return make_value(4); });
  manager.ensure(lazy, CUDA0);
  manager.drop(lazy, CUDA0);
  EXPECT_TRUE(resident_at(manager, lazy).empty());
  manager.ensure(lazy, CUDA0);  // reconstructs again
  EXPECT_EQ(resident_at(manager, lazy), std::vector<ResidencyLocation>{CUDA0});
}

TEST(Discard, KeepsTheHandleVisibleAndRejectsLaterUse) {
  auto fixture = make_fixture();
  ResidencyManager& manager = *fixture.manager;
  const ResidencyHandle value = manager.adopt(make_value(4), std::nullopt, ReplicaMode::replicable);
  manager.ensure(value, CUDA0);
  const ResidencyTransitionReport report = manager.discard(value);
  EXPECT_FALSE(report.no_op);
  EXPECT_FALSE(report.destination.has_value());
  const ResidencySnapshot snapshot = manager.snapshot();
  const ResidencyValueSnapshot* entry = snapshot.value(value);
  ASSERT_NE(entry, nullptr);
  EXPECT_TRUE(entry->discarded);
  EXPECT_TRUE(entry->materializations.empty());
  EXPECT_FALSE(entry->has_source);
  EXPECT_EQ(snapshot.location(PAGEABLE_HOST)->used_bytes, 0);
  EXPECT_EQ(snapshot.location(CUDA0)->used_bytes, 0);
  EXPECT_EQ(snapshot.location(CUDA0)->peak_used_bytes, 16);
  EXPECT_THROW(manager.discard(value), ResidencyHandleError);
  EXPECT_THROW(manager.ensure(value, CUDA0), ResidencyHandleError);
  EXPECT_THROW(manager.acquire({value}, PAGEABLE_HOST), ResidencyHandleError);

  const ResidencyHandle lazy = manager.register_source(blob_spec(4), [] { return make_value(4); });
  manager.discard(lazy);
  EXPECT_FALSE(manager.snapshot().value(lazy)->has_source);
}

TEST(Streams, AreValidatedBeforeNoOpDetectionWithoutChangingState) {
  auto fixture = make_fixture();
  ResidencyManager& manager = *fixture.manager;
  const ResidencyHandle value = manager.adopt(make_value(4), std::nullopt, ReplicaMode::replicable);
  manager.ensure(value, CUDA0, fixture.runtime->stream(0, 3));
  const ResidencySnapshot before = manager.snapshot();
  EXPECT_THROW(manager.ensure(value, PAGEABLE_HOST, fixture.runtime->stream(0)), std::invalid_argument);
  EXPECT_THROW(manager.ensure(value, CUDA0, fixture.runtime->stream(1)), std::invalid_argument);
  EXPECT_THROW(manager.move(value, CUDA0, std::nullopt, fixture.runtime->stream(1)), std::invalid_argument);
  EXPECT_THROW(manager.ensure(value, cuda_location(4)), std::invalid_argument);
  EXPECT_THROW(manager.move(value, CUDA1, cuda_location(4)), std::invalid_argument);
  const c10::Stream cpu_stream(c10::Stream::DEFAULT, c10::Device(c10::DeviceType::CPU));
  EXPECT_THROW(manager.ensure(value, CUDA1, cpu_stream), std::invalid_argument);
  ResidencySnapshot after = manager.snapshot();
  after.captured_at_ns = before.captured_at_ns;
  EXPECT_EQ(after, before);
}

TEST(Locations, RegisterBudgetsFirstThenOnFirstSuccessfulUse) {
  harness::SimulatedRuntimeOptions options;
  options.capacity_bytes[CUDA1] = 8;
  auto fixture = make_fixture({{CUDA0, 1000}, {PINNED_HOST, 1000}}, options);
  ResidencyManager& manager = *fixture.manager;
  // Budgeted locations keep the caller's order, not location order.
  EXPECT_EQ(manager.locations(), (std::vector<ResidencyLocation>{CUDA0, PINNED_HOST}));
  const ResidencyHandle value = manager.adopt(make_value(4), std::nullopt, ReplicaMode::replicable);
  EXPECT_THROW(manager.ensure(value, CUDA1), c10::OutOfMemoryError);  // allocator exhausted
  EXPECT_EQ(manager.locations(), (std::vector<ResidencyLocation>{CUDA0, PINNED_HOST, PAGEABLE_HOST}));
  manager.explain(ResidencyPlan{"probe", {EnsureResident{value, CUDA1}}});
  EXPECT_EQ(manager.locations().size(), 3u);
  EXPECT_THROW(ResidencyManager(ManagerOptions{{{cuda_location(2), 1}}, 16, fixture.runtime, {}}),
               std::invalid_argument);
  EXPECT_THROW(ResidencyManager(ManagerOptions{{{PAGEABLE_HOST, -1}}, 16, fixture.runtime, {}}),
               std::invalid_argument);
  EXPECT_THROW(ResidencyManager(ManagerOptions{{}, -1, fixture.runtime, {}}), std::invalid_argument);
}

TEST(Locations, PinnedHostWorksWithoutAPinningRuntimeUntilSomethingMaterializesThere) {
  harness::SimulatedRuntimeOptions options;
  options.can_pin = false;
  auto fixture = make_fixture({{PINNED_HOST, 64}}, options);
  ResidencyManager& manager = *fixture.manager;
  auto reservation = manager.reserve(PINNED_HOST, 16, "staging");
  const ResidencyHandle value = manager.adopt(make_value(4));
  EXPECT_TRUE(manager.drop(value, PINNED_HOST).no_op);
  EXPECT_TRUE(manager.explain(ResidencyPlan{"pin", {MoveResident{value, PINNED_HOST, {}}}}).feasible);
  EXPECT_THROW(manager.move(value, PINNED_HOST), ResidencyUnavailableError);
  EXPECT_EQ(resident_at(manager, value), std::vector<ResidencyLocation>{PAGEABLE_HOST});
  EXPECT_EQ(location_state(manager, PINNED_HOST).used_bytes, 0);
}

TEST(TorchRuntime, PageableIsRealAndMissingDevicesSayWhy) {
  const auto runtime = std::make_shared<TorchRuntime>();
  ResidencyManager manager(ManagerOptions{{}, 16, runtime, {}});
  const ResidencyHandle value = manager.adopt(make_value(32), std::nullopt, ReplicaMode::replicable);
  if (runtime->cuda_device_count() == 0) {
    try {
      manager.ensure(value, CUDA0);
      FAIL() << "cuda:0 should be unavailable";
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find("0 CUDA device"), std::string::npos) << error.what();
    }
  }
  if (!runtime->can_pin()) {
    EXPECT_THROW(manager.ensure(value, PINNED_HOST), ResidencyUnavailableError);
    EXPECT_EQ(manager.snapshot().location(PINNED_HOST), nullptr);
  }
  const ResidentValue copy = runtime->copy_to(make_value(32), PAGEABLE_HOST, std::nullopt);
  EXPECT_TRUE(same_contents(copy, make_value(32)));
  EXPECT_EQ(runtime->locate(copy), PAGEABLE_HOST);
  EXPECT_GT(runtime->now_ns(), 0);
}

TEST(Trace, IsBoundedAndClearable) {
  auto runtime = std::make_shared<harness::SimulatedRuntime>();
  ResidencyManager manager(ManagerOptions{{}, 2, runtime, {}});
  const ResidencyHandle value = manager.adopt(make_value(4), std::nullopt, ReplicaMode::replicable);
  manager.ensure(value, CUDA0);
  manager.ensure(value, CUDA1);
  manager.drop(value, CUDA0);
  const auto trace = manager.trace();
  ASSERT_EQ(trace.size(), 2u);
  EXPECT_EQ(trace[0].destination, CUDA1);
  EXPECT_TRUE(std::holds_alternative<DropResident>(trace[1].action));
  manager.clear_trace();
  EXPECT_TRUE(manager.trace().empty());
  ResidencyManager silent(ManagerOptions{{}, 0, runtime, {}});
  silent.ensure(silent.adopt(make_value(4)), PAGEABLE_HOST);
  EXPECT_TRUE(silent.trace().empty());
}

// The trace keeps reports in a compact form and rebuilds them: each must come
// back equal, field for field, to the report its call returned, for every
// kind of action, no-ops (with their reasons), allocator samples, plan
// actions, after the ring wraps and after the manager closes.
TEST(Trace, RebuildsEveryReportItsCallsReturned) {
  auto runtime = std::make_shared<harness::SimulatedRuntime>();
  ResidencyManager manager(ManagerOptions{{}, 9, runtime, {}});
  const ResidencyHandle shared = manager.adopt(make_value(8), std::nullopt, ReplicaMode::replicable);
  const ResidencyHandle exclusive = manager.adopt(make_value(4));
  const ResidencyHandle lazy = manager.register_source(blob_spec(8, ReplicaMode::replicable), [] { return make_value(8); });
  std::vector<ResidencyTransitionReport> returned;
  returned.push_back(manager.ensure(lazy, PINNED_HOST));       // a load
  returned.push_back(manager.copy(shared, CUDA1));             // allocator samples
  returned.push_back(manager.ensure(shared, CUDA1));           // a no-op with its reason
  returned.push_back(manager.move(exclusive, CUDA0));          // implicit source
  returned.push_back(manager.move(exclusive, PINNED_HOST, CUDA0, std::nullopt));
  returned.push_back(manager.drop(shared, PAGEABLE_HOST));
  returned.push_back(manager.drop(shared, PAGEABLE_HOST));     // already absent
  const ResidencyPlanReport plan = manager.execute_actions(
      {EnsureResident{lazy, PAGEABLE_HOST}, MoveResident{shared, CUDA0, CUDA1}, DropResident{lazy, PINNED_HOST}});
  for (const auto& report : plan.transitions) returned.push_back(report);
  returned.push_back(manager.discard(lazy));
  ASSERT_EQ(returned.size(), 11u);
  std::set<std::size_t> kinds;
  for (const auto& report : returned) kinds.insert(report.action.index());
  EXPECT_EQ(kinds.size(), 4u);  // every kind of action is traced

  const std::vector<ResidencyTransitionReport> last(returned.end() - 9, returned.end());  // the ring holds 9
  EXPECT_EQ(manager.trace(), last);
  EXPECT_EQ(manager.trace()[0].reason, "destination already resident");
  EXPECT_EQ(manager.trace()[4].reason, "materialization already absent");
  EXPECT_EQ(manager.trace()[1].allocator_device, CUDA0.device());
  const std::vector<ResidencyTransitionReport> before_close = manager.trace();
  manager.close();
  EXPECT_EQ(manager.trace(), before_close);  // the handles are rebuilt without the value records
}

// A full ring overwrites its records in place: a record reused for a value of
// another type (longer or shorter, or of the same length) takes that type.
TEST(Trace, AnOverwrittenRecordTakesItsNewValuesType) {
  ResidencyManager manager(ManagerOptions{{}, 1, std::make_shared<harness::SimulatedRuntime>(), {}});
  std::vector<ResidencyHandle> handles;
  for (const char* type : {"Blob", "KvCache", "Blob", "Bias", "AttentionWeightsLongName", "Blob"}) {
    handles.push_back(manager.adopt(make_value(2, 1.0f, type)));
  }
  for (const ResidencyHandle& handle : handles) {
    const ResidencyTransitionReport again = manager.ensure(handle, PAGEABLE_HOST);  // a no-op, traced
    ASSERT_EQ(manager.trace().size(), 1u);
    EXPECT_EQ(manager.trace().front(), again) << handle.value_type;
    EXPECT_EQ(action_handle(manager.trace().front().action).value_type, handle.value_type);
  }
}

// A runtime whose clock reads back in time at every other reading, as a
// system clock stepped back (or a counter clock re-anchored to it) would.
class SteppingBackClock final : public harness::ForwardingRuntime {
 public:
  using ForwardingRuntime::ForwardingRuntime;
  int readings = 0;

 private:
  std::int64_t do_now_ns() override {
    ++readings;
    return 1'000'000'000 + (readings % 2 == 0 ? -1'000 * readings : 1'000 * readings);
  }
};

TEST(Clock, SnapshotAndReportTimesNeverDecreaseWhenTheRuntimesClockStepsBack) {
  auto clock = std::make_shared<SteppingBackClock>(std::make_shared<harness::SimulatedRuntime>());
  ManagerOptions options;
  options.runtime = clock;
  ResidencyManager manager(std::move(options));
  const ResidencyHandle value = manager.adopt(make_value(4), std::nullopt, ReplicaMode::replicable);
  std::int64_t latest = 0;
  const auto later = [&](std::int64_t time, const char* what) {
    EXPECT_GE(time, latest) << what;
    latest = std::max(latest, time);
  };
  for (int round = 0; round < 4; ++round) {
    later(manager.snapshot().captured_at_ns, "snapshot");
    const ResidencyTransitionReport copied = manager.copy(value, PINNED_HOST);
    later(copied.started_at_ns, "copy start");
    later(copied.completed_at_ns, "copy completion");
    const ResidencyPlanReport plan = manager.execute_actions({DropResident{value, PINNED_HOST}});
    later(plan.started_at_ns, "plan start");
    later(plan.transitions.front().completed_at_ns, "plan action");
    later(plan.completed_at_ns, "plan completion");
  }
  EXPECT_GT(clock->readings, 8);  // the readings did step back under the manager
}

}  // namespace
}  // namespace fhelium::residency
