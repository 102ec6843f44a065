// The controller: requests, the tiered-LRU policy, decide(), scope() and
// use(). The ReferenceController tests pin one behaviour of the reference
// controller each and are named after it; the rest cover the C++ surface
// (validation, broken policies, records).
#include <gtest/gtest.h>
#include <pthread.h>

#include <memory>
#include <string>
#include <vector>

#include "fhelium/harness/decision_checker.hpp"
#include "fhelium/harness/forwarding_runtime.hpp"
#include "support.hpp"

namespace fhelium::residency {
namespace {

using testing::CUDA0;
using testing::location_state;
using testing::make_fixture;
using testing::make_value;
using testing::resident_at;

constexpr std::int64_t kBytes = 64;  // make_value(16): 16 float32 elements

ResidentValue blob(float seed = 1.0f) { return make_value(16, seed); }

ResidencyValueSpec source_spec() {
  return ResidencyValueSpec("Blob", kBytes, kBytes, ReplicaMode::replicable, Recoverability::reconstructible);
}

ResidencyRequest one(const std::string& name, const ResidencyHandle& handle, ResidencyLocation at = PINNED_HOST,
                     std::int64_t reservation_bytes = 0) {
  std::vector<MemoryReservation> reservations;
  if (reservation_bytes > 0) reservations.emplace_back(at, reservation_bytes, name + " workspace");
  return ResidencyRequest(name, {{handle, at}}, std::move(reservations));
}

std::shared_ptr<const ResidencyPolicy> pinned_spills_to_pageable() {
  return std::make_shared<const DeterministicTieredLRU>(
      ResidencyFallbackTiers{{PINNED_HOST, {PAGEABLE_HOST}}});
}

std::vector<ResidencyLocation> at(std::initializer_list<ResidencyLocation> locations) { return locations; }

bool message_contains(const std::exception& error, const std::string& text) {
  return std::string(error.what()).find(text) != std::string::npos;
}

template <class Error, class Call>
void expect_error_containing(Call&& call, const std::string& text) {
  try {
    call();
    ADD_FAILURE() << "expected an error containing '" << text << "'";
  } catch (const Error& error) {
    EXPECT_TRUE(message_contains(error, text)) << error.what();
  }
}

struct CountingSource {
  std::shared_ptr<int> loads = std::make_shared<int>(0);
  std::function<ResidentValue()> load(std::function<ResidentValue()> make) const {
    return [loads = loads, make = std::move(make)] {
      ++*loads;
      return make();
    };
  }
};

// ---------------------------------------------------------------------------
// The reference controller's behaviours, one test each.

TEST(ReferenceController, RequestAndPolicyDefinitionsAreStrictAndImmutable) {
  auto fixture = make_fixture();
  const ResidencyHandle handle = fixture.manager->adopt(blob());
  std::vector<ResidencyRequirement> requirements{{handle, PAGEABLE_HOST}};
  std::vector<MemoryReservation> reservations{MemoryReservation(PAGEABLE_HOST, 8, "workspace")};
  const ResidencyRequest request("request", requirements, reservations);
  requirements.clear();
  reservations.clear();
  EXPECT_EQ(request.requirements.size(), 1u);
  EXPECT_EQ(request.reservations.size(), 1u);

  expect_error_containing<std::invalid_argument>([&] { ResidencyRequest("empty", {}); }, "at least one");
  const ResidencyRequest replicas("replicas", {{handle, PAGEABLE_HOST}, {handle, PINNED_HOST}});
  EXPECT_EQ(replicas.requirements.size(), 2u);
  expect_error_containing<std::invalid_argument>(
      [&] { ResidencyRequest("duplicate", {{handle, PAGEABLE_HOST}, {handle, PAGEABLE_HOST}}); },
      "unique (handle, location)");
  expect_error_containing<std::invalid_argument>(
      [&] { ResidencyRequest("bad-handle", {{ResidencyHandle{handle.manager_id, " ", "Blob"}, PAGEABLE_HOST}}); },
      "handle");
  expect_error_containing<std::invalid_argument>([&] { ResidencyRequest(" ", {{handle, PAGEABLE_HOST}}); },
                                                 "name");

  const DeterministicTieredLRU policy({{PINNED_HOST, {PAGEABLE_HOST}}});
  EXPECT_EQ(policy.fallback_locations(PINNED_HOST), at({PAGEABLE_HOST}));
  EXPECT_TRUE(policy.fallback_locations(PAGEABLE_HOST).empty());
  expect_error_containing<std::invalid_argument>(
      [] { DeterministicTieredLRU({{PAGEABLE_HOST, {PAGEABLE_HOST}}}); }, "source location");

  const std::vector<ResidencyEvictionCandidate> candidates{
      ResidencyEvictionCandidate(handle, PAGEABLE_HOST, 8, 0, 2, {0, "old"}),
      ResidencyEvictionCandidate({handle.manager_id, "synthetic-candidate", "Blob"}, PAGEABLE_HOST, 8, 1, 1,
                                 {10, "new"}),
  };
  EXPECT_EQ(policy.order_candidates(candidates), candidates);
  fixture.manager->close();
}

TEST(ReferenceController, DecideAndUseMaterializeThenCacheValues) {
  auto fixture = make_fixture({{PINNED_HOST, kBytes}});
  ResidencyManager& manager = *fixture.manager;
  ResidencyController controller(manager);
  const ResidencyHandle handle = manager.adopt(blob(), std::nullopt, ReplicaMode::replicable);

  const ResidencyRequest request = one("cache-one", handle);
  const ResidencyDecision decision = controller.decide(request);
  EXPECT_EQ(decision.expected_state_version, manager.state_version());
  EXPECT_GE(decision.explored_states, 1);
  EXPECT_TRUE(decision.plan.reclaim.empty());
  EXPECT_EQ(decision.plan.enter.size(), 1u);
  EXPECT_TRUE(decision.evictions.empty());
  EXPECT_TRUE(decision.explanation.feasible);

  ResidencyUse use = controller.use(request);
  use.run([&] {
    const ResidentValue borrowed = use.value(handle, PINNED_HOST);
    EXPECT_EQ(borrowed.type_name(), "Blob");
    EXPECT_EQ(fixture.runtime->locate(borrowed), PINNED_HOST);
    EXPECT_EQ(resident_at(manager, handle), at({PAGEABLE_HOST, PINNED_HOST}));
  });
  EXPECT_TRUE(use.report().has_value());
  EXPECT_THROW(use.value(handle, PINNED_HOST), ResidencyLifetimeClosedError);

  const ResidencyDecision cached = controller.decide(request);
  EXPECT_TRUE(cached.plan.reclaim.empty());
  EXPECT_TRUE(cached.plan.enter.empty());
  manager.discard(handle);
  manager.close();
}

TEST(ReferenceController, ReservationHeadroomIsReclaimedBeforeAdmission) {
  auto fixture = make_fixture({{PINNED_HOST, 2 * kBytes}});
  ResidencyManager& manager = *fixture.manager;
  ResidencyController controller(manager);
  const ResidencyHandle first = manager.adopt(blob(1), std::nullopt, ReplicaMode::replicable);
  const ResidencyHandle second = manager.adopt(blob(2), std::nullopt, ReplicaMode::replicable);
  manager.ensure(first, PINNED_HOST);

  const ResidencyDecision decision = controller.decide(one("reserved-stage", second, PINNED_HOST, kBytes));
  ASSERT_EQ(decision.plan.reclaim.size(), 1u);
  EXPECT_EQ(decision.plan.reclaim[0], ResidencyAction(DropResident{first, PINNED_HOST}));
  EXPECT_EQ(decision.plan.reservations[0].nbytes, kBytes);

  ResidencyScope scope = controller.scope(decision);
  scope.run([&] {
    EXPECT_EQ(resident_at(manager, first), at({PAGEABLE_HOST}));
    EXPECT_EQ(resident_at(manager, second), at({PAGEABLE_HOST, PINNED_HOST}));
    EXPECT_EQ(location_state(manager, PINNED_HOST).used_bytes, kBytes);
    EXPECT_EQ(location_state(manager, PINNED_HOST).reserved_bytes, kBytes);
  });
  manager.close();
}

TEST(ReferenceController, TieredLruEvictsOldestUnprotectedReplica) {
  auto fixture = make_fixture({{PINNED_HOST, 2 * kBytes}});
  ResidencyManager& manager = *fixture.manager;
  ResidencyController controller(manager);
  std::vector<ResidencyHandle> handles;
  for (int index = 0; index < 3; ++index) {
    handles.push_back(manager.adopt(blob(static_cast<float>(index)), std::nullopt, ReplicaMode::replicable));
  }
  controller.use(one("first", handles[0])).run([] {});
  controller.use(one("second", handles[1])).run([] {});

  const ResidencyDecision decision = controller.decide(one("third", handles[2]));
  ASSERT_EQ(decision.evictions.size(), 1u);
  EXPECT_EQ(decision.evictions[0].action, ResidencyAction(DropResident{handles[0], PINNED_HOST}));
  for (const auto& action : decision.plan.reclaim) EXPECT_FALSE(std::holds_alternative<DiscardValue>(action));

  controller.scope(decision).run([&] {
    EXPECT_EQ(resident_at(manager, handles[0]), at({PAGEABLE_HOST}));
    EXPECT_EQ(resident_at(manager, handles[1]), at({PAGEABLE_HOST, PINNED_HOST}));
    EXPECT_EQ(resident_at(manager, handles[2]), at({PAGEABLE_HOST, PINNED_HOST}));
  });
  manager.close();
}

TEST(ReferenceController, PolicyPriorityOverridesLruEpoch) {
  auto fixture = make_fixture({{PINNED_HOST, 2 * kBytes}});
  ResidencyManager& manager = *fixture.manager;
  ResidencyController controller(manager);
  std::vector<ResidencyHandle> handles;
  for (int index = 0; index < 3; ++index) {
    handles.push_back(manager.adopt(blob(static_cast<float>(index)), std::nullopt, ReplicaMode::replicable));
  }
  controller.set_policy_metadata(handles[0], 10, "retained/high-priority");
  controller.set_policy_metadata(handles[1], 0, "evictable/normal-priority");
  controller.use(one("older-high-priority", handles[0])).run([] {});
  controller.use(one("newer-normal-priority", handles[1])).run([] {});

  const ResidencyDecision decision = controller.decide(one("new-value", handles[2]));
  ASSERT_FALSE(decision.evictions.empty());
  EXPECT_EQ(action_handle(decision.evictions[0].action), handles[1]);
  manager.close();
}

TEST(ReferenceController, RequestedHandleExtraReplicaCanBeReclaimed) {
  auto fixture = make_fixture({{PINNED_HOST, kBytes}});
  ResidencyManager& manager = *fixture.manager;
  ResidencyController controller(manager);
  const ResidencyHandle retained = manager.adopt(blob(1), std::nullopt, ReplicaMode::replicable);
  const ResidencyHandle incoming = manager.adopt(blob(2), std::nullopt, ReplicaMode::replicable);
  manager.ensure(retained, PINNED_HOST);
  const ResidencyRequest request("endpoint-protection", {{retained, PAGEABLE_HOST}, {incoming, PINNED_HOST}});

  const ResidencyDecision decision = controller.decide(request);
  EXPECT_EQ(decision.plan.reclaim, (std::vector<ResidencyAction>{DropResident{retained, PINNED_HOST}}));
  controller.scope(decision).run([&] {
    EXPECT_EQ(resident_at(manager, retained), at({PAGEABLE_HOST}));
    EXPECT_EQ(resident_at(manager, incoming), at({PAGEABLE_HOST, PINNED_HOST}));
  });
  manager.close();
}

TEST(ReferenceController, OrderedExclusiveMovesReleaseCapacityForLaterRequirement) {
  auto fixture = make_fixture({{PAGEABLE_HOST, 2 * kBytes}, {PINNED_HOST, kBytes}});
  ResidencyManager& manager = *fixture.manager;
  ResidencyController controller(manager);
  const ResidencyHandle first =
      manager.adopt(fixture.runtime->copy_to(blob(1), PINNED_HOST, std::nullopt), PINNED_HOST);
  const ResidencyHandle second = manager.adopt(blob(2), PAGEABLE_HOST);
  const ResidencyRequest request("ordered-exclusive-swap", {{first, PAGEABLE_HOST}, {second, PINNED_HOST}});

  const ResidencyDecision decision = controller.decide(request);
  EXPECT_TRUE(decision.plan.reclaim.empty());
  EXPECT_EQ(decision.plan.enter, (std::vector<ResidencyAction>{MoveResident{first, PAGEABLE_HOST, PINNED_HOST},
                                                               MoveResident{second, PINNED_HOST, PAGEABLE_HOST}}));
  controller.scope(decision).run([&] {
    EXPECT_EQ(resident_at(manager, first), at({PAGEABLE_HOST}));
    EXPECT_EQ(resident_at(manager, second), at({PINNED_HOST}));
  });
  manager.close();
}

TEST(ReferenceController, MultiLocationReplicableRequestAndRequirementKeyedUse) {
  auto fixture = make_fixture({{PINNED_HOST, kBytes}});
  ResidencyManager& manager = *fixture.manager;
  ResidencyController controller(manager);
  const ResidencyHandle handle = manager.adopt(blob(), std::nullopt, ReplicaMode::replicable);
  const ResidencyRequirement pageable{handle, PAGEABLE_HOST};
  const ResidencyRequirement pinned{handle, PINNED_HOST};

  ResidencyUse use = controller.use(ResidencyRequest("two-replicas", {pageable, pinned}));
  use.run([&] {
    const auto values = use.values();
    ASSERT_EQ(values.size(), 2u);
    EXPECT_EQ(values[0].first, pageable);
    EXPECT_EQ(values[1].first, pinned);
    EXPECT_EQ(fixture.runtime->locate(values[0].second), PAGEABLE_HOST);
    EXPECT_EQ(fixture.runtime->locate(values[1].second), PINNED_HOST);
    EXPECT_EQ(use.value(handle, PAGEABLE_HOST).field("data").data_ptr(), values[0].second.field("data").data_ptr());
    EXPECT_EQ(use.value(handle, PINNED_HOST).field("data").data_ptr(), values[1].second.field("data").data_ptr());
  });
  manager.close();
}

TEST(ReferenceController, MultiLocationExclusiveRequestIsRejected) {
  auto fixture = make_fixture();
  ResidencyController controller(*fixture.manager);
  const ResidencyHandle handle = fixture.manager->adopt(blob());
  const ResidencyRequest request("impossible-exclusive-replicas", {{handle, PAGEABLE_HOST}, {handle, PINNED_HOST}});
  expect_error_containing<ResidencyOwnershipError>([&] { controller.decide(request); }, "EXCLUSIVE");
  fixture.manager->close();
}

TEST(ReferenceController, SoleMustPreserveValueMovesToExplicitFallback) {
  auto fixture = make_fixture({{PAGEABLE_HOST, 2 * kBytes}, {PINNED_HOST, kBytes}});
  ResidencyManager& manager = *fixture.manager;
  ResidencyController controller(manager, pinned_spills_to_pageable());
  const ResidencyHandle first =
      manager.adopt(fixture.runtime->copy_to(blob(1), PINNED_HOST, std::nullopt), PINNED_HOST);
  const ResidencyHandle second = manager.adopt(blob(2), PAGEABLE_HOST);

  const ResidencyDecision decision = controller.decide(one("fallback", second));
  EXPECT_EQ(decision.plan.reclaim, (std::vector<ResidencyAction>{MoveResident{first, PAGEABLE_HOST, PINNED_HOST}}));
  controller.scope(decision).run([&] {
    EXPECT_EQ(resident_at(manager, first), at({PAGEABLE_HOST}));
    EXPECT_EQ(resident_at(manager, second), at({PINNED_HOST}));
  });
  manager.close();
}

TEST(ReferenceController, SoleMustPreserveWithoutFallbackFailsWithoutMutation) {
  auto fixture = make_fixture({{PINNED_HOST, kBytes}});
  ResidencyManager& manager = *fixture.manager;
  ResidencyController controller(manager);
  const ResidencyHandle first =
      manager.adopt(fixture.runtime->copy_to(blob(1), PINNED_HOST, std::nullopt), PINNED_HOST);
  const ResidencyHandle second = manager.adopt(blob(2), PAGEABLE_HOST);
  const ResidencySnapshot before = manager.snapshot();

  expect_error_containing<ResidencyPlanError>([&] { controller.decide(one("no-fallback", second)); },
                                              "no legal drop or fallback");
  EXPECT_EQ(manager.state_version(), before.state_version);
  EXPECT_EQ(resident_at(manager, first), at({PINNED_HOST}));
  EXPECT_EQ(resident_at(manager, second), at({PAGEABLE_HOST}));
  manager.close();
}

TEST(ReferenceController, FallbackOffloadAccountsForDestinationTransferPeak) {
  auto fixture = make_fixture({{PAGEABLE_HOST, kBytes}, {PINNED_HOST, kBytes}});
  ResidencyManager& manager = *fixture.manager;
  ResidencyController controller(manager, pinned_spills_to_pageable());
  const ResidencyHandle first =
      manager.adopt(fixture.runtime->copy_to(blob(1), PINNED_HOST, std::nullopt), PINNED_HOST);
  const ResidencyHandle second = manager.adopt(blob(2), PAGEABLE_HOST);

  expect_error_containing<ResidencyPlanError>([&] { controller.decide(one("transfer-peak", second)); }, "fallback");
  EXPECT_EQ(resident_at(manager, first), at({PINNED_HOST}));
  EXPECT_EQ(resident_at(manager, second), at({PAGEABLE_HOST}));
  manager.close();
}

TEST(ReferenceController, SourceOnlyReconstructionReclaimsSourceLocationHeadroom) {
  auto fixture = make_fixture({{PAGEABLE_HOST, kBytes}, {PINNED_HOST, 2 * kBytes}});
  ResidencyManager& manager = *fixture.manager;
  ResidencyController controller(manager);
  const ResidencyHandle victim = manager.adopt(blob(1), std::nullopt, ReplicaMode::replicable);
  manager.ensure(victim, PINNED_HOST);
  CountingSource source;
  const ResidencyHandle lazy =
      manager.register_source(source_spec(), source.load([] { return blob(2); }), PAGEABLE_HOST);

  const ResidencyDecision decision = controller.decide(one("source-headroom", lazy));
  EXPECT_EQ(*source.loads, 0);
  EXPECT_EQ(decision.plan.reclaim, (std::vector<ResidencyAction>{DropResident{victim, PAGEABLE_HOST}}));
  controller.scope(decision).run([&] {
    EXPECT_EQ(*source.loads, 1);
    EXPECT_EQ(resident_at(manager, victim), at({PINNED_HOST}));
    EXPECT_EQ(resident_at(manager, lazy), at({PINNED_HOST}));
  });
  manager.close();
}

TEST(ReferenceController, SourceReconstructionAtDestinationUsesOneCapacityCharge) {
  auto fixture = make_fixture({{PAGEABLE_HOST, kBytes}});
  ResidencyManager& manager = *fixture.manager;
  ResidencyController controller(manager);
  const ResidencyHandle handle = manager.register_source(source_spec(), [] { return blob(3); }, PAGEABLE_HOST);

  const ResidencyDecision decision = controller.decide(one("source-equals-destination", handle, PAGEABLE_HOST));
  EXPECT_TRUE(decision.plan.reclaim.empty());
  controller.scope(decision).run([&] {
    EXPECT_EQ(location_state(manager, PAGEABLE_HOST).used_bytes, kBytes);
    EXPECT_EQ(location_state(manager, PAGEABLE_HOST).reserved_bytes, 0);
  });
  manager.close();
}

TEST(ReferenceController, SourceBackedReclaimCanMoveInsteadOfDrop) {
  auto fixture = make_fixture({{PAGEABLE_HOST, kBytes}, {PINNED_HOST, kBytes}});
  ResidencyManager& manager = *fixture.manager;
  ResidencyController controller(manager);
  const ResidencyHandle handle = manager.register_source(source_spec(), [] { return blob(3.5f); }, PAGEABLE_HOST);
  manager.ensure(handle, PAGEABLE_HOST);
  const ResidencyRequest request("move-source-backed-victim", {{handle, PINNED_HOST}},
                                 {MemoryReservation(PAGEABLE_HOST, kBytes, "pageable workspace")});

  const ResidencyDecision decision = controller.decide(request);
  EXPECT_EQ(decision.plan.reclaim, (std::vector<ResidencyAction>{MoveResident{handle, PINNED_HOST, PAGEABLE_HOST}}));
  EXPECT_TRUE(decision.plan.enter.empty());
  controller.scope(decision).run([&] { EXPECT_EQ(resident_at(manager, handle), at({PINNED_HOST})); });
  manager.close();
}

TEST(ReferenceController, ReclaimSearchBacktracksAfterLocallySuccessfulVictim) {
  auto fixture = make_fixture({{PINNED_HOST, 2 * kBytes}, {PAGEABLE_HOST, 2 * kBytes}});
  ResidencyManager& manager = *fixture.manager;
  auto runtime = fixture.runtime;
  ResidencyController controller(manager, pinned_spills_to_pageable());
  const ResidencyHandle first = manager.adopt(runtime->copy_to(blob(1), PINNED_HOST, std::nullopt), PINNED_HOST);
  const ResidencyHandle second = manager.register_source(
      source_spec(), [runtime] { return runtime->copy_to(blob(2), PINNED_HOST, std::nullopt); }, PINNED_HOST);
  manager.ensure(second, PINNED_HOST);
  const ResidencyHandle protected_handle = manager.adopt(blob(3), PAGEABLE_HOST);
  const ResidencyHandle requested = manager.register_source(source_spec(), [] { return blob(4); }, PAGEABLE_HOST);
  const ResidencyRequest request("backtracking", {{protected_handle, PAGEABLE_HOST}, {requested, PINNED_HOST}});

  const ResidencyDecision decision = controller.decide(request);
  EXPECT_EQ(decision.plan.reclaim, (std::vector<ResidencyAction>{DropResident{second, PINNED_HOST}}));
  controller.scope(decision).run([&] {
    EXPECT_EQ(resident_at(manager, first), at({PINNED_HOST}));
    EXPECT_TRUE(resident_at(manager, second).empty());
    EXPECT_EQ(resident_at(manager, protected_handle), at({PAGEABLE_HOST}));
    EXPECT_EQ(resident_at(manager, requested), at({PINNED_HOST}));
  });
  manager.close();
}

TEST(ReferenceController, RequiredEndpointCanBeScratchReclaimedAndRestored) {
  auto fixture = make_fixture({{PINNED_HOST, 2 * kBytes}, {PAGEABLE_HOST, kBytes}});
  ResidencyManager& manager = *fixture.manager;
  auto runtime = fixture.runtime;
  ResidencyController controller(manager);
  const ResidencyHandle a = manager.register_source(
      source_spec(), [runtime] { return runtime->copy_to(blob(1), PINNED_HOST, std::nullopt); }, PINNED_HOST);
  manager.ensure(a, PINNED_HOST);
  const ResidencyHandle b = manager.adopt(runtime->copy_to(blob(2), PINNED_HOST, std::nullopt), PINNED_HOST);
  const ResidencyHandle c = manager.adopt(blob(3), PAGEABLE_HOST);
  const ResidencyRequest request("scratch-rotation", {{c, PINNED_HOST}, {b, PAGEABLE_HOST}, {a, PINNED_HOST}});

  const ResidencyDecision decision = controller.decide(request);
  EXPECT_EQ(decision.plan.reclaim,
            (std::vector<ResidencyAction>{DropResident{a, PINNED_HOST}, MoveResident{c, PINNED_HOST, PAGEABLE_HOST},
                                          MoveResident{b, PAGEABLE_HOST, PINNED_HOST}}));
  EXPECT_EQ(decision.plan.enter, (std::vector<ResidencyAction>{EnsureResident{a, PINNED_HOST}}));
  controller.scope(decision).run([&] {
    EXPECT_EQ(resident_at(manager, a), at({PINNED_HOST}));
    EXPECT_EQ(resident_at(manager, b), at({PAGEABLE_HOST}));
    EXPECT_EQ(resident_at(manager, c), at({PINNED_HOST}));
  });
  manager.close();
}

TEST(ReferenceController, ImpossibleNineCandidateSearchMemoizesCanonicalStates) {
  auto fixture = make_fixture({{PINNED_HOST, 9 * kBytes}});
  ResidencyManager& manager = *fixture.manager;
  ResidencyController controller(manager, nullptr, 512);
  std::vector<ResidencyHandle> handles;
  for (int index = 0; index < 9; ++index) {
    handles.push_back(manager.adopt(blob(static_cast<float>(index)), std::nullopt, ReplicaMode::replicable));
    manager.ensure(handles.back(), PINNED_HOST);
  }
  const ResidencyRequest request(
      "impossible-nine-candidate-search", {{handles[0], PAGEABLE_HOST}},
      {MemoryReservation(PINNED_HOST, 10 * kBytes, "intentionally larger than total pinned budget")});
  try {
    controller.decide(request);
    ADD_FAILURE() << "an impossible request was decided";
  } catch (const ResidencySearchLimitError& error) {
    ADD_FAILURE() << "the memoized search (2^9 canonical states) hit the limit: " << error.what();
  } catch (const ResidencyPlanError& error) {
    EXPECT_TRUE(message_contains(error, "infeasible")) << error.what();
  }
  manager.close();
}

TEST(ReferenceController, SearchLimitReportsInconclusiveWithExactEvidence) {
  auto fixture = make_fixture({{PINNED_HOST, kBytes}});
  ResidencyManager& manager = *fixture.manager;
  const ResidencyHandle victim = manager.adopt(blob(1), std::nullopt, ReplicaMode::replicable);
  manager.ensure(victim, PINNED_HOST);
  const ResidencyHandle requested = manager.adopt(blob(2));
  const ResidencyRequest request = one("bounded-search", requested);

  ResidencyController bounded(manager, nullptr, 1);
  try {
    bounded.decide(request);
    ADD_FAILURE() << "a search limit of 1 state sufficed";
  } catch (const ResidencySearchLimitError& error) {
    EXPECT_EQ(error.request_name(), "bounded-search");
    EXPECT_EQ(error.state_limit(), 1);
    EXPECT_EQ(error.explored_states(), 1);
    EXPECT_TRUE(message_contains(error, "inconclusive")) << error.what();
    EXPECT_FALSE(message_contains(error, "infeasible")) << error.what();
  }

  ResidencyController complete(manager, nullptr, 10);
  const ResidencyDecision decision = complete.decide(request);
  EXPECT_GE(decision.explored_states, 1);
  EXPECT_LE(decision.explored_states, 10);
  EXPECT_EQ(decision.plan.reclaim, (std::vector<ResidencyAction>{DropResident{victim, PINNED_HOST}}));
  complete.scope(decision).run([&] { EXPECT_EQ(resident_at(manager, requested), at({PINNED_HOST})); });
  manager.close();
}

TEST(ReferenceController, ProtectedMaterializationIsNotAnAutomaticVictim) {
  auto fixture = make_fixture({{PINNED_HOST, kBytes}});
  ResidencyManager& manager = *fixture.manager;
  ResidencyController controller(manager);
  const ResidencyHandle first = manager.adopt(blob(1), PAGEABLE_HOST, ReplicaMode::replicable);
  const ResidencyHandle second = manager.adopt(blob(2), PAGEABLE_HOST, ReplicaMode::replicable);
  manager.ensure(first, PINNED_HOST);
  {
    ResidencyHold hold = manager.hold({first}, PINNED_HOST);
    expect_error_containing<ResidencyPlanError>([&] { controller.decide(one("protected", second)); },
                                                "no invariant-valid victim");
    hold.release();
  }
  EXPECT_EQ(resident_at(manager, first), at({PAGEABLE_HOST, PINNED_HOST}));
  manager.close();
}

TEST(ReferenceController, ReconstructibleFinalMaterializationIsDroppedNotDiscarded) {
  auto fixture = make_fixture({{PINNED_HOST, kBytes}});
  ResidencyManager& manager = *fixture.manager;
  auto runtime = fixture.runtime;
  ResidencyController controller(manager);
  const ResidencyHandle first = manager.register_source(
      source_spec(), [runtime] { return runtime->copy_to(blob(1), PINNED_HOST, std::nullopt); }, PINNED_HOST);
  const ResidencyHandle second = manager.adopt(blob(2), std::nullopt, ReplicaMode::replicable);
  manager.ensure(first, PINNED_HOST);

  const ResidencyDecision decision = controller.decide(one("reconstructible", second));
  ASSERT_FALSE(decision.plan.reclaim.empty());
  EXPECT_EQ(decision.plan.reclaim[0], ResidencyAction(DropResident{first, PINNED_HOST}));
  for (const auto& action : decision.plan.reclaim) EXPECT_FALSE(std::holds_alternative<DiscardValue>(action));
  controller.scope(decision).run([&] {
    EXPECT_TRUE(resident_at(manager, first).empty());
    EXPECT_FALSE(manager.snapshot().value(first)->discarded);
    EXPECT_EQ(resident_at(manager, second), at({PAGEABLE_HOST, PINNED_HOST}));
  });
  manager.close();
}

TEST(ReferenceController, DecideIsTensorFreeAndDoesNotInvokeReconstructionSource) {
  auto fixture = make_fixture({{PINNED_HOST, kBytes}});
  ResidencyManager& manager = *fixture.manager;
  ResidencyController controller(manager);
  CountingSource source;
  const ResidencyHandle handle = manager.register_source(source_spec(), source.load([] { return blob(3); }));

  const std::uint64_t version = manager.state_version();
  const ResidencyDecision decision = controller.decide(one("lazy-source", handle));
  EXPECT_EQ(*source.loads, 0);
  EXPECT_EQ(manager.state_version(), version);
  EXPECT_TRUE(decision.explanation.feasible);
  controller.scope(decision).run([&] {
    EXPECT_EQ(*source.loads, 1);
    EXPECT_EQ(resident_at(manager, handle), at({PINNED_HOST}));
  });
  manager.close();
}

TEST(ReferenceController, StaleDecisionFailsBeforeAnyPlanMutation) {
  auto fixture = make_fixture({{PINNED_HOST, kBytes}});
  ResidencyManager& manager = *fixture.manager;
  ResidencyController controller(manager);
  const ResidencyHandle handle = manager.adopt(blob(), std::nullopt, ReplicaMode::replicable);
  const ResidencyDecision decision = controller.decide(one("stale", handle));

  ResidencyReservation reservation = manager.reserve(PAGEABLE_HOST, 1, "invalidate decision");
  ResidencyScope scope = controller.scope(decision);
  EXPECT_THROW(scope.enter(), ResidencyStaleStateError);
  EXPECT_EQ(resident_at(manager, handle), at({PAGEABLE_HOST}));
  reservation.release();
  manager.close();
}

TEST(ReferenceController, ControllerRejectsForeignUnknownAndPolicyMismatchedDecisions) {
  auto first = make_fixture();
  auto second = make_fixture();
  const ResidencyHandle first_handle = first.manager->adopt(blob());
  const ResidencyHandle second_handle = second.manager->adopt(blob(1));
  ResidencyController controller(*first.manager);

  expect_error_containing<ResidencyHandleError>(
      [&] { controller.decide(one("foreign", second_handle, PAGEABLE_HOST)); }, "another manager");
  const ResidencyHandle unknown{first.manager->manager_id(), "unknown", "Blob"};
  expect_error_containing<ResidencyHandleError>([&] { controller.decide(one("unknown", unknown, PAGEABLE_HOST)); },
                                                "unknown");
  const ResidencyDecision decision = controller.decide(one("valid", first_handle, PAGEABLE_HOST));
  ResidencyController other_policy(*first.manager, pinned_spills_to_pageable());
  expect_error_containing<ResidencyPlanError>([&] { other_policy.scope(decision); }, "another policy");
  ResidencyController other_manager(*second.manager);
  expect_error_containing<ResidencyHandleError>([&] { other_manager.scope(decision); }, "another manager");
  first.manager->close();
  second.manager->close();
}

TEST(ReferenceController, UseRejectsIncompleteCudaStreamsBeforeDecisionOrMutation) {
  auto fixture = make_fixture();
  ResidencyManager& manager = *fixture.manager;
  ResidencyController controller(manager);
  const ResidencyHandle handle = manager.adopt(blob(), std::nullopt, ReplicaMode::replicable);
  const std::uint64_t version = manager.state_version();

  expect_error_containing<std::invalid_argument>(
      [&] { controller.use(one("missing-consumer-stream", handle, CUDA0)); }, "exactly cover the required CUDA");
  expect_error_containing<std::invalid_argument>(
      [&] { controller.use(one("unexpected-stream", handle, PINNED_HOST), {{CUDA0, fixture.runtime->stream(0)}}); },
      "unexpected=[cuda:0]");
  expect_error_containing<std::invalid_argument>(
      [&] { controller.use(one("wrong-device", handle, CUDA0), {{CUDA0, fixture.runtime->stream(1)}}); },
      "does not match cuda:0");
  EXPECT_EQ(manager.state_version(), version);
  EXPECT_EQ(resident_at(manager, handle), at({PAGEABLE_HOST}));
  manager.close();
}

// A test-only runtime adaptor: once armed, every CUDA location check fails,
// as if the devices vanished. It makes a use's CUDA lease fail after the
// scope entered, where the reference test patches acquire() instead.
class VanishingDevicesRuntime final : public harness::ForwardingRuntime {
 public:
  using ForwardingRuntime::ForwardingRuntime;
  bool vanished = false;

 private:
  int do_cuda_device_count() const override {
    if (vanished) throw ResidencyUnavailableError("injected acquisition failure: CUDA devices vanished");
    return ForwardingRuntime::do_cuda_device_count();
  }
};

TEST(ReferenceController, UseRetainsDecisionScopeAndReportAfterAcquisitionFailure) {
  auto simulated = std::make_shared<harness::SimulatedRuntime>();
  auto runtime = std::make_shared<VanishingDevicesRuntime>(simulated);
  ManagerOptions options;
  options.runtime = runtime;
  options.budgets = {{PINNED_HOST, kBytes}};
  ResidencyManager manager(std::move(options));
  ResidencyController controller(manager);
  // Loading `lazy` (the plan's only action) arms the failure; the lease at
  // pageable host is granted, the one at cuda:0 then fails.
  const ResidencyHandle lazy = manager.register_source(source_spec(), [runtime] {
    runtime->vanished = true;
    return blob(5);
  });
  const ResidencyHandle on_device = manager.adopt(simulated->copy_to(blob(6), CUDA0, std::nullopt), CUDA0);
  ResidencyUse use = controller.use(
      ResidencyRequest("acquire-failure", {{lazy, PAGEABLE_HOST}, {on_device, CUDA0}}), {{CUDA0, simulated->stream(0)}});

  expect_error_containing<ResidencyUnavailableError>([&] { use.enter(); }, "injected");
  runtime->vanished = false;
  EXPECT_EQ(use.decision().request.name, "acquire-failure");
  ASSERT_TRUE(use.report().has_value());
  EXPECT_EQ(use.report()->transitions.size(), 1u);
  EXPECT_FALSE(use.exit_error().has_value());
  EXPECT_FALSE(use.active());
  EXPECT_EQ(resident_at(manager, lazy), at({PAGEABLE_HOST}));
  EXPECT_EQ(location_state(manager, PAGEABLE_HOST).use_count, 0);  // the granted lease was unwound
  EXPECT_THROW(use.value(lazy, PAGEABLE_HOST), ResidencyLifetimeClosedError);
  EXPECT_EQ(use.close(), use.report());  // closing after a failed entry changes nothing
  manager.close();
}

template <class T>
constexpr bool has_prepare = requires(T& t) { t.prepare(); };
template <class T>
constexpr bool has_commit = requires(T& t) { t.commit(); };
template <class T>
constexpr bool has_last_search_state_count = requires(T& t) { t.last_search_state_count(); };

TEST(ReferenceController, ControllerExposesOnlyOneDecisionContextFactory) {
  static_assert(!has_prepare<ResidencyController>);
  static_assert(!has_commit<ResidencyController>);
  static_assert(!has_last_search_state_count<ResidencyController>);
  auto fixture = make_fixture();
  ResidencyController controller(*fixture.manager);
  const ResidencyHandle handle = fixture.manager->adopt(blob());
  ResidencyScope scope = controller.scope(controller.decide(one("only-factory", handle, PAGEABLE_HOST)));
  EXPECT_TRUE(scope.run([] {}).transitions.empty());
  fixture.manager->close();
}

TEST(ReferenceController, UseBorrowMappingClosesWithLease) {
  auto fixture = make_fixture();
  ResidencyController controller(*fixture.manager);
  const ResidencyHandle handle = fixture.manager->adopt(blob());
  ResidencyUse use = controller.use(one("borrow", handle, PAGEABLE_HOST));
  const ResidencyRequirement requirement = use.request().requirements[0];
  use.enter();
  EXPECT_EQ(use.value(requirement).type_name(), "Blob");
  EXPECT_EQ(use.value(handle, PAGEABLE_HOST).field("data").data_ptr(), use.value(requirement).field("data").data_ptr());
  use.close();
  EXPECT_THROW(use.value(requirement), ResidencyLifetimeClosedError);
  EXPECT_THROW(use.values(), ResidencyLifetimeClosedError);
  fixture.manager->close();
}

// ---------------------------------------------------------------------------
// The C++ surface beyond the reference tests.

class ReversingPolicy final : public ResidencyPolicy {
 public:
  explicit ReversingPolicy(bool broken) : broken_(broken) {}
  std::string name() const override { return "reversing"; }
  ResidencyPolicyConfig config_identity() const override { return {{"broken", broken_ ? "yes" : "no"}}; }
  std::vector<ResidencyLocation> fallback_locations(const ResidencyLocation&) const override { return {}; }
  std::vector<ResidencyEvictionCandidate> order_candidates(
      std::vector<ResidencyEvictionCandidate> candidates) const override {
    std::reverse(candidates.begin(), candidates.end());
    if (broken_ && candidates.size() > 1) candidates.back() = candidates.front();  // a repeat
    return candidates;
  }

 private:
  bool broken_;
};

struct ThreeReplicas {
  testing::SimulatedFixture fixture = make_fixture({{PINNED_HOST, 2 * kBytes}});
  std::vector<ResidencyHandle> handles;
  ThreeReplicas() {
    for (int index = 0; index < 3; ++index) {
      handles.push_back(
          fixture.manager->adopt(blob(static_cast<float>(index)), std::nullopt, ReplicaMode::replicable));
    }
    fixture.manager->ensure(handles[0], PINNED_HOST);
    fixture.manager->ensure(handles[1], PINNED_HOST);
  }
};

TEST(Controller, TheCustomPolicyOrderChoosesTheVictim) {
  ThreeReplicas state;
  ResidencyController controller(*state.fixture.manager, std::make_shared<ReversingPolicy>(false));
  const ResidencyDecision decision = controller.decide(one("reversed", state.handles[2]));
  ASSERT_EQ(decision.evictions.size(), 1u);
  EXPECT_EQ(decision.evictions[0].action, ResidencyAction(DropResident{state.handles[1], PINNED_HOST}));
  EXPECT_EQ(decision.evictions[0].rank, 0);
  EXPECT_EQ(decision.evictions[0].released_location, PINNED_HOST);
  EXPECT_EQ(decision.evictions[0].released_nbytes, kBytes);
  EXPECT_EQ(decision.policy_name, "reversing");
  EXPECT_EQ(decision.policy_config, (ResidencyPolicyConfig{{"broken", "no"}}));
}

TEST(Controller, APolicyThatDoesNotReturnAPermutationFailsClearlyWithoutChange) {
  ThreeReplicas state;
  ResidencyController controller(*state.fixture.manager, std::make_shared<ReversingPolicy>(true));
  const std::uint64_t version = state.fixture.manager->state_version();
  expect_error_containing<std::logic_error>([&] { controller.decide(one("broken", state.handles[2])); },
                                            "exactly once");
  EXPECT_EQ(state.fixture.manager->state_version(), version);
}

TEST(Controller, RepeatedDecideOnTheSameStateReturnsTheSameDecision) {
  ThreeReplicas state;
  ResidencyController controller(*state.fixture.manager);
  const ResidencyDecision first = controller.decide(one("again", state.handles[2]));
  const ResidencyDecision second = controller.decide(one("again", state.handles[2]));
  EXPECT_EQ(first.plan.reclaim, second.plan.reclaim);
  EXPECT_EQ(first.plan.enter, second.plan.enter);
  EXPECT_EQ(first.evictions, second.evictions);
  EXPECT_EQ(first.explored_states, second.explored_states);
  EXPECT_EQ(first.explanation, second.explanation);
}

TEST(Controller, RejectsDiscardedHandlesUnavailableLocationsAndBadLimits) {
  auto fixture = make_fixture();
  ResidencyManager& manager = *fixture.manager;
  ResidencyController controller(manager);
  const ResidencyHandle gone = manager.adopt(blob());
  const ResidencyHandle kept = manager.adopt(blob(2));
  manager.discard(gone);
  expect_error_containing<ResidencyHandleError>([&] { controller.decide(one("discarded", gone, PAGEABLE_HOST)); },
                                                "discarded");
  expect_error_containing<std::invalid_argument>([&] { controller.decide(one("no-device", kept, cuda_location(5))); },
                                                 "cuda:5");
  expect_error_containing<std::invalid_argument>(
      [&] {
        controller.decide(ResidencyRequest("reserve-missing-device", {{kept, PAGEABLE_HOST}},
                                           {MemoryReservation(cuda_location(7), 1, "scratch")}));
      },
      "cuda:7");
  ResidencyRequest mutated = one("mutated", kept, PAGEABLE_HOST);
  mutated.requirements.push_back(mutated.requirements.front());
  expect_error_containing<std::invalid_argument>([&] { controller.decide(mutated); }, "listed twice");
  expect_error_containing<std::invalid_argument>([&] { ResidencyController(manager, nullptr, 0); },
                                                 "search_state_limit");
}

TEST(Controller, PolicyMetadataNeedsLiveOwnHandlesAndUniqueStableKeys) {
  auto fixture = make_fixture();
  auto other = make_fixture();
  ResidencyManager& manager = *fixture.manager;
  ResidencyController controller(manager);
  const ResidencyHandle first = manager.adopt(blob());
  const ResidencyHandle second = manager.adopt(blob(2));
  const ResidencyHandle foreign = other.manager->adopt(blob(3));
  controller.set_policy_metadata(first, 4, "layer/0");
  EXPECT_EQ(controller.policy_metadata(first), (ResidencyPolicyMetadata{4, "layer/0"}));
  EXPECT_EQ(controller.policy_metadata(second), ResidencyPolicyMetadata{});
  expect_error_containing<std::invalid_argument>([&] { controller.set_policy_metadata(second, 0, "layer/0"); },
                                                 "already used by value");
  expect_error_containing<std::invalid_argument>([&] { controller.set_policy_metadata(second, 0, " "); },
                                                 "stable_key");
  controller.set_policy_metadata(first, 5, "layer/0");  // a handle may keep its own key
  expect_error_containing<ResidencyHandleError>([&] { controller.set_policy_metadata(foreign); }, "another manager");
  manager.discard(second);
  expect_error_containing<ResidencyHandleError>([&] { controller.set_policy_metadata(second); }, "discarded");
}

TEST(Controller, EachUseTicksTheAccessEpochOfItsHandlesOnce) {
  auto fixture = make_fixture();
  ResidencyController controller(*fixture.manager);
  const ResidencyHandle first = fixture.manager->adopt(blob(), std::nullopt, ReplicaMode::replicable);
  const ResidencyHandle second = fixture.manager->adopt(blob(2));
  EXPECT_FALSE(controller.last_access_epoch(first).has_value());
  controller.use(ResidencyRequest("both", {{first, PAGEABLE_HOST}, {first, PINNED_HOST}, {second, PAGEABLE_HOST}}))
      .run([] {});
  EXPECT_EQ(controller.last_access_epoch(first), 1);
  EXPECT_EQ(controller.last_access_epoch(second), 1);
  controller.use(one("first-again", first, PAGEABLE_HOST)).run([] {});
  EXPECT_EQ(controller.last_access_epoch(first), 2);
  EXPECT_EQ(controller.last_access_epoch(second), 1);
}

TEST(Controller, AUseIsSingleUseAndAFailedDecisionLeavesNothingBehind) {
  auto fixture = make_fixture({{PINNED_HOST, kBytes}});
  ResidencyManager& manager = *fixture.manager;
  ResidencyController controller(manager);
  const ResidencyHandle handle = manager.adopt(blob());
  ResidencyUse twice = controller.use(one("twice", handle, PAGEABLE_HOST));
  EXPECT_THROW(twice.close(), std::logic_error);
  EXPECT_THROW(twice.decision(), std::logic_error);
  twice.enter();
  EXPECT_THROW(twice.enter(), std::logic_error);
  twice.close();

  const ResidencyHandle big = manager.adopt(make_value(32));  // 128 bytes never fit a 64-byte pinned budget
  ResidencyUse impossible = controller.use(one("impossible", big));
  const std::uint64_t version = manager.state_version();
  EXPECT_THROW(impossible.enter(), ResidencyPlanError);
  EXPECT_EQ(manager.state_version(), version);
  EXPECT_THROW(impossible.decision(), std::logic_error);
  EXPECT_FALSE(impossible.report().has_value());
  EXPECT_THROW(impossible.value(big, PINNED_HOST), ResidencyLifetimeClosedError);
}

// The reference search only drops a replica and, while moving a value,
// keeps all its copies out of the nested search. Here the only plan drops the
// cuda:0 replica of `kv` to make room for `big`'s move there, and so needs to
// move `kv`'s pinned copy (a replica when the search first meets it).
TEST(Controller, FindsPlansTheReferenceRulesMiss) {
  auto fixture = make_fixture({{PAGEABLE_HOST, 2 * kBytes}, {PINNED_HOST, 2 * kBytes}, {CUDA0, 2 * kBytes}});
  ResidencyManager& manager = *fixture.manager;
  ResidencyController controller(
      manager, std::make_shared<DeterministicTieredLRU>(ResidencyFallbackTiers{{PAGEABLE_HOST, {PINNED_HOST, CUDA0}}}));
  const ResidencyHandle big = manager.adopt(make_value(32));  // 128 bytes, exclusive, pageable
  const ResidencyHandle kv =
      manager.adopt(fixture.runtime->copy_to(blob(), PINNED_HOST, std::nullopt), PINNED_HOST, ReplicaMode::replicable);
  manager.ensure(kv, CUDA0);
  ResidencyReservation standing = manager.reserve(PINNED_HOST, kBytes, "standing");
  const ResidencyRequest request("rotate", {{kv, PAGEABLE_HOST}, {big, CUDA0}},
                                 {MemoryReservation(PINNED_HOST, kBytes, "workspace")});

  const ResidencyDecision decision = controller.decide(request);
  EXPECT_EQ(decision.plan.reclaim,
            (std::vector<ResidencyAction>{DropResident{kv, CUDA0}, MoveResident{big, CUDA0, PAGEABLE_HOST},
                                          MoveResident{kv, PAGEABLE_HOST, PINNED_HOST}}));
  EXPECT_TRUE(decision.plan.enter.empty());
  controller.scope(decision).run([&] {
    EXPECT_EQ(resident_at(manager, kv), at({PAGEABLE_HOST}));
    EXPECT_EQ(resident_at(manager, big), at({CUDA0}));
    EXPECT_EQ(location_state(manager, PINNED_HOST).reserved_bytes, 2 * kBytes);
  });
  standing.release();
}

// A request that needs thousands of victims: the search nests a few frames
// per victim, so it runs on a thread with its own large stack. Called here
// from a thread with a small stack (256 KiB), which the search alone would
// overflow after a few hundred victims.
TEST(Controller, ThousandsOfVictimsDoNotExhaustTheCallersStack) {
  constexpr int count = 2000;
  auto fixture = make_fixture({{PINNED_HOST, count * 16}});
  ResidencyManager& manager = *fixture.manager;
  ResidencyController controller(manager);
  for (int index = 0; index < count; ++index) {
    const ResidencyHandle handle = manager.adopt(make_value(4, static_cast<float>(index)), std::nullopt,
                                                 ReplicaMode::replicable);
    manager.ensure(handle, PINNED_HOST);
  }
  const ResidencyHandle big = manager.adopt(make_value(count * 4));
  struct Call {
    ResidencyController* controller;
    ResidencyRequest request;
    std::optional<ResidencyDecision> decision;
  } call{&controller, one("everything", big), std::nullopt};
  pthread_attr_t attributes;
  ASSERT_EQ(pthread_attr_init(&attributes), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attributes, 256 << 10), 0);
  pthread_t thread;
  ASSERT_EQ(pthread_create(&thread, &attributes,
                           [](void* pointer) -> void* {
                             auto* job = static_cast<Call*>(pointer);
                             job->decision.emplace(job->controller->decide(job->request));
                             return nullptr;
                           },
                           &call),
            0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attributes);
  ASSERT_TRUE(call.decision.has_value());
  EXPECT_EQ(call.decision->evictions.size(), static_cast<std::size_t>(count));
  EXPECT_EQ(call.decision->explored_states, count + 1);
}

TEST(ControllerRecords, EvictionsAndDecisionsValidateThemselves) {
  const ResidencyHandle handle{"manager", "h1", "Blob"};
  EXPECT_THROW(ResidencyEviction(EnsureResident{handle, PINNED_HOST}, 0, PINNED_HOST, 1, "why"),
               std::invalid_argument);
  EXPECT_THROW(ResidencyEviction(DropResident{handle, PINNED_HOST}, -1, PINNED_HOST, 1, "why"), std::invalid_argument);
  EXPECT_THROW(ResidencyEviction(DropResident{handle, PINNED_HOST}, 0, PINNED_HOST, -1, "why"), std::invalid_argument);
  EXPECT_THROW(ResidencyEviction(DropResident{handle, PINNED_HOST}, 0, PINNED_HOST, 1, " "), std::invalid_argument);
  EXPECT_NO_THROW(ResidencyEviction(MoveResident{handle, PAGEABLE_HOST, PINNED_HOST}, 0, PINNED_HOST, 1, "why"));

  const ResidencyRequest request("r", {{handle, PINNED_HOST}});
  const ResidencyPlanExplanation feasible("r", {}, {}, {}, true);
  const ResidencyPlanExplanation infeasible("r", {}, {}, {}, false, "no room");
  const auto decision = [&](std::string manager_id, std::int64_t explored, std::string plan_name,
                            const ResidencyPlanExplanation& explanation) {
    return ResidencyDecision(std::move(manager_id), 0, explored, request, ResidencyPlan{std::move(plan_name)},
                             "policy", {}, {}, explanation);
  };
  EXPECT_NO_THROW(decision("manager", 1, "r", feasible));
  EXPECT_THROW(decision("", 1, "r", feasible), std::invalid_argument);
  EXPECT_THROW(decision("manager", 0, "r", feasible), std::invalid_argument);
  EXPECT_THROW(decision("manager", 1, "other", feasible), std::invalid_argument);
  EXPECT_THROW(decision("manager", 1, "r", infeasible), std::invalid_argument);
  EXPECT_THROW(ResidencyEvictionCandidate(handle, PINNED_HOST, -1, 0, std::nullopt), std::invalid_argument);
  EXPECT_THROW(ResidencyEvictionCandidate(handle, PINNED_HOST, 1, -1, std::nullopt), std::invalid_argument);
  EXPECT_THROW(ResidencyEvictionCandidate(handle, PINNED_HOST, 1, 0, -3), std::invalid_argument);
}

TEST(TieredLru, OrdersByPriorityThenEpochThenStableKeyThenRegistration) {
  const auto candidate = [](std::int64_t index, std::optional<std::int64_t> epoch, std::int64_t priority,
                            std::optional<std::string> key) {
    return ResidencyEvictionCandidate({"m", "h" + std::to_string(index), "Blob"}, PINNED_HOST, 8, index, epoch,
                                      {priority, std::move(key)});
  };
  const std::vector<ResidencyEvictionCandidate> input{
      candidate(0, 5, 1, std::nullopt),  // higher priority: last
      candidate(1, 3, 0, std::nullopt),  // newer epoch
      candidate(2, std::nullopt, 0, std::nullopt),
      candidate(3, 2, 0, std::nullopt),
      candidate(4, 2, 0, "b"),
      candidate(5, 2, 0, "a"),
  };
  std::vector<std::int64_t> order;
  for (const auto& item : DeterministicTieredLRU().order_candidates(input)) order.push_back(item.registration_index);
  EXPECT_EQ(order, (std::vector<std::int64_t>{2, 5, 4, 3, 1, 0}));
  EXPECT_THROW(DeterministicTieredLRU({{PINNED_HOST, {PAGEABLE_HOST, PAGEABLE_HOST}}}), std::invalid_argument);
  EXPECT_THROW(DeterministicTieredLRU({{PINNED_HOST, {PAGEABLE_HOST}}, {PINNED_HOST, {CUDA0}}}),
               std::invalid_argument);
  EXPECT_EQ(DeterministicTieredLRU({{CUDA0, {PINNED_HOST, PAGEABLE_HOST}}}).config_identity(),
            (ResidencyPolicyConfig{{"fallback_tiers", "cuda:0 -> [pinned-host, pageable-host]"}}));
}

// ---------------------------------------------------------------------------
// The harness's decision checks bite: decisions that break the rules are
// reported (the controller never makes them, so they are built by hand).

namespace decision_checks {

ResidencySnapshot state_of(ResidencyManager& manager) { return manager.snapshot(); }

ResidencyDecision forged(const ResidencySnapshot& snapshot, const ResidencyRequest& request,
                         std::vector<ResidencyAction> reclaim) {
  std::vector<ResidencyEviction> evictions;
  for (const auto& action : reclaim) {
    const ResidencyLocation released = std::holds_alternative<DropResident>(action)
                                           ? std::get<DropResident>(action).location
                                           : *std::get<MoveResident>(action).from_location;
    evictions.emplace_back(action, 0, released, kBytes, "forged");
  }
  ResidencyPlan plan{request.name, {}, {}, request.reservations, std::move(reclaim)};
  return ResidencyDecision(snapshot.manager_id, snapshot.state_version, 1, request, std::move(plan), "forged", {},
                           std::move(evictions), ResidencyPlanExplanation(request.name, {}, {}, {}, true));
}

bool reports(const std::vector<harness::InvariantViolation>& violations, const std::string& text) {
  for (const auto& violation : violations) {
    if (violation.detail.find(text) != std::string::npos) return true;
  }
  return false;
}

TEST(DecisionChecker, ReportsProtectedVictimsLostMustPreserveValuesAndDiscards) {
  auto fixture = make_fixture();
  ResidencyManager& manager = *fixture.manager;
  const ResidencyHandle replica = manager.adopt(blob(1), std::nullopt, ReplicaMode::replicable);
  const ResidencyHandle precious = manager.adopt(blob(2));
  manager.ensure(replica, PINNED_HOST);
  ResidencyHold hold = manager.hold({replica}, PINNED_HOST);
  const ResidencySnapshot before = state_of(manager);
  const ResidencyRequest request = one("forged", precious, PAGEABLE_HOST);

  EXPECT_TRUE(harness::check_decision(before, forged(before, request, {DropResident{replica, PAGEABLE_HOST}})).empty());
  // Handle ids are quoted in each detail, so a replay can put its names in.
  EXPECT_TRUE(reports(harness::check_decision(before, forged(before, request, {DropResident{replica, PINNED_HOST}})),
                      "reclaim action drop '" + replica.handle_id + "' at pinned-host touches a protected "
                      "materialization of value '" + replica.handle_id + "'"));
  EXPECT_TRUE(reports(harness::check_decision(before, forged(before, request, {DropResident{precious, PAGEABLE_HOST}})),
                      "last copy of must-preserve"));
  EXPECT_TRUE(reports(
      harness::check_decision(before, forged(before, request, {MoveResident{replica, PINNED_HOST, PAGEABLE_HOST}})),
      "existing materialization"));
  EXPECT_TRUE(reports(harness::check_decision(before, forged(before, request, {DropResident{replica, CUDA0}})),
                      "does not exist"));
  ResidencyDecision discarding = forged(before, request, {});
  discarding.plan.enter.push_back(DiscardValue{replica});
  EXPECT_TRUE(reports(harness::check_decision(before, discarding), "discards"));
  hold.release();
}

// A pending event protects as a hold does, unless the state checked is
// older than the decision's (whose own snapshot may have retired it); a
// hold protects either way.
TEST(DecisionChecker, PendingEventsProtectOnlyWhenTheStateIsTheDecisions) {
  auto fixture = make_fixture();
  ResidencyManager& manager = *fixture.manager;
  const ResidencyHandle pending = manager.adopt(blob(1), std::nullopt, ReplicaMode::replicable);
  const ResidencyHandle held = manager.adopt(blob(2), std::nullopt, ReplicaMode::replicable);
  manager.ensure(pending, PINNED_HOST);
  manager.ensure(held, PINNED_HOST);
  ResidencyHold hold = manager.hold({held}, PINNED_HOST);
  ResidencySnapshot state = state_of(manager);
  // A pending event on `pending` at pinned-host, written into the record:
  // the checker reads records only.
  for (auto& value : state.values) {
    if (value.handle != pending) continue;
    for (auto& item : value.materializations) {
      if (item.location == PINNED_HOST) item.pending_event_count = 1;
    }
  }
  const ResidencyRequest request = one("forged", held, PAGEABLE_HOST);
  const ResidencyDecision drop_pending = forged(state, request, {DropResident{pending, PINNED_HOST}});
  const ResidencyDecision drop_held = forged(state, request, {DropResident{held, PINNED_HOST}});
  EXPECT_TRUE(reports(harness::check_decision(state, drop_pending), "touches a protected materialization"));
  EXPECT_TRUE(harness::check_decision(state, drop_pending, false).empty());
  EXPECT_TRUE(reports(harness::check_decision(state, drop_held), "touches a protected materialization"));
  EXPECT_TRUE(reports(harness::check_decision(state, drop_held, false), "touches a protected materialization"));
  hold.release();
}

TEST(DecisionChecker, ReportsAnyChangeMadeWhileDeciding) {
  auto fixture = make_fixture();
  ResidencyManager& manager = *fixture.manager;
  const ResidencyHandle handle = manager.adopt(blob(1), std::nullopt, ReplicaMode::replicable);
  const ResidencySnapshot before = state_of(manager);
  EXPECT_TRUE(harness::check_unchanged(before, state_of(manager)).empty());
  manager.ensure(handle, PINNED_HOST);
  const auto violations = harness::check_unchanged(before, state_of(manager));
  ASSERT_FALSE(violations.empty());
  EXPECT_EQ(violations.front().invariant, "decide-read-only");
}

}  // namespace decision_checks

}  // namespace
}  // namespace fhelium::residency
