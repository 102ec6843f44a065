// Crash safety of lifetimes: managers, leases, holds, reservations and scopes
// destroyed in every order, on other threads, and after close(force). Run
// under ASan (tools/sanitize.sh address) this proves no leak, no
// use-after-free; the diagnostics count proves no abandonment goes unreported.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <mutex>
#include <optional>
#include <thread>

#include "support.hpp"

namespace fhelium::residency {
namespace {

using namespace testing;

struct Diagnostics {
  std::mutex mutex;
  std::vector<std::string> messages;
  std::size_t count() {
    std::lock_guard lock(mutex);
    return messages.size();
  }
};

// One manager with one of every lifetime, each in its own slot so a test can
// destroy them in any order.
struct World {
  std::shared_ptr<harness::SimulatedRuntime> runtime = std::make_shared<harness::SimulatedRuntime>();
  std::shared_ptr<Diagnostics> diagnostics = std::make_shared<Diagnostics>();
  std::optional<ResidencyManager> manager;
  std::optional<ResidencyLease> lease;
  std::optional<ResidencyLease> cuda_lease;
  std::optional<ResidencyHold> hold;
  std::optional<ResidencyReservation> reservation;
  std::optional<ResidencyScope> scope;

  World() {
    ManagerOptions options;
    options.runtime = runtime;
    options.budgets = {{CUDA0, 1 << 20}};
    options.diagnostic_sink = [diagnostics = diagnostics](const std::string& message) {
      std::lock_guard lock(diagnostics->mutex);
      diagnostics->messages.push_back(message);
    };
    manager.emplace(std::move(options));
    const ResidencyHandle a = manager->adopt(make_value(16, 1.0f), std::nullopt, ReplicaMode::replicable);
    const ResidencyHandle b = manager->adopt(make_value(16, 2.0f), std::nullopt, ReplicaMode::replicable);
    manager->ensure(a, CUDA0);
    lease.emplace(manager->acquire({a}, PAGEABLE_HOST));
    const c10::Stream stream = runtime->stream(0, 1);
    cuda_lease.emplace(manager->acquire({a}, CUDA0, stream));
    runtime->enqueue(stream, 500);  // still running when the lease is abandoned
    hold.emplace(manager->hold({b}, PAGEABLE_HOST));
    reservation.emplace(manager->reserve(CUDA0, 64, "workspace"));
    scope.emplace(manager->scope(ResidencyPlan{"layer", {EnsureResident{b, CUDA0}}, {}, {MemoryReservation(CUDA0, 32, "act")}}));
    scope->enter();
  }

  // Destroys slot `index`: 0 manager, 1 lease, 2 CUDA lease, 3 hold, 4 reservation, 5 scope.
  void destroy(int index) {
    switch (index) {
      case 0: manager.reset(); break;
      case 1: lease.reset(); break;
      case 2: cuda_lease.reset(); break;
      case 3: hold.reset(); break;
      case 4: reservation.reset(); break;
      default: scope.reset(); break;
    }
  }
};

constexpr int slots = 6;
constexpr std::size_t lifetimes = slots - 1;

TEST(CrashSafety, EveryDestructionOrderReportsEachAbandonedLifetimeOnce) {
  std::array<int, slots> order{0, 1, 2, 3, 4, 5};
  int permutations = 0;
  do {
    World world;
    for (const int index : order) world.destroy(index);
    ASSERT_EQ(world.diagnostics->count(), lifetimes) << "order starting with slot " << order[0];
    for (const auto& message : world.diagnostics->messages) {
      EXPECT_NE(message.find("abandoned"), std::string::npos) << message;
    }
    ++permutations;
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(permutations, 720);
}

TEST(CrashSafety, AfterAForcedCloseDestroyingLifetimesChangesAndReportsNothing) {
  std::array<int, slots - 1> order{1, 2, 3, 4, 5};
  do {
    World world;
    world.manager->close(false, true);
    const std::size_t after_close = world.diagnostics->count();
    for (const int index : order) world.destroy(index);
    world.destroy(0);
    EXPECT_EQ(world.diagnostics->count(), after_close);
  } while (std::next_permutation(order.begin(), order.end()));
}

TEST(CrashSafety, LifetimesDestroyedOnOtherThreadsWhileTheManagerIsInUse) {
  for (int round = 0; round < 20; ++round) {
    World world;
    std::vector<std::thread> threads;
    threads.emplace_back([lease = std::move(world.lease)]() mutable { lease.reset(); });
    threads.emplace_back([lease = std::move(world.cuda_lease)]() mutable { lease.reset(); });
    threads.emplace_back([hold = std::move(world.hold)]() mutable { hold.reset(); });
    threads.emplace_back([reservation = std::move(world.reservation)]() mutable { reservation.reset(); });
    threads.emplace_back([scope = std::move(world.scope)]() mutable { scope.reset(); });
    for (int i = 0; i < 50; ++i) {
      const ResidencySnapshot snapshot = world.manager->snapshot();
      EXPECT_GE(snapshot.location(CUDA0)->budget_bytes.value_or(0), 1 << 20);
    }
    for (auto& thread : threads) thread.join();
    EXPECT_EQ(world.diagnostics->count(), lifetimes);
    const ResidencySnapshot snapshot = world.manager->snapshot();
    EXPECT_EQ(snapshot.location(CUDA0)->reserved_bytes, 0);
    EXPECT_EQ(snapshot.location(CUDA0)->use_count, 0);
    EXPECT_EQ(snapshot.location(PAGEABLE_HOST)->hold_count, 0);
    world.manager->close();
  }
}

TEST(CrashSafety, AnAbandonedLeaseOverWorkThatNeverEndsStaysProtected) {
  World world;
  const c10::Stream stuck = world.runtime->stream(0, 2);
  const ResidencyHandle c = world.manager->adopt(make_value(4, 3.0f), std::nullopt, ReplicaMode::replicable);
  world.manager->ensure(c, CUDA0);
  {
    ResidencyLease lease = world.manager->acquire({c}, CUDA0, stuck);
    world.runtime->enqueue(stuck, harness::SimulatedRuntime::never);
  }  // abandoned: waiting can never end, so the protection must stay
  const ResidencySnapshot snapshot = world.manager->snapshot();
  EXPECT_EQ(snapshot.value(c)->at(CUDA0)->pending_event_count, 1);
  EXPECT_THROW(world.manager->drop(c, CUDA0), ResidencyInUseError);
  std::lock_guard lock(world.diagnostics->mutex);
  ASSERT_FALSE(world.diagnostics->messages.empty());
  EXPECT_NE(world.diagnostics->messages.back().find("could not be released safely"), std::string::npos)
      << world.diagnostics->messages.back();
}

}  // namespace
}  // namespace fhelium::residency
