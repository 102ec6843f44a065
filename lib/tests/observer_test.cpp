// Operation observers: every state-changing public call reaches the observer
// once, after it returned or threw, with its arguments and outcome; queries
// do not; lifetimes are named so that an end is matched to its start; a
// failing observer changes no outcome and leaves a diagnostic.
#include <gtest/gtest.h>

#include <mutex>

#include "support.hpp"

namespace fhelium::residency {
namespace {

using namespace testing;

struct Recorded {
  std::mutex mutex;
  std::vector<ObservedOperation> operations;

  OperationObserver observer() {
    return [this](const ObservedOperation& operation) {
      std::lock_guard lock(mutex);
      operations.push_back(operation);
    };
  }
  std::vector<std::string> calls() {
    std::vector<std::string> names;
    for (const auto& operation : operations) names.push_back(to_string(operation.call));
    return names;
  }
};

std::unique_ptr<ResidencyManager> observed_manager(Recorded& recorded, std::shared_ptr<DeviceRuntime> runtime,
                                                   LocationBudgets budgets = {}) {
  ManagerOptions options;
  options.runtime = std::move(runtime);
  options.budgets = std::move(budgets);
  options.operation_observer = recorded.observer();
  return std::make_unique<ResidencyManager>(std::move(options));
}

TEST(Observer, SeesEveryStateChangingCallWithItsArgumentsAndOutcome) {
  Recorded recorded;
  auto runtime = std::make_shared<harness::SimulatedRuntime>();
  auto manager = observed_manager(recorded, runtime, {{CUDA0, 48}});
  const ResidencyHandle a = manager->adopt(make_value(8), std::nullopt, ReplicaMode::replicable);
  const ResidencyHandle s = manager->register_source(ResidencyValueSpec("Blob", 32, 32, ReplicaMode::exclusive,
                                                                       Recoverability::reconstructible),
                                                     [] { return make_value(8, 3.0f); }, PAGEABLE_HOST);
  const c10::Stream stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::CUDA, 0), 1);
  manager->ensure(a, CUDA0, stream);
  manager->ensure(a, CUDA0);  // a no-op
  EXPECT_THROW(manager->ensure(s, CUDA0), ResidencyBudgetError);
  manager->snapshot();  // queries are not observed
  manager->trace();
  {
    ResidencyLease lease = manager->acquire({a}, CUDA0, stream);
    lease.add_consumer_stream(c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::CUDA, 0), 2));
    lease.release(true);
  }
  { ResidencyHold hold = manager->hold({a}, PAGEABLE_HOST); }  // abandoned
  ResidencyReservation reservation = manager->reserve(PAGEABLE_HOST, 16, "scratch");
  reservation.release();
  manager->execute_actions({DropResident{a, CUDA0}}, "cool-down");
  ResidencyPlan plan{"warm", {EnsureResident{s, PAGEABLE_HOST}}, {DropResident{s, PAGEABLE_HOST}}};
  manager->explain(plan);
  {
    ResidencyScope scope = manager->scope(plan);
    scope.enter();
    scope.close();
  }
  manager->move(a, PINNED_HOST, PAGEABLE_HOST);
  manager->drop(s, PAGEABLE_HOST);  // already dropped by the scope's exit: a no-op
  manager->discard(s);
  manager->close(true, false);

  EXPECT_EQ(recorded.calls(),
            (std::vector<std::string>{"adopt", "register_source", "ensure", "ensure", "ensure", "acquire",
                                      "add_consumer_stream", "lease_release", "hold", "hold_abandon", "reserve",
                                      "reservation_release", "execute_actions", "explain", "scope_enter",
                                      "scope_close", "move", "drop", "discard", "close"}));
  const auto& ops = recorded.operations;
  for (const auto& operation : ops) EXPECT_EQ(operation.manager_id, manager->manager_id());
  // adopt: the issued handle, where, the spec the manager recorded.
  ASSERT_EQ(ops[0].handles.size(), 1u);
  EXPECT_EQ(ops[0].handles[0], a);
  EXPECT_EQ(ops[0].location, PAGEABLE_HOST);
  EXPECT_EQ(ops[0].replica_mode, ReplicaMode::replicable);
  ASSERT_TRUE(ops[0].spec);
  EXPECT_EQ(ops[0].spec->logical_nbytes, 32);
  EXPECT_EQ(ops[0].spec->recoverability, Recoverability::must_preserve);
  EXPECT_EQ(ops[1].handles[0], s);
  EXPECT_EQ(ops[1].location, PAGEABLE_HOST);
  EXPECT_EQ(ops[1].spec->recoverability, Recoverability::reconstructible);
  // Transitions: stream, no-op, and the error itself.
  EXPECT_EQ(ops[2].stream, stream);
  EXPECT_FALSE(ops[2].no_op);
  EXPECT_TRUE(ops[3].no_op);
  ASSERT_TRUE(ops[4].error);
  EXPECT_THROW(std::rethrow_exception(ops[4].error), ResidencyBudgetError);
  EXPECT_FALSE(ops[2].error);
  // Lifetimes: the end names the start.
  EXPECT_NE(ops[5].lifetime, 0u);
  EXPECT_EQ(ops[5].stream, stream);
  EXPECT_EQ(ops[6].lifetime, ops[5].lifetime);
  EXPECT_EQ(ops[7].lifetime, ops[5].lifetime);
  EXPECT_TRUE(ops[7].wait);
  EXPECT_EQ(ops[9].lifetime, ops[8].lifetime);
  EXPECT_EQ(ops[10].nbytes, 16);
  EXPECT_EQ(ops[10].name, "scratch");
  EXPECT_EQ(ops[11].lifetime, ops[10].lifetime);
  // Plans and scopes.
  EXPECT_EQ(ops[12].name, "cool-down");
  ASSERT_EQ(ops[12].actions.size(), 1u);
  ASSERT_TRUE(ops[13].plan);
  EXPECT_EQ(ops[13].plan->name, "warm");
  EXPECT_NE(ops[14].lifetime, 0u);
  EXPECT_EQ(ops[15].lifetime, ops[14].lifetime);
  EXPECT_FALSE(ops[15].no_op);
  EXPECT_EQ(ops[16].from, PAGEABLE_HOST);
  EXPECT_EQ(ops[16].location, PINNED_HOST);
  EXPECT_TRUE(ops[17].no_op);
  EXPECT_FALSE(ops[19].force);
  EXPECT_TRUE(ops[19].wait);
}

TEST(Observer, FailedCreationsAndRefusedLifetimesAreObservedWithoutAHandle) {
  Recorded recorded;
  auto manager = observed_manager(recorded, std::make_shared<harness::SimulatedRuntime>(), {{PAGEABLE_HOST, 16}});
  EXPECT_THROW(manager->adopt(make_value(8)), ResidencyBudgetError);
  const ResidencyHandle a = manager->adopt(make_value(2));
  EXPECT_THROW(manager->acquire({a}, CUDA0, std::nullopt), std::invalid_argument);
  EXPECT_THROW(manager->reserve(PAGEABLE_HOST, 64, "too much"), ResidencyBudgetError);
  ASSERT_EQ(recorded.calls(), (std::vector<std::string>{"adopt", "adopt", "acquire", "reserve"}));
  EXPECT_TRUE(recorded.operations[0].handles.empty());
  EXPECT_EQ(recorded.operations[0].nbytes, 32);
  EXPECT_TRUE(recorded.operations[0].error);
  EXPECT_EQ(recorded.operations[2].lifetime, 0u);
  EXPECT_TRUE(recorded.operations[2].error);
  EXPECT_EQ(recorded.operations[3].lifetime, 0u);
}

TEST(Observer, AThrowingObserverChangesNoOutcomeAndLeavesADiagnostic) {
  ManagerOptions options;
  options.runtime = std::make_shared<harness::SimulatedRuntime>();
  int calls = 0;
  options.operation_observer = [&](const ObservedOperation&) {
    ++calls;
    throw std::runtime_error("disk full");
  };
  ResidencyManager manager(std::move(options));
  const ResidencyHandle a = manager.adopt(make_value(4));
  EXPECT_EQ(manager.move(a, CUDA0).destination, CUDA0);
  EXPECT_THROW(manager.drop(a, CUDA0), ResidencyOwnershipError);  // its own error, not the observer's
  EXPECT_EQ(calls, 3);
  const auto diagnostics = manager.diagnostics();
  ASSERT_EQ(diagnostics.size(), 3u);
  EXPECT_NE(diagnostics[0].find("operation observer failed on adopt: disk full"), std::string::npos) << diagnostics[0];
}

TEST(Observer, ScopesAbandonedAfterEntryAreObserved) {
  Recorded recorded;
  auto manager = observed_manager(recorded, std::make_shared<harness::SimulatedRuntime>());
  const ResidencyHandle a = manager->adopt(make_value(4));
  std::uint64_t first = 0;
  {
    ResidencyScope scope = manager->scope(ResidencyPlan{"p", {MoveResident{a, CUDA0, std::nullopt}}});
    ResidencyScope moved = std::move(scope);  // the id travels with the scope
    moved.enter();
  }
  {
    ResidencyScope never_entered = manager->scope(ResidencyPlan{"q"});
  }
  ASSERT_EQ(recorded.calls(), (std::vector<std::string>{"adopt", "scope_enter", "scope_abandon"}));
  first = recorded.operations[1].lifetime;
  EXPECT_NE(first, 0u);
  EXPECT_EQ(recorded.operations[2].lifetime, first);
}

}  // namespace
}  // namespace fhelium::residency
