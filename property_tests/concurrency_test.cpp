// Concurrency properties: generated operation lists run on several threads
// against one manager while another thread snapshots it; every snapshot must
// satisfy every invariant, every read must see the stored contents, and the
// final state must account for every value. A source load that other threads
// race against must make them fail with ResidencyReentrancyError, never block.
// Build with -Db_sanitize=thread to run these under ThreadSanitizer.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "fhelium/harness/contents.hpp"
#include "fhelium/harness/invariant_checker.hpp"
#include "fhelium/harness/simulated_runtime.hpp"
#include "system.hpp"

namespace fhelium::property {
namespace {

using namespace residency;

struct Operation {
  int kind;           // 0 ensure, 1 move, 2 drop, 3 read, 4 reserve, 5 hold
  std::size_t value;
  std::size_t location;
  bool wait;
};

rc::Gen<Operation> operation_gen(std::size_t values) {
  return rc::gen::build<Operation>(rc::gen::set(&Operation::kind, rc::gen::inRange(0, 6)),
                                   rc::gen::set(&Operation::value, rc::gen::inRange<std::size_t>(0, values)),
                                   rc::gen::set(&Operation::location, rc::gen::inRange<std::size_t>(0, 4)),
                                   rc::gen::set(&Operation::wait, rc::gen::arbitrary<bool>()));
}

RC_GTEST_PROP(Concurrency, ConcurrentOperationsKeepEverySnapshotConsistent, ()) {
  constexpr std::size_t value_count = 6;
  constexpr int threads = 3;
  std::vector<std::vector<Operation>> plans;
  for (int t = 0; t < threads; ++t) {
    plans.push_back(*rc::gen::container<std::vector<Operation>>(*rc::gen::inRange(5, 40), operation_gen(value_count)));
  }
  System system;
  ResidencyManager& manager = *system.manager;
  std::vector<std::int64_t> charges;
  for (std::size_t i = 0; i < value_count; ++i) {
    const std::int64_t charge = 1024 * static_cast<std::int64_t>(1 + i % 3);
    charges.push_back(charge);
    system.handles.push_back(manager.adopt(System::contents(i, charge), std::nullopt,
                                           i % 2 ? ReplicaMode::replicable : ReplicaMode::exclusive));
  }
  std::atomic<bool> done{false};
  std::atomic<int> problems{0};
  std::string first_problem;
  std::mutex problem_mutex;
  const auto report = [&](const std::string& message) {
    std::lock_guard lock(problem_mutex);
    if (problems.fetch_add(1) == 0) first_problem = message;
  };
  std::thread observer([&] {
    harness::InvariantChecker checker;
    while (!done.load()) {
      for (const auto& violation : checker.check(manager.snapshot())) {
        report("invariant " + violation.invariant + ": " + violation.detail);
      }
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      const auto& places = all_locations();
      for (const Operation& op : plans[static_cast<std::size_t>(t)]) {
        const ResidencyHandle& handle = system.handles[op.value];
        const ResidencyLocation& place = places[op.location];
        const std::optional<c10::Stream> stream =
            place.is_cuda() ? std::optional(c10::Stream(c10::Stream::UNSAFE, place.device(), 1 + t)) : std::nullopt;
        try {
          switch (op.kind) {
            case 0: manager.ensure(handle, place); break;
            case 1: manager.move(handle, place); break;
            case 2: manager.drop(handle, place); break;
            case 3: {
              auto lease = manager.acquire({handle}, place, stream);
              if (!harness::same_contents(lease.value(handle), System::contents(op.value, charges[op.value]))) {
                report("contents of value " + std::to_string(op.value) + " changed");
              }
              lease.release(op.wait);
              break;
            }
            case 4: manager.reserve(place, 512, "burst").release(); break;
            default: manager.hold({handle}, place).release(); break;
          }
        } catch (const ResidencyError&) {
          // refusals (budget, protection, ownership, availability) are expected under contention
        } catch (const c10::Error& error) {
          report(std::string("runtime error: ") + error.what_without_backtrace());
        }
      }
    });
  }
  for (auto& worker : workers) worker.join();
  done.store(true);
  observer.join();
  RC_ASSERT(problems.load() == 0);
  const ResidencySnapshot final_state = manager.snapshot();
  for (const auto& value : final_state.values) RC_ASSERT(!value.materializations.empty());
  for (const auto& location : final_state.locations) {
    RC_ASSERT(location.reserved_bytes == 0);
    RC_ASSERT(location.use_count + location.hold_count == 0);
  }
  if (!first_problem.empty()) RC_FAIL(first_problem);
}

RC_GTEST_PROP(Concurrency, LoadsRejectEveryOtherCallerInsteadOfBlocking, ()) {
  const int racers = *rc::gen::inRange(1, 4);
  System system;
  ResidencyManager& manager = *system.manager;
  const ResidencyHandle other = manager.adopt(System::contents(0, 1024));
  std::promise<void> loading;
  std::shared_future<void> loading_started = loading.get_future().share();
  std::atomic<int> rejected{0};
  std::atomic<int> finished{0};
  std::vector<std::thread> threads;
  const ResidencyHandle lazy = manager.register_source(
      ResidencyValueSpec("Tensor", 1024, 1024, ReplicaMode::exclusive, Recoverability::reconstructible), [&] {
        loading.set_value();
        // Stay inside load() until every racer has finished its call.
        for (int spin = 0; finished.load() < racers && spin < 200000; ++spin) std::this_thread::yield();
        return System::contents(1, 1024);
      });
  for (int i = 0; i < racers; ++i) {
    threads.emplace_back([&, i] {
      loading_started.wait();
      try {
        if (i % 2 == 0) {
          manager.snapshot();
        } else {
          manager.ensure(other, cuda_location(1));
        }
      } catch (const ResidencyReentrancyError&) {
        rejected.fetch_add(1);
      }
      finished.fetch_add(1);
    });
  }
  manager.ensure(lazy, cuda_location(0));
  for (auto& thread : threads) thread.join();
  RC_ASSERT(rejected.load() == racers);
  RC_ASSERT(manager.snapshot().value(lazy)->materializations.size() == 1u);
}

}  // namespace
}  // namespace fhelium::property
