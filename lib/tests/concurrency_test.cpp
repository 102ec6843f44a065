// Thread safety and the reentrancy rule during source loads.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <thread>

#include "fhelium/harness/forwarding_runtime.hpp"
#include "support.hpp"

namespace fhelium::residency {
namespace {

using namespace testing;

TEST(Reentrancy, CallsFromALoadFailOnEveryThreadInsteadOfBlocking) {
  auto fixture = make_fixture();
  ResidencyManager& manager = *fixture.manager;
  const ResidencyHandle other = manager.adopt(make_value(4));
  std::promise<void> loading;
  std::promise<std::string> other_thread_result;
  const std::shared_future<std::string> observed = other_thread_result.get_future().share();
  bool same_thread_rejected = false;
  const ResidencyHandle lazy = manager.register_source(
      ResidencyValueSpec("Blob", 16, 16, ReplicaMode::exclusive, Recoverability::reconstructible), [&] {
        try {
          manager.drop(other, PAGEABLE_HOST);
        } catch (const ResidencyReentrancyError&) {
          same_thread_rejected = true;
        }
        loading.set_value();
        // Wait for the other thread's call to finish: it must fail, not block.
        observed.wait();
        return make_value(4);
      });
  std::thread observer([&] {
    loading.get_future().wait();
    try {
      manager.snapshot();
      other_thread_result.set_value("snapshot succeeded");
    } catch (const ResidencyReentrancyError&) {
      other_thread_result.set_value("rejected");
    } catch (const std::exception& error) {
      other_thread_result.set_value(error.what());
    }
  });
  manager.ensure(lazy, CUDA0);
  observer.join();
  EXPECT_TRUE(same_thread_rejected);
  EXPECT_EQ(observed.get(), "rejected");
  EXPECT_EQ(resident_at(manager, lazy), std::vector<ResidencyLocation>{CUDA0});
}

// A thread already waiting for the state lock when a source load begins is
// woken and rejected like a later caller, instead of waiting out the load.
class ClockHookRuntime final : public harness::ForwardingRuntime {
 public:
  using ForwardingRuntime::ForwardingRuntime;
  std::function<void()> on_clock;  // run once, inside the manager's call, before the load

 private:
  std::int64_t do_now_ns() override {
    if (auto hook = std::exchange(on_clock, nullptr)) hook();
    return ForwardingRuntime::do_now_ns();
  }
};

TEST(Reentrancy, ThreadsAlreadyWaitingWhenALoadBeginsAreRejectedToo) {
  auto simulated = std::make_shared<harness::SimulatedRuntime>();
  auto runtime = std::make_shared<ClockHookRuntime>(simulated);
  ManagerOptions options;
  options.runtime = runtime;
  ResidencyManager manager(std::move(options));
  std::promise<void> load_done;
  std::shared_future<void> release_load = load_done.get_future().share();
  const ResidencyHandle lazy = manager.register_source(
      ResidencyValueSpec("Blob", 16, 16, ReplicaMode::exclusive, Recoverability::reconstructible), [&] {
        release_load.wait();  // hold the load open until the waiter has its answer
        return make_value(4);
      });
  std::promise<std::string> waiter_result;
  std::future<std::string> waited = waiter_result.get_future();
  std::thread waiter;
  runtime->on_clock = [&] {
    // The ensure below holds the state lock now; start a caller that must wait for it.
    waiter = std::thread([&] {
      try {
        manager.snapshot();
        waiter_result.set_value("snapshot succeeded");
      } catch (const ResidencyReentrancyError&) {
        waiter_result.set_value("rejected");
      }
      load_done.set_value();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let it block on the lock
  };
  manager.ensure(lazy, PAGEABLE_HOST);
  waiter.join();
  EXPECT_EQ(waited.get(), "rejected");
  EXPECT_EQ(resident_at(manager, lazy), std::vector<ResidencyLocation>{PAGEABLE_HOST});
}

TEST(Reentrancy, DiagnosticSinksCannotReenter) {
  auto runtime = std::make_shared<harness::SimulatedRuntime>();
  ResidencyManager* self = nullptr;
  bool rejected = false;
  ManagerOptions options{{}, 16, runtime, [&](const std::string&) {
                           try {
                             self->snapshot();
                           } catch (const ResidencyReentrancyError&) {
                             rejected = true;
                           }
                         }};
  ResidencyManager manager(std::move(options));
  self = &manager;
  const ResidencyHandle handle = manager.adopt(make_value(4));
  { auto hold = manager.hold({handle}, PAGEABLE_HOST); }  // abandoned: emits a diagnostic
  EXPECT_TRUE(rejected);
}

// A lifetime that another thread abandons while a source load runs cannot
// enter the manager; its pin is settled when the loading call ends, so a core
// whose manager is gone still goes with the last thing that holds it.
TEST(Reentrancy, ALifetimeAbandonedDuringAnotherThreadsLoadStillLetsTheCoreGo) {
  auto runtime = std::make_shared<harness::SimulatedRuntime>();
  std::optional<ResidencyLease> lease;
  std::optional<ResidencyScope> scope;
  std::promise<void> loading;
  std::promise<void> abandoned;
  {
    ResidencyManager manager(ManagerOptions{{}, 16, runtime, {}});
    const ResidencyHandle kept = manager.adopt(make_value(4));
    const ResidencyHandle lazy = manager.register_source(
        ResidencyValueSpec("Blob", 16, 16, ReplicaMode::exclusive, Recoverability::reconstructible), [&] {
          loading.set_value();
          abandoned.get_future().wait();
          return make_value(4);
        });
    lease.emplace(manager.acquire({kept}, PAGEABLE_HOST));
    scope.emplace(manager.scope(ResidencyPlan{"load", {EnsureResident{lazy, PAGEABLE_HOST}}}));
  }
  std::thread other([&] {
    loading.get_future().wait();
    lease.reset();  // refused by the load: the lease record stays protective
    abandoned.set_value();
  });
  scope->enter();
  other.join();
  EXPECT_EQ(runtime.use_count(), 2);  // the scope still holds the core
  scope->close();
  scope.reset();
  EXPECT_EQ(runtime.use_count(), 1);
}

// A lifetime destroyed by a source load on the loading thread itself cannot
// enter the manager either; its record stays protective, and its pin drops
// at once, since that thread holds the state lock.
TEST(Reentrancy, ALifetimeAbandonedByTheLoadItselfDropsItsPinExactlyOnce) {
  auto runtime = std::make_shared<harness::SimulatedRuntime>();
  std::optional<ResidencyLease> doomed;
  std::optional<ResidencyLease> kept;
  ResidencyHandle held;
  {
    ResidencyManager manager(ManagerOptions{{}, 16, runtime, {}});
    held = manager.adopt(make_value(4));
    const ResidencyHandle lazy = manager.register_source(
        ResidencyValueSpec("Blob", 16, 16, ReplicaMode::exclusive, Recoverability::reconstructible), [&] {
          doomed.reset();  // refused: this thread is inside the manager
          return make_value(4);
        });
    doomed.emplace(manager.acquire({held}, PAGEABLE_HOST));
    kept.emplace(manager.acquire({held}, PAGEABLE_HOST));
    manager.ensure(lazy, PAGEABLE_HOST);
    EXPECT_FALSE(doomed.has_value());
    EXPECT_EQ(manager.snapshot().value(held)->at(PAGEABLE_HOST)->use_count, 2);  // the abandoned record protects
  }
  EXPECT_EQ(runtime.use_count(), 2);  // `kept` still pins the core
  EXPECT_TRUE(same_contents(kept->value(held), make_value(4)));
  kept->release();
  EXPECT_EQ(runtime.use_count(), 1);
}

// Destroying the manager while another thread's scope runs a source load
// waits for the load to end, then lets the scope finish on its own.
TEST(Reentrancy, DestroyingTheManagerWaitsOutAnotherThreadsLoad) {
  auto runtime = std::make_shared<harness::SimulatedRuntime>();
  std::optional<ResidencyManager> manager;
  manager.emplace(ManagerOptions{{}, 16, runtime, {}});
  std::promise<void> loading;
  std::atomic<bool> finish{false};
  const ResidencyHandle lazy = manager->register_source(
      ResidencyValueSpec("Blob", 16, 16, ReplicaMode::exclusive, Recoverability::reconstructible), [&] {
        loading.set_value();
        while (!finish.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        return make_value(4);
      });
  std::optional<ResidencyScope> scope;
  scope.emplace(manager->scope(ResidencyPlan{"load", {EnsureResident{lazy, PAGEABLE_HOST}}}));
  std::thread loader([&] { scope->enter(); });
  loading.get_future().wait();
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let the destruction start waiting
    finish.store(true);
  });
  manager.reset();  // returns once the load has ended
  EXPECT_TRUE(finish.load());
  loader.join();
  releaser.join();
  EXPECT_TRUE(scope->active());
  const std::optional<ResidencyPlanReport> report = scope->close();
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->transitions.size(), 1u);
  EXPECT_EQ(runtime.use_count(), 2);  // the scope holds the core
  scope.reset();
  EXPECT_EQ(runtime.use_count(), 1);
}

// A runtime whose wait for a lease's events calls back into the manager and
// lets the refusal escape. The release got into the manager, so the lease has
// ended whatever the error's type; ending it again
// on destruction would drop its pin twice and free the core under the lease
// that still holds it.
class ReenteringWaitRuntime final : public harness::ForwardingRuntime {
 public:
  using ForwardingRuntime::ForwardingRuntime;
  bool reenter = false;

 private:
  void do_synchronize_event(const CompletionEvent& event) override {
    if (reenter) throw ResidencyReentrancyError("the wait called back into the manager");
    ForwardingRuntime::do_synchronize_event(event);
  }
};

TEST(Reentrancy, AReleaseThatGotInEndsTheLeaseWhateverItsErrorSays) {
  auto simulated = std::make_shared<harness::SimulatedRuntime>();
  auto runtime = std::make_shared<ReenteringWaitRuntime>(simulated);
  std::optional<ResidencyLease> waited;
  std::optional<ResidencyLease> kept;
  ResidencyHandle handle;
  {
    ResidencyManager manager(ManagerOptions{{}, 16, runtime, {}});
    handle = manager.adopt(make_value(4), std::nullopt, ReplicaMode::replicable);
    manager.ensure(handle, CUDA0);
    waited.emplace(manager.acquire({handle}, CUDA0, simulated->stream(0)));
    kept.emplace(manager.acquire({handle}, PAGEABLE_HOST));
    runtime->reenter = true;
    EXPECT_THROW(waited->release(true), ResidencyReentrancyError);
    EXPECT_FALSE(waited->active());
    const ResidencySnapshot snapshot = manager.snapshot();
    EXPECT_EQ(snapshot.value(handle)->at(CUDA0)->use_count, 0);  // the borrow ended
    EXPECT_EQ(snapshot.value(handle)->at(PAGEABLE_HOST)->use_count, 1);
  }
  waited.reset();
  EXPECT_EQ(runtime.use_count(), 2);  // `kept` still pins the core
  EXPECT_TRUE(same_contents(kept->value(handle), make_value(4)));
  kept->release();
  EXPECT_EQ(runtime.use_count(), 1);
}

// Several threads issue random operations on one manager while another takes
// snapshots; every snapshot's accounting must be internally consistent.
TEST(Concurrency, RandomOperationsKeepSnapshotsConsistent) {
  auto fixture = make_fixture({{CUDA0, 64 * 40}});
  ResidencyManager& manager = *fixture.manager;
  std::vector<ResidencyHandle> handles;
  for (int i = 0; i < 16; ++i) {
    handles.push_back(manager.adopt(make_value(16, static_cast<float>(i)), std::nullopt, ReplicaMode::replicable));
  }
  std::atomic<bool> stop{false};
  std::atomic<int> snapshots{0};
  std::atomic<int> failures{0};
  std::thread checker([&] {
    while (!stop.load()) {
      const ResidencySnapshot snapshot = manager.snapshot();  // constructors validate every record
      for (const auto& location : snapshot.locations) {
        std::int64_t used = 0;
        for (const auto& value : snapshot.values) {
          if (const auto* item = value.at(location.location)) used += item->charged_nbytes;
        }
        if (used != location.used_bytes) failures.fetch_add(1);
      }
      snapshots.fetch_add(1);
    }
  });
  std::vector<std::thread> workers;
  for (int worker = 0; worker < 4; ++worker) {
    workers.emplace_back([&, worker] {
      // Start once the checker is snapshotting, so its snapshots overlap the
      // work however the threads are scheduled.
      while (snapshots.load() == 0) std::this_thread::yield();
      std::mt19937 random(static_cast<unsigned>(worker) + 17u);
      const std::vector<ResidencyLocation> places{PAGEABLE_HOST, PINNED_HOST, CUDA0, CUDA1};
      for (int step = 0; step < 400; ++step) {
        const ResidencyHandle& handle = handles[random() % handles.size()];
        const ResidencyLocation& place = places[random() % places.size()];
        try {
          switch (random() % 5) {
            case 0: manager.ensure(handle, place); break;
            case 1: manager.move(handle, place); break;
            case 2: manager.drop(handle, place); break;
            case 3: {
              auto lease = manager.acquire({handle}, place,
                                           place.is_cuda() ? std::optional(fixture.runtime->stream(place.cuda_index()))
                                                           : std::nullopt);
              if (!same_contents(lease.value(handle), make_value(16, static_cast<float>(&handle - handles.data())))) {
                failures.fetch_add(1);
              }
              lease.release(random() % 2 == 0);
              break;
            }
            default: {
              auto reservation = manager.reserve(CUDA0, 64, "burst");
              break;
            }
          }
        } catch (const ResidencyError&) {
          // budget, protection and ownership refusals are expected under contention
        }
      }
    });
  }
  for (auto& worker : workers) worker.join();
  stop.store(true);
  checker.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(snapshots.load(), 0);
  const ResidencySnapshot final_state = manager.snapshot();
  for (const auto& value : final_state.values) EXPECT_FALSE(value.materializations.empty());
  EXPECT_EQ(final_state.location(CUDA0)->reserved_bytes, 0);
}

// Host leases of one value, once the value has been leased before, are taken
// and released alongside other threads' (in lanes of the manager's state
// gate). Each must still count exactly: in the state version, in the values'
// lease counts, and in what close() finds.
TEST(Lanes, LeasesTakenOnManyThreadsCountExactlyInVersionsLeaseCountsAndClose) {
  auto fixture = make_fixture();
  ResidencyManager& manager = *fixture.manager;
  std::vector<ResidencyHandle> handles;
  for (int i = 0; i < 8; ++i) handles.push_back(manager.adopt(make_value(16, static_cast<float>(i))));
  for (const auto& handle : handles) manager.acquire({handle}, PAGEABLE_HOST).release();
  const std::uint64_t before = manager.state_version();
  constexpr int workers = 4, rounds = 3000;
  std::vector<std::optional<ResidencyLease>> kept(workers);
  std::atomic<int> wrong_contents{0};
  std::vector<std::thread> threads;
  for (int worker = 0; worker < workers; ++worker) {
    threads.emplace_back([&, worker] {
      for (int round = 0; round < rounds; ++round) {
        // Mostly the thread's own value, sometimes one another thread is leasing.
        const std::size_t index = static_cast<std::size_t>(round % 8 == 0 ? (worker + round / 8) % 8 : worker);
        ResidencyLease lease = manager.acquire({handles[index]}, PAGEABLE_HOST);
        if (round % 16 == 0 && !same_contents(lease.value(handles[index]), make_value(16, static_cast<float>(index)))) {
          wrong_contents.fetch_add(1);
        }
        lease.release();
      }
      kept[static_cast<std::size_t>(worker)].emplace(manager.acquire({handles[static_cast<std::size_t>(worker)]},
                                                                     PAGEABLE_HOST));
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong_contents.load(), 0);
  EXPECT_EQ(manager.state_version(), before + 2 * workers * rounds + workers);
  const ResidencySnapshot snapshot = manager.snapshot();
  for (std::size_t index = 0; index < handles.size(); ++index) {
    const auto* value = snapshot.value(handles[index]);
    ASSERT_NE(value, nullptr);
    ASSERT_NE(value->at(PAGEABLE_HOST), nullptr);
    EXPECT_EQ(value->at(PAGEABLE_HOST)->use_count, index < workers ? 1 : 0) << index;
  }
  try {
    manager.close();
    ADD_FAILURE() << "closed with four active leases";
  } catch (const ResidencyInUseError& error) {
    EXPECT_NE(std::string(error.what()).find("active_leases=4, pending_leases=0"), std::string::npos) << error.what();
  }
  for (auto& lease : kept) {
    EXPECT_TRUE(same_contents(lease->value(lease->handles().front()),
                              make_value(16, static_cast<float>(&lease - kept.data()))));
    lease->release();
    EXPECT_FALSE(lease->active());
  }
  EXPECT_EQ(manager.state_version(), before + 2 * workers * rounds + 2 * workers);
  manager.close();
  EXPECT_TRUE(manager.closed());
}

// A lease taken in a lane is counted in its materialization's use count when
// the next call takes the state lock; whichever way it is released after
// that (in the lane or under the lock), each lease counts once, and a
// removal never misses one.
// A value resident at pageable and pinned host (so the pageable copy may be
// dropped) whose next host leases run in lanes: its first lease, taken
// under the lock, has built its handle list.
ResidencyHandle lane_leasable_value(ResidencyManager& manager) {
  const ResidencyHandle handle = manager.adopt(make_value(8), std::nullopt, ReplicaMode::replicable);
  manager.ensure(handle, PINNED_HOST);
  manager.acquire({handle}, PAGEABLE_HOST).release();
  return handle;
}

TEST(Lanes, LeasesCountWhetherReleasedBeforeOrAfterTheNextLockedCall) {
  auto fixture = make_fixture();
  ResidencyManager& manager = *fixture.manager;
  const ResidencyHandle handle = lane_leasable_value(manager);
  const auto uses = [&] { return manager.snapshot().value(handle)->at(PAGEABLE_HOST)->use_count; };
  std::uint64_t version = manager.state_version();
  // Released before any locked call: never counted, yet versioned.
  manager.acquire({handle}, PAGEABLE_HOST).release();
  EXPECT_EQ(uses(), 0);
  EXPECT_EQ(manager.state_version(), version += 2);
  // Counted by a locked call, then released: the count is undone.
  std::optional<ResidencyLease> first = manager.acquire({handle}, PAGEABLE_HOST);
  std::optional<ResidencyLease> second = manager.acquire({handle}, PAGEABLE_HOST);
  EXPECT_EQ(uses(), 2);
  version += 2;
  EXPECT_THROW(manager.drop(handle, PAGEABLE_HOST), ResidencyInUseError);  // protected though taken in a lane
  std::optional<ResidencyLease> third = manager.acquire({handle}, PAGEABLE_HOST);  // taken after that call
  EXPECT_TRUE(same_contents(third->value(handle), make_value(8)));
  first->release();
  EXPECT_EQ(uses(), 2);
  EXPECT_THROW(manager.drop(handle, PAGEABLE_HOST), ResidencyInUseError);
  third->release();  // counted by the drop's call: undone by the next locked call
  second.reset();    // abandoned: released under the lock, with a diagnostic
  EXPECT_EQ(uses(), 0);
  EXPECT_EQ(manager.state_version(), version += 4);
  manager.drop(handle, PAGEABLE_HOST);  // nothing protects it any more
  EXPECT_EQ(resident_at(manager, handle), std::vector<ResidencyLocation>{PINNED_HOST});
  EXPECT_THROW(manager.acquire({handle}, PAGEABLE_HOST), ResidencyUnavailableError);
  EXPECT_EQ(manager.diagnostics().size(), 1u);
}

// A lane notes at most eight counted leases ended between two locked calls
// (LifetimeTable::ended_capacity); the ninth is released under the lock,
// which first folds in the eight, and the tenth is noted in the lane again.
// Whichever way each went, every count is undone and nothing is left
// protected.
TEST(Lanes, MoreCountedReleasesBetweenTwoLockedCallsThanALaneNotesAllUncount) {
  auto fixture = make_fixture();
  ResidencyManager& manager = *fixture.manager;
  const ResidencyHandle handle = lane_leasable_value(manager);
  const auto uses = [&] { return manager.snapshot().value(handle)->at(PAGEABLE_HOST)->use_count; };
  std::vector<ResidencyLease> leases;
  for (int i = 0; i < 10; ++i) leases.push_back(manager.acquire({handle}, PAGEABLE_HOST));
  std::uint64_t version = manager.state_version();
  EXPECT_EQ(uses(), 10);  // a locked call: all ten are counted now
  for (auto& lease : leases) lease.release();
  EXPECT_EQ(manager.state_version(), version += 10);
  EXPECT_EQ(uses(), 0);
  manager.drop(handle, PAGEABLE_HOST);  // nothing protects it
  EXPECT_EQ(resident_at(manager, handle), std::vector<ResidencyLocation>{PINNED_HOST});
  EXPECT_TRUE(manager.diagnostics().empty());
  // Released on both sides of a locked call.
  const ResidencyHandle other = lane_leasable_value(manager);
  leases.clear();
  for (int i = 0; i < 12; ++i) leases.push_back(manager.acquire({other}, PAGEABLE_HOST));
  EXPECT_EQ(manager.snapshot().value(other)->at(PAGEABLE_HOST)->use_count, 12);
  for (int i = 0; i < 9; ++i) leases[static_cast<std::size_t>(i)].release();
  EXPECT_EQ(manager.snapshot().value(other)->at(PAGEABLE_HOST)->use_count, 3);
  for (int i = 9; i < 12; ++i) leases[static_cast<std::size_t>(i)].release();
  EXPECT_EQ(manager.snapshot().value(other)->at(PAGEABLE_HOST)->use_count, 0);
  manager.close();
  EXPECT_TRUE(manager.diagnostics().empty());
}

// A drop racing host leases on other threads either sees a lease (and is
// refused) or removes the materialization before the next lease looks (which
// then finds the value not resident there): a lease never reads a value that
// was dropped under it.
TEST(Lanes, ADropRacingLeasesNeverRemovesALeasedMaterialization) {
  auto fixture = make_fixture();
  ResidencyManager& manager = *fixture.manager;
  std::vector<ResidencyHandle> handles;
  for (int i = 0; i < 3; ++i) {
    handles.push_back(manager.adopt(make_value(16, static_cast<float>(i)), std::nullopt, ReplicaMode::replicable));
    manager.ensure(handles.back(), PINNED_HOST);  // a second replica, so the pageable one may go
    manager.acquire({handles.back()}, PAGEABLE_HOST).release();
  }
  std::atomic<bool> stop{false};
  std::atomic<int> leased{0}, unavailable{0}, wrong_contents{0};
  std::vector<std::thread> threads;
  for (int worker = 0; worker < 3; ++worker) {
    threads.emplace_back([&, worker] {
      const auto index = static_cast<std::size_t>(worker);
      while (!stop.load()) {
        try {
          ResidencyLease lease = manager.acquire({handles[index]}, PAGEABLE_HOST);
          if (!same_contents(lease.value(handles[index]), make_value(16, static_cast<float>(worker)))) {
            wrong_contents.fetch_add(1);
          }
          lease.release();
          leased.fetch_add(1);
        } catch (const ResidencyUnavailableError&) {
          unavailable.fetch_add(1);  // dropped just now
        }
      }
    });
  }
  int dropped = 0, refused = 0;
  for (int round = 0; round < 3000; ++round) {
    const ResidencyHandle& handle = handles[static_cast<std::size_t>(round) % handles.size()];
    try {
      manager.drop(handle, PAGEABLE_HOST);
      ++dropped;
    } catch (const ResidencyInUseError&) {
      ++refused;  // leased at that moment
    }
    manager.ensure(handle, PAGEABLE_HOST);
  }
  stop.store(true);
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong_contents.load(), 0);
  EXPECT_EQ(dropped + refused, 3000);
  EXPECT_GT(leased.load(), 0);
  const ResidencySnapshot snapshot = manager.snapshot();
  for (const auto& handle : handles) EXPECT_EQ(snapshot.value(handle)->at(PAGEABLE_HOST)->use_count, 0);
}

// A host lease taken alongside other threads keeps a destroyed manager's
// core alive until it is released, like any other lifetime, and the last
// one to end lets the core go however it ends: released or abandoned, with
// no other call in between.
TEST(Lanes, LeasesOutlivingTheirManagerKeepTheCoreUntilTheLastEnds) {
  for (const bool abandon_last : {false, true}) {
    auto fixture = make_fixture();
    const ResidencyHandle handle = fixture.manager->adopt(make_value(4));
    fixture.manager->acquire({handle}, PAGEABLE_HOST).release();
    std::optional<ResidencyLease> first = fixture.manager->acquire({handle}, PAGEABLE_HOST);
    std::optional<ResidencyLease> last = fixture.manager->acquire({handle}, PAGEABLE_HOST);
    fixture.manager.reset();
    EXPECT_EQ(fixture.runtime.use_count(), 2);  // the test's and the core's
    EXPECT_TRUE(same_contents(first->value(handle), make_value(4)));
    first->release();
    EXPECT_EQ(fixture.runtime.use_count(), 2) << abandon_last;  // `last` still pins the core
    if (abandon_last) {
      last.reset();
    } else {
      last->release();
      EXPECT_FALSE(last->active());
    }
    EXPECT_EQ(fixture.runtime.use_count(), 1) << abandon_last;
  }
}

// A source load refuses every other call, lane calls included: host leases
// of a value leased before, their reads and their releases, on the loading
// thread and on others. A refused release leaves the lease active.
TEST(Lanes, ASourceLoadRefusesLaneCallsOnEveryThread) {
  auto fixture = make_fixture();
  ResidencyManager& manager = *fixture.manager;
  const ResidencyHandle leased = manager.adopt(make_value(4));
  manager.acquire({leased}, PAGEABLE_HOST).release();
  std::optional<ResidencyLease> held = manager.acquire({leased}, PAGEABLE_HOST);
  const auto refused = [](const std::function<void()>& call) {
    try {
      call();
    } catch (const ResidencyReentrancyError&) {
      return true;
    }
    return false;
  };
  std::vector<bool> on_loading_thread, on_other_thread;
  const ResidencyHandle lazy = manager.register_source(
      ResidencyValueSpec("Blob", 16, 16, ReplicaMode::exclusive, Recoverability::reconstructible), [&] {
        on_loading_thread.push_back(refused([&] { manager.acquire({leased}, PAGEABLE_HOST); }));
        on_loading_thread.push_back(refused([&] { held->value(leased); }));
        std::thread other([&] {
          on_other_thread.push_back(refused([&] { manager.acquire({leased}, PAGEABLE_HOST); }));
          on_other_thread.push_back(refused([&] { held->value(leased); }));
          on_other_thread.push_back(refused([&] { held->release(); }));
        });
        other.join();
        return make_value(4);
      });
  const std::uint64_t before = manager.state_version();
  manager.ensure(lazy, PAGEABLE_HOST);
  EXPECT_EQ(on_loading_thread, (std::vector<bool>{true, true}));
  EXPECT_EQ(on_other_thread, (std::vector<bool>{true, true, true}));
  EXPECT_TRUE(held->active());
  EXPECT_EQ(manager.snapshot().value(leased)->at(PAGEABLE_HOST)->use_count, 1);
  EXPECT_EQ(manager.state_version(), before + 1);  // the ensure alone
  held->release();
  EXPECT_EQ(manager.snapshot().value(leased)->at(PAGEABLE_HOST)->use_count, 0);
}

}  // namespace
}  // namespace fhelium::residency
