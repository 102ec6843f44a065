// The manager's parts on their own: the transition rules (decided from a
// hand-built view of one value) and the allocator rule of reports, the
// location ledger's shadow for dry runs, the state gate, the core's pins, the
// value table and its inline materialization storage.
#include <gtest/gtest.h>

#include <ATen/ops/arange.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <limits>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "detail/core_pins.hpp"
#include "detail/dry_run.hpp"
#include "detail/handle_text.hpp"
#include "detail/ledger.hpp"
#include "detail/lifetime_table.hpp"
#include "detail/line_allocator.hpp"
#include "detail/ring.hpp"
#include "detail/snapshot_assembly.hpp"
#include "detail/state_gate.hpp"
#include "detail/storage_index.hpp"
#include "detail/token_table.hpp"
#include "detail/transition_rules.hpp"
#include "detail/transitions.hpp"
#include "detail/unix_clock.hpp"
#include "detail/value_table.hpp"
#include "fhelium/residency/errors.hpp"
#include "fhelium/residency/inline_vector.hpp"
#include "fhelium/harness/simulated_runtime.hpp"

namespace fhelium::residency::detail {
namespace {

// Adds a materialization of `record` at `location` holding `value` and
// charged `storage_nbytes`, built as the manager builds one (without
// storage keys, which these tests do not use).
Materialization& add_item(ValueRecord& record, const ResidencyLocation& location, ResidentValue value,
                          std::int64_t storage_nbytes) {
  Materialization& item = record.materializations.emplace_back(location, [&] { return std::move(value); });
  item.storage_nbytes = storage_nbytes;
  return item;
}

const ResidencyLocation CUDA0 = cuda_location(0);
const ResidencyLocation CUDA1 = cuda_location(1);

// A value's state written out: where it is (insertion order) and what is protected.
struct FakeView {
  ValueRecord value;
  std::vector<ResidencyLocation> locations;
  std::set<ResidencyLocation> protected_places;

  const ValueRecord& record() const { return value; }
  bool resident(const ResidencyLocation& location) const {
    return std::find(locations.begin(), locations.end(), location) != locations.end();
  }
  std::size_t count() const { return locations.size(); }
  std::optional<ResidencyLocation> first(const std::optional<ResidencyLocation>& exclude) const {
    return smallest_location(locations, exclude, [](const ResidencyLocation& at) { return at; });
  }
  bool protected_at(const ResidencyLocation& location) const {
    return resident(location) && protected_places.count(location) != 0;
  }
  std::vector<ResidencyLocation> protected_locations() const {
    return protected_locations_of(
        locations, [](const ResidencyLocation& at) { return at; },
        [this](const ResidencyLocation& at) { return protected_at(at); });
  }
};

FakeView view(ReplicaMode mode, bool with_source, std::vector<ResidencyLocation> locations,
              std::set<ResidencyLocation> protected_places = {}) {
  ValueRecord record{1,
                     ResidencyValueSpec("T", 64, 64, mode,
                                        with_source ? Recoverability::reconstructible : Recoverability::must_preserve),
                     nullptr, std::nullopt};
  if (with_source) {
    record.source = make_source([]() -> ResidentValue { throw std::logic_error("the rules never load"); });
    record.source_location = PINNED_HOST;
  }
  return FakeView{std::move(record), std::move(locations), std::move(protected_places)};
}

const ResidencyHandle handle{"m", "1", "T"};

TEST(TransitionRules, EnsureCopiesFromTheSmallestLocationOrReconstructs) {
  auto copy = decide_transition(EnsureResident{handle, CUDA1}, view(ReplicaMode::replicable, false, {CUDA0, PINNED_HOST}));
  EXPECT_EQ(copy.source, PINNED_HOST);
  EXPECT_EQ(copy.destination, CUDA1);
  EXPECT_TRUE(copy.install);
  EXPECT_FALSE(copy.load);
  EXPECT_FALSE(copy.remove);
  auto load = decide_transition(EnsureResident{handle, CUDA0}, view(ReplicaMode::replicable, true, {}));
  EXPECT_TRUE(load.load && load.install);
  EXPECT_EQ(load.source, PINNED_HOST);
  auto none = decide_transition(EnsureResident{handle, CUDA0}, view(ReplicaMode::replicable, false, {}));
  EXPECT_EQ(none.refusal, Refusal::no_source);
  EXPECT_EQ(refusal_reason(none, {}), "value has no materialization or source");
  auto already = decide_transition(EnsureResident{handle, CUDA0}, view(ReplicaMode::exclusive, false, {CUDA0}));
  EXPECT_STREQ(already.no_op, "destination already resident");
  auto exclusive = decide_transition(EnsureResident{handle, CUDA0}, view(ReplicaMode::exclusive, false, {PINNED_HOST}));
  EXPECT_EQ(exclusive.refusal, Refusal::exclusive_replica);
}

TEST(TransitionRules, ReportsSampleTheAllocatorOfTheActionsCudaDeviceOnly) {
  const auto sampled = [](const ResidencyAction& action, const std::vector<ResidencyLocation>& places) {
    return allocator_device(action, places, [](const ResidencyLocation& at) { return at; });
  };
  const std::vector<ResidencyLocation> host_then_cuda{PINNED_HOST, CUDA1, CUDA0};
  const std::vector<ResidencyLocation> host_only{PAGEABLE_HOST};
  const c10::Device device0(c10::DeviceType::CUDA, 0), device1(c10::DeviceType::CUDA, 1);
  // Ensure and drop: their own location when it is CUDA, whatever the value holds.
  EXPECT_EQ(sampled(EnsureResident{handle, CUDA0}, host_only), device0);
  EXPECT_EQ(sampled(EnsureResident{handle, PINNED_HOST}, host_then_cuda), std::nullopt);
  EXPECT_EQ(sampled(DropResident{handle, CUDA1}, host_only), device1);
  EXPECT_EQ(sampled(DropResident{handle, PAGEABLE_HOST}, host_then_cuda), std::nullopt);
  // Move: the CUDA destination, else the explicit source, else the first CUDA materialization.
  EXPECT_EQ(sampled(MoveResident{handle, CUDA1, CUDA0}, host_only), device1);
  EXPECT_EQ(sampled(MoveResident{handle, PINNED_HOST, CUDA0}, host_then_cuda), device0);
  EXPECT_EQ(sampled(MoveResident{handle, PINNED_HOST, PAGEABLE_HOST}, host_then_cuda), std::nullopt);
  EXPECT_EQ(sampled(MoveResident{handle, PAGEABLE_HOST, std::nullopt}, host_then_cuda), device1);
  EXPECT_EQ(sampled(MoveResident{handle, PAGEABLE_HOST, std::nullopt}, host_only), std::nullopt);
  // Discard: the first CUDA materialization in insertion order.
  EXPECT_EQ(sampled(DiscardValue{handle}, host_then_cuda), device1);
  EXPECT_EQ(sampled(DiscardValue{handle}, host_only), std::nullopt);
}

TEST(TransitionRules, MoveChoosesRemovesAndRespectsProtection) {
  auto move = decide_transition(MoveResident{handle, CUDA0, std::nullopt},
                                view(ReplicaMode::exclusive, false, {CUDA1, PINNED_HOST}));
  EXPECT_EQ(move.source, PINNED_HOST);
  EXPECT_TRUE(move.install && move.exclusive_transition);
  EXPECT_EQ(move.remove, PINNED_HOST);
  // Onto an existing replica: only the source goes.
  auto onto = decide_transition(MoveResident{handle, CUDA0, CUDA1},
                                view(ReplicaMode::replicable, false, {CUDA0, CUDA1}));
  EXPECT_FALSE(onto.install);
  EXPECT_EQ(onto.remove, CUDA1);
  // An explicit source equal to the destination is reported; an implicit one is not.
  auto same = decide_transition(MoveResident{handle, CUDA0, CUDA0}, view(ReplicaMode::exclusive, false, {CUDA0}, {CUDA0}));
  EXPECT_TRUE(same.changes_nothing());
  EXPECT_EQ(same.source, CUDA0);
  auto implicit = decide_transition(MoveResident{handle, CUDA0, std::nullopt}, view(ReplicaMode::exclusive, false, {CUDA0}));
  EXPECT_TRUE(implicit.changes_nothing());
  EXPECT_FALSE(implicit.source);
  auto held = decide_transition(MoveResident{handle, CUDA0, std::nullopt},
                                view(ReplicaMode::exclusive, false, {PINNED_HOST}, {PINNED_HOST}));
  EXPECT_EQ(held.refusal, Refusal::source_protected);
  EXPECT_EQ(refusal_reason(held, {}), "source pinned-host is protected");
  auto absent = decide_transition(MoveResident{handle, CUDA0, CUDA1}, view(ReplicaMode::exclusive, false, {PINNED_HOST}));
  EXPECT_EQ(absent.refusal, Refusal::explicit_source_absent);
  EXPECT_EQ(absent.source, CUDA1);
  auto reconstruct = decide_transition(MoveResident{handle, CUDA0, std::nullopt}, view(ReplicaMode::exclusive, true, {}));
  EXPECT_TRUE(reconstruct.load && reconstruct.install);
  EXPECT_EQ(reconstruct.source, PINNED_HOST);
  EXPECT_FALSE(reconstruct.remove);
}

TEST(TransitionRules, DropAndDiscardKeepProtectedAndPreservedValues) {
  auto last = decide_transition(DropResident{handle, CUDA0}, view(ReplicaMode::exclusive, false, {CUDA0}));
  EXPECT_EQ(last.refusal, Refusal::final_must_preserve);
  auto sourced = decide_transition(DropResident{handle, CUDA0}, view(ReplicaMode::exclusive, true, {CUDA0}));
  EXPECT_EQ(sourced.remove, CUDA0);
  auto absent = decide_transition(DropResident{handle, CUDA1}, view(ReplicaMode::exclusive, true, {CUDA0}));
  EXPECT_STREQ(absent.no_op, "materialization already absent");
  auto busy = decide_transition(DropResident{handle, CUDA0},
                                view(ReplicaMode::replicable, false, {CUDA0, CUDA1}, {CUDA0}));
  EXPECT_EQ(busy.refusal, Refusal::target_protected);
  EXPECT_EQ(busy.refused_at, CUDA0);
  const auto protected_value = view(ReplicaMode::replicable, false, {CUDA1, PINNED_HOST, CUDA0}, {CUDA0, CUDA1});
  auto discard = decide_transition(DiscardValue{handle}, protected_value);
  EXPECT_EQ(discard.refusal, Refusal::discard_protected);
  EXPECT_EQ(discard.refused_at, CUDA1);  // the first in insertion order
  EXPECT_EQ(refusal_reason(discard, protected_value.protected_locations()),
            "discarded value has protected locations [cuda:1, cuda:0]");
  EXPECT_TRUE(decide_transition(DiscardValue{handle}, view(ReplicaMode::replicable, false, {CUDA0})).discard);
}

TEST(LocationLedger, ShadowStartsPeaksAtTheCurrentChargeAndKeepsTheRealLedger) {
  LocationLedger ledger;
  ledger.add_budget(CUDA0, 100);
  ledger.add_used(CUDA0, 60);
  ledger.remove_used(CUDA0, 40);  // peak 60, charge 20
  LocationLedger shadow = ledger.shadow();
  EXPECT_EQ(shadow.find(CUDA0)->peak_charged_bytes, 20);
  shadow.add_reserved(CUDA0, 30);
  EXPECT_EQ(shadow.find(CUDA0)->peak_charged_bytes, 50);
  EXPECT_THROW(shadow.check_admission(CUDA0, 51), ResidencyBudgetError);
  shadow.note_transient_charge(CUDA0, 70);  // a refused dry-run charge still shows in the peak
  EXPECT_EQ(shadow.find(CUDA0)->peak_charged_bytes, 120);
  shadow.note_transient_charge(CUDA0, std::numeric_limits<std::int64_t>::max());  // unrepresentable: ignored
  EXPECT_EQ(shadow.find(CUDA0)->peak_charged_bytes, 120);
  EXPECT_EQ(ledger.find(CUDA0)->reserved_bytes, 0);
  EXPECT_EQ(ledger.find(CUDA0)->peak_charged_bytes, 60);
}

// admit_charge() is check_admission() and the charge in one (the dry run
// charges every action with it): it admits exactly what check_admission()
// lets through, at each bound, budgeted or not, charges that as asked, and
// charges nothing when it refuses.
TEST(LocationLedger, AdmitChargeAdmitsWhatCheckAdmissionLetsThroughAndChargesAsAsked) {
  constexpr std::int64_t max = std::numeric_limits<std::int64_t>::max();
  using Kind = LocationLedger::ChargeKind;
  const auto fresh = [] {
    LocationLedger ledger;
    ledger.add_budget(CUDA0, 100);
    ledger.add_used(CUDA0, 60);
    ledger.add_reserved(CUDA0, 15);  // 25 left
    ledger.register_location(PINNED_HOST);
    ledger.add_used(PINNED_HOST, max - 10);  // unbudgeted: 10 left below INT64_MAX
    return ledger;
  };
  const auto check_admits = [](const LocationLedger& ledger, const ResidencyLocation& at, std::int64_t bytes) {
    try {
      ledger.check_admission(at, bytes);
      return true;
    } catch (const ResidencyBudgetError&) {
      return false;
    }
  };
  for (const auto& [at, room] : {std::pair{CUDA0, std::int64_t{25}}, std::pair{PINNED_HOST, std::int64_t{10}}}) {
    for (const std::int64_t bytes : {std::int64_t{0}, room - 1, room, room + 1, max}) {
      for (const Kind kind : {Kind::used, Kind::reserved, Kind::transient}) {
        SCOPED_TRACE(at.name() + " +" + std::to_string(bytes) + " kind " + std::to_string(static_cast<int>(kind)));
        LocationLedger ledger = fresh();
        const LocationAccount before = *ledger.find(at);
        const bool admitted = ledger.admit_charge(at, bytes, kind);
        EXPECT_EQ(admitted, bytes <= room);
        EXPECT_EQ(admitted, check_admits(fresh(), at, bytes));
        const LocationAccount& after = *ledger.find(at);
        const std::int64_t charged = admitted ? bytes : 0;
        EXPECT_EQ(after.used_bytes, before.used_bytes + (kind == Kind::used ? charged : 0));
        EXPECT_EQ(after.reserved_bytes, before.reserved_bytes + (kind == Kind::reserved ? charged : 0));
        EXPECT_EQ(after.peak_used_bytes, std::max(before.peak_used_bytes, after.used_bytes));
        EXPECT_EQ(after.peak_charged_bytes,
                  std::max(before.peak_charged_bytes, before.used_bytes + before.reserved_bytes + charged));
      }
    }
  }
}

// use_reserved() turns a held reservation into used bytes as returning it
// and charging it again would (one admitted charge, the same peaks), at a
// budget filled to the byte, where a second admission of the charge would
// have been refused while the reservation was held.
TEST(LocationLedger, UseReservedTurnsAReservationIntoTheUsedChargeItAdmitted) {
  LocationLedger ledger;
  ledger.add_budget(CUDA0, 100);
  ledger.add_used(CUDA0, 30);
  ledger.remove_used(CUDA0, 10);  // peak used 30, charge 20
  ledger.add_reserved(CUDA0, 50);
  ledger.add_reserved(CUDA0, 30);  // the budget is full: 20 used + 80 reserved
  EXPECT_THROW(ledger.check_admission(CUDA0, 30), ResidencyBudgetError);
  ledger.use_reserved(CUDA0, 30);
  const LocationAccount& account = *ledger.find(CUDA0);
  EXPECT_EQ(account.used_bytes, 50);
  EXPECT_EQ(account.reserved_bytes, 50);
  EXPECT_EQ(account.remaining_bytes(), 0);
  EXPECT_EQ(account.peak_used_bytes, 50);
  EXPECT_EQ(account.peak_charged_bytes, 100);
  ledger.use_reserved(CUDA0, 0);  // nothing to turn: nothing changes
  EXPECT_EQ(account.used_bytes, 50);
  EXPECT_EQ(account.peak_used_bytes, 50);
  // The same as returning the reservation and charging it as used.
  LocationLedger twice;
  twice.add_budget(CUDA0, 100);
  twice.add_used(CUDA0, 30);
  twice.remove_used(CUDA0, 10);
  twice.add_reserved(CUDA0, 80);
  twice.remove_reserved(CUDA0, 30);
  twice.check_admission(CUDA0, 30);
  twice.add_used(CUDA0, 30);
  const LocationAccount& other = *twice.find(CUDA0);
  EXPECT_EQ(std::tie(other.used_bytes, other.reserved_bytes, other.peak_used_bytes, other.peak_charged_bytes),
            std::tie(account.used_bytes, account.reserved_bytes, account.peak_used_bytes, account.peak_charged_bytes));
}

TEST(LocationLedgerDeathTest, UseReservedBeyondTheReservationIsABug) {
  LocationLedger ledger;
  ledger.register_location(PAGEABLE_HOST);
  ledger.add_reserved(PAGEABLE_HOST, 10);
  EXPECT_DEATH(ledger.use_reserved(PAGEABLE_HOST, 11), "reservation not held");
}

// ---- the state gate -----------------------------------------------------------

TEST(StateGate, RefusesReentryFromTheHolderAndAdmitsAgainAfterLeave) {
  StateGate gate;
  ASSERT_EQ(gate.enter(), StateGate::Entry::entered);
  EXPECT_EQ(gate.enter(), StateGate::Entry::refused_reentry);
  gate.set_loading(true);
  EXPECT_EQ(gate.enter(), StateGate::Entry::refused_loading);  // a source calling back
  gate.set_loading(false);
  gate.leave();
  ASSERT_EQ(gate.enter(), StateGate::Entry::entered);  // left: no longer a reentry
  gate.leave();
}

// A gate whose sleepers wake only when signalled: a lost signal hangs the test.
constexpr std::chrono::hours signals_only{1};

TEST(StateGate, AnotherThreadWaitsUntilTheHolderLeaves) {
  StateGate gate(signals_only);
  ASSERT_EQ(gate.enter(), StateGate::Entry::entered);
  std::atomic<bool> left{false};
  std::atomic<bool> entered_early{false};
  std::thread other([&] {
    EXPECT_EQ(gate.enter(), StateGate::Entry::entered);
    entered_early = !left.load();
    EXPECT_EQ(gate.enter(), StateGate::Entry::refused_reentry);  // held by this thread now
    gate.leave();
  });
  // Long enough for the other thread to pass its spin and sleep: only
  // leave()'s signal can then wake it.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  left = true;
  gate.leave();
  other.join();
  EXPECT_FALSE(entered_early.load());
}

TEST(StateGate, LoadingRefusesWaitersAlreadyAsleepAndNewcomers) {
  StateGate gate(signals_only);
  ASSERT_EQ(gate.enter(), StateGate::Entry::entered);
  std::atomic<int> outcome{-1};
  std::thread sleeper([&] { outcome = static_cast<int>(gate.enter()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(outcome.load(), -1);  // still waiting
  gate.set_loading(true);
  sleeper.join();  // woken, and refused rather than left waiting for the load
  EXPECT_EQ(outcome.load(), static_cast<int>(StateGate::Entry::refused_loading));
  std::thread newcomer([&] { EXPECT_EQ(gate.enter(), StateGate::Entry::refused_loading); });
  newcomer.join();
  gate.set_loading(false);
  gate.leave();
  std::thread after([&] {
    EXPECT_EQ(gate.enter(), StateGate::Entry::entered);
    gate.leave();
  });
  after.join();
}

// `threads` threads each enter `gate` `rounds` times and run `body` inside.
// Returns whether two bodies ever ran at once.
bool take_turns(StateGate& gate, int threads, int rounds, const std::function<void()>& body) {
  std::atomic<int> inside{0};
  std::atomic<bool> overlapped{false};
  std::vector<std::thread> workers;
  for (int thread = 0; thread < threads; ++thread) {
    workers.emplace_back([&] {
      for (int round = 0; round < rounds; ++round) {
        ASSERT_EQ(gate.enter(), StateGate::Entry::entered);
        if (inside.fetch_add(1) != 0) overlapped = true;
        body();
        inside.fetch_sub(1);
        gate.leave();
      }
    });
  }
  for (auto& worker : workers) worker.join();
  return overlapped.load();
}

TEST(StateGate, ExcludesConcurrentHoldersUnderContention) {
  StateGate gate;
  std::int64_t counter = 0;  // guarded by the gate alone (TSan checks that it is)
  EXPECT_FALSE(take_turns(gate, 4, 20000, [&] { ++counter; }));
  EXPECT_EQ(counter, 4 * 20000);
}

TEST(StateGate, SleepingWaitersAllGetInWhenHoldersStayLongEnoughToPutThemToSleep) {
  // Each holder stays past the waiters' spin, so every handoff goes through
  // the sleep path: a leave that signals, or (for a waiter that went to sleep
  // as the holder left) the recheck interval. Every waiter must get in.
  StateGate gate;
  int entries = 0;  // guarded by the gate
  EXPECT_FALSE(take_turns(gate, 4, 25, [&] {
    std::this_thread::sleep_for(std::chrono::microseconds(300));
    ++entries;
  }));
  EXPECT_EQ(entries, 4 * 25);
}

TEST(StateGate, LanesRunTogetherAHolderWaitsForThemAndRefusesNewOnes) {
  StateGate gate(signals_only);
  ASSERT_TRUE(gate.enter_lane(0));
  ASSERT_TRUE(gate.enter_lane(5));  // lanes run at once
  EXPECT_FALSE(gate.enter_lane(0));  // but each holds one call
  std::atomic<bool> entered{false};
  std::uint32_t used = 0;
  std::thread holder([&] {
    ASSERT_EQ(gate.enter(), StateGate::Entry::entered);
    entered = true;
    used = gate.take_used_lanes();
    EXPECT_EQ(gate.take_used_lanes(), 0u);  // taken once
    EXPECT_FALSE(gate.enter_lane(3));  // no lane while the gate is held...
    EXPECT_EQ(gate.enter_own_lane(), StateGate::lane_count);
    gate.leave();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_FALSE(entered.load());  // waits for both lanes
  gate.leave_lane(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_FALSE(entered.load());
  gate.leave_lane(5);
  holder.join();
  EXPECT_TRUE(entered.load());
  EXPECT_EQ(used, (1u << 0) | (1u << 5));
  ASSERT_TRUE(gate.enter_lane(3));  // ...and again once it is left
  gate.leave_lane(3);
  // A lane refused because the gate is held leaves no trace of use.
  ASSERT_EQ(gate.enter(), StateGate::Entry::entered);
  EXPECT_EQ(gate.take_used_lanes(), 1u << 3);
  EXPECT_FALSE(gate.enter_lane(6));
  gate.set_loading(true);
  EXPECT_FALSE(gate.enter_lane(6));  // nor during a holder's load
  gate.set_loading(false);
  gate.leave();
  ASSERT_EQ(gate.enter(), StateGate::Entry::entered);
  EXPECT_EQ(gate.take_used_lanes(), 0u);
  gate.leave();
}

TEST(StateGate, ALaneCallWaitsForAHolderToLeaveInsteadOfQueueingForTheGate) {
  // A lane wait of an hour: the holder's leaving, not the wait running out,
  // decides each call below.
  StateGate gate(signals_only, std::chrono::hours(1));
  std::atomic<bool> entered{false}, left{false};
  // Another thread holds the gate for 30 ms; returns once it holds it.
  const auto hold_briefly = [&] {
    entered = false;
    left = false;
    std::thread holder([&] {
      ASSERT_EQ(gate.enter(), StateGate::Entry::entered);
      entered = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      left = true;
      gate.leave();
    });
    while (!entered.load()) std::this_thread::yield();
    return holder;
  };
  std::thread holder = hold_briefly();
  const bool in_lane = gate.enter_lane_soon(2);  // waits for the holder
  EXPECT_TRUE(in_lane);
  EXPECT_TRUE(left.load());
  if (in_lane) gate.leave_lane(2);
  holder.join();
  ASSERT_EQ(gate.enter(), StateGate::Entry::entered);
  EXPECT_EQ(gate.take_used_lanes(), 1u << 2);
  gate.leave();

  holder = hold_briefly();
  const unsigned lane = gate.enter_own_lane();  // so does a call of a thread's own
  EXPECT_TRUE(left.load());
  EXPECT_NE(lane, StateGate::lane_count);
  if (lane != StateGate::lane_count) gate.leave_lane(lane);
  holder.join();
}

TEST(StateGate, ALaneCallNeverWaitsForItsOwnThreadOrALoadAndStopsWaitingInTime) {
  {
    // Were either waited for, this test would wait an hour.
    StateGate gate(signals_only, std::chrono::hours(1));
    ASSERT_EQ(gate.enter(), StateGate::Entry::entered);
    EXPECT_FALSE(gate.enter_lane_soon(1));  // this thread's own call
    EXPECT_EQ(gate.enter_own_lane(), StateGate::lane_count);
    gate.leave();
    std::promise<void> loading;
    std::promise<void> done;
    std::thread loader([&] {
      ASSERT_EQ(gate.enter(), StateGate::Entry::entered);
      gate.set_loading(true);
      loading.set_value();
      done.get_future().wait();
      gate.set_loading(false);
      gate.leave();
    });
    loading.get_future().wait();
    EXPECT_FALSE(gate.enter_lane_soon(1));  // a holder running a load
    EXPECT_EQ(gate.enter_own_lane(), StateGate::lane_count);
    done.set_value();
    loader.join();
  }
  // A holder that stays past the lane wait: the call gives up, having
  // changed nothing, and its caller would queue for the gate.
  StateGate gate(signals_only, std::chrono::microseconds(200));
  std::promise<void> entered;
  std::promise<void> refused;
  std::thread holder([&] {
    ASSERT_EQ(gate.enter(), StateGate::Entry::entered);
    entered.set_value();
    refused.get_future().wait();
    EXPECT_EQ(gate.take_used_lanes(), 0u);
    gate.leave();
  });
  entered.get_future().wait();
  EXPECT_FALSE(gate.enter_lane_soon(4));
  EXPECT_EQ(gate.enter_own_lane(), StateGate::lane_count);
  refused.set_value();
  holder.join();
  ASSERT_EQ(gate.enter(), StateGate::Entry::entered);
  EXPECT_EQ(gate.take_used_lanes(), 0u);
  gate.leave();
}

TEST(StateGate, LanesAndHoldersNeverOverlapUnderContention) {
  StateGate gate;
  // Each lane's counter is guarded by its lane, the total by the gate; the
  // holder reads every lane's (TSan checks all of this).
  std::int64_t per_lane[StateGate::lane_count] = {};
  std::int64_t folded = 0, lane_calls = 0;
  std::atomic<int> in_lanes{0};
  std::atomic<bool> holding{false}, overlapped{false};
  std::atomic<std::int64_t> refused{0};
  constexpr int rounds = 20000;
  std::vector<std::thread> threads;
  for (int thread = 0; thread < 3; ++thread) {
    threads.emplace_back([&] {
      for (int round = 0; round < rounds;) {
        const unsigned lane = gate.enter_own_lane();
        if (lane == StateGate::lane_count) {
          refused.fetch_add(1);
          std::this_thread::yield();
          continue;
        }
        in_lanes.fetch_add(1);
        if (holding.load()) overlapped = true;
        ++per_lane[lane];
        in_lanes.fetch_sub(1);
        gate.leave_lane(lane);
        ++round;
      }
    });
  }
  threads.emplace_back([&] {
    for (int round = 0; round < 2000; ++round) {
      ASSERT_EQ(gate.enter(), StateGate::Entry::entered);
      holding = true;
      if (in_lanes.load() != 0) overlapped = true;
      const std::uint32_t used = gate.take_used_lanes();
      for (unsigned lane = 0; lane < StateGate::lane_count; ++lane) {
        if ((used & (1u << lane)) == 0) continue;
        folded += std::exchange(per_lane[lane], 0);
      }
      holding = false;
      gate.leave();
    }
  });
  for (auto& thread : threads) thread.join();
  EXPECT_FALSE(overlapped.load());
  ASSERT_EQ(gate.enter(), StateGate::Entry::entered);
  const std::uint32_t used = gate.take_used_lanes();
  for (unsigned lane = 0; lane < StateGate::lane_count; ++lane) {
    if ((used & (1u << lane)) != 0) folded += std::exchange(per_lane[lane], 0);
    lane_calls += per_lane[lane];  // left behind by a lane the holder never saw used: none
  }
  gate.leave();
  EXPECT_EQ(lane_calls, 0);
  EXPECT_EQ(folded, 3 * rounds);  // every lane call seen by exactly one fold
}

TEST(StateGate, ThreadsThatMeetInALaneMoveToLanesOfTheirOwn) {
  StateGate gate;
  std::mutex mutex;
  std::condition_variable changed;
  int turn = 0;  // even: the first thread's turn, odd: the second's
  constexpr int turns = 40;
  std::vector<unsigned> lanes[2];
  const auto take_turns = [&](int self) {
    for (int round = 0; round < turns; ++round) {
      std::unique_lock lock(mutex);
      changed.wait(lock, [&] { return turn % 2 == self; });
      const unsigned entered = gate.enter_own_lane();
      lanes[self].push_back(entered);
      if (entered != StateGate::lane_count) gate.leave_lane(entered);
      ++turn;
      changed.notify_all();
    }
  };
  // The lane the calling thread is in, seen on a gate of its own (all lanes free).
  const auto current_lane = [] {
    StateGate fresh;
    const unsigned lane = fresh.enter_own_lane();
    fresh.leave_lane(lane);
    return lane;
  };
  std::promise<unsigned> first_lane;
  std::thread first([&] {
    first_lane.set_value(current_lane());
    take_turns(0);
  });
  const unsigned shared_lane = first_lane.get_future().get();
  // Threads start in lanes in the order they first ask: within a few new
  // threads one starts in the first one's lane, and takes turns with it.
  std::thread second;
  for (int attempt = 0; attempt < 8 * static_cast<int>(StateGate::lane_count) && !second.joinable(); ++attempt) {
    std::promise<unsigned> lane;
    std::promise<bool> chosen;
    std::future<unsigned> lane_seen = lane.get_future();
    std::thread candidate([&, lane = std::move(lane), decision = chosen.get_future()]() mutable {
      lane.set_value(current_lane());
      if (decision.get()) take_turns(1);
    });
    const bool same = lane_seen.get() == shared_lane;
    chosen.set_value(same);
    if (same) {
      second = std::move(candidate);
    } else {
      candidate.join();
    }
  }
  ASSERT_TRUE(second.joinable()) << "no new thread started in lane " << shared_lane;
  first.join();
  second.join();
  ASSERT_EQ(lanes[0].size(), static_cast<std::size_t>(turns));
  ASSERT_EQ(lanes[1].size(), static_cast<std::size_t>(turns));
  EXPECT_EQ(lanes[0].front(), shared_lane);
  EXPECT_EQ(lanes[1].front(), shared_lane);  // they met
  for (std::size_t round = turns - 10; round < turns; ++round) {
    EXPECT_NE(lanes[0][round], lanes[1][round]) << round;  // and parted
    EXPECT_EQ(lanes[0][round], lanes[0].back()) << round;  // for good
    EXPECT_EQ(lanes[1][round], lanes[1].back()) << round;
  }
}

ResidencyValueSpec blob_spec() {
  return ResidencyValueSpec("Blob", 8, 8, ReplicaMode::replicable, Recoverability::must_preserve);
}

// ---- the storage ownership index -------------------------------------------------

TEST(StorageIndex, AgreesWithAMapThroughClaimsAndReleasesThatCollide) {
  StorageIndex index;
  std::map<std::pair<int, std::uintptr_t>, int> model;  // (device index, address) -> owner tag
  std::vector<ValueRecord*> owners;
  ValueTable table("m");
  for (int tag = 0; tag < 8; ++tag) owners.push_back(&table.add(blob_spec(), nullptr, std::nullopt));
  std::mt19937_64 random(7);
  const auto key_of = [](int device, std::uintptr_t address) {
    return StorageKey{device < 0 ? c10::Device(c10::DeviceType::CPU) : c10::Device(c10::DeviceType::CUDA, device),
                      address};
  };
  for (int step = 0; step < 20000; ++step) {
    const int device = static_cast<int>(random() % 3) - 1;
    // Few distinct, widely aligned addresses: long probe runs and wrap-around.
    const std::uintptr_t address = (random() % 300) << 20;
    const StorageKey key = key_of(device, address);
    const auto model_key = std::make_pair(device, address);
    if (random() % 3 != 0) {
      const int tag = static_cast<int>(random() % owners.size());
      const bool fresh = model.count(model_key) == 0;
      ASSERT_EQ(index.insert(key, StorageIndex::Owner{owners[static_cast<std::size_t>(tag)], CUDA0}), fresh);
      if (fresh) model[model_key] = tag;
    } else {
      ASSERT_EQ(index.erase(key), model.erase(model_key) == 1);
    }
    ASSERT_EQ(index.size(), model.size());
    if (step % 500 == 0) {
      for (const auto& [where, tag] : model) {
        const StorageIndex::Owner* owner = index.find(key_of(where.first, where.second));
        ASSERT_NE(owner, nullptr) << step;
        EXPECT_EQ(owner->record, owners[static_cast<std::size_t>(tag)]);
      }
    }
  }
  for (const auto& [where, tag] : model) EXPECT_NE(index.find(key_of(where.first, where.second)), nullptr);
  EXPECT_EQ(index.find(key_of(5, 12345)), nullptr);
  index.clear();
  EXPECT_EQ(index.size(), 0u);
  EXPECT_EQ(index.find(key_of(-1, 0)), nullptr);
}

TEST(StorageIndex, GrowsPastItsFirstTableKeepingEveryClaim) {
  StorageIndex index;
  ValueTable table("m");
  ValueRecord* first = &table.add(blob_spec(), nullptr, std::nullopt);
  ValueRecord* second = &table.add(blob_spec(), nullptr, std::nullopt);
  const auto key_of = [](std::size_t n) {
    return StorageKey{n % 2 == 0 ? c10::Device(c10::DeviceType::CPU) : c10::Device(c10::DeviceType::CUDA, 1),
                      static_cast<std::uintptr_t>(n) * 4096};
  };
  // 5000 storages: the first table (512 of them at half load) doubles four times.
  constexpr std::size_t count = 5000;
  for (std::size_t n = 0; n < count; ++n) {
    ASSERT_TRUE(index.insert(key_of(n), StorageIndex::Owner{n % 3 == 0 ? first : second, CUDA1})) << n;
  }
  EXPECT_EQ(index.size(), count);
  for (std::size_t n = 0; n < count; ++n) {
    const StorageIndex::Owner* owner = index.find(key_of(n));
    ASSERT_NE(owner, nullptr) << n;
    EXPECT_EQ(owner->record, n % 3 == 0 ? first : second) << n;
    EXPECT_EQ(owner->location, CUDA1);
    EXPECT_FALSE(index.insert(key_of(n), StorageIndex::Owner{first, CUDA1})) << n;  // claimed already
  }
  // The same address on another device is another storage.
  EXPECT_EQ(index.find(StorageKey{c10::Device(c10::DeviceType::CUDA, 0), 0}), nullptr);
  for (std::size_t n = 0; n < count; n += 2) ASSERT_TRUE(index.erase(key_of(n))) << n;
  EXPECT_EQ(index.size(), count / 2);
  for (std::size_t n = 0; n < count; ++n) EXPECT_EQ(index.find(key_of(n)) != nullptr, n % 2 == 1) << n;
}

// ---- lifetime tables ------------------------------------------------------------

std::vector<std::uint64_t> tokens_of(const TokenTable<std::string>& table) {
  std::vector<std::uint64_t> tokens;
  for (const auto& [token, label] : table) tokens.push_back(token);
  return tokens;
}

TEST(LineAllocator, BlocksStartACacheLineAndOwnEveryLineTheyTouch) {
  LineAllocator<char> bytes;
  for (const std::size_t count : {std::size_t{1}, std::size_t{63}, std::size_t{64}, std::size_t{65}, std::size_t{200}}) {
    char* block = bytes.allocate(count);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(block) % cache_line_bytes, 0u) << count;
    // Every byte of the lines the block touches is its own (the address
    // sanitizer's build reports a write past the block).
    const std::size_t lines = (count + cache_line_bytes - 1) / cache_line_bytes;
    std::fill(block, block + lines * cache_line_bytes, 'x');
    bytes.deallocate(block, count);
  }
  LineAllocator<std::uint64_t> words;
  EXPECT_THROW(static_cast<void>(words.allocate(std::numeric_limits<std::size_t>::max() / 4)), std::bad_array_new_length);
  std::vector<std::uint64_t, LineAllocator<std::uint64_t>> grown;
  for (std::uint64_t value = 0; value < 100; ++value) {
    grown.push_back(value);
    ASSERT_EQ(reinterpret_cast<std::uintptr_t>(grown.data()) % cache_line_bytes, 0u);
  }
  EXPECT_EQ(grown[99], 99u);
}

TEST(TokenTable, KeepsCreationOrderThroughErasesAndSweeps) {
  TokenTable<std::string> table;
  for (std::uint64_t token = 1; token <= 6; ++token) table.emplace(token, "t" + std::to_string(token));
  table.erase(table.find(2));
  table.erase(table.find(6));  // the newest: dropped at once
  EXPECT_EQ(tokens_of(table), (std::vector<std::uint64_t>{1, 3, 4, 5}));
  EXPECT_EQ(table.last_token(), 6u);  // the greatest inserted, erased or not
  EXPECT_EQ(table.size(), 4u);
  EXPECT_TRUE(table.find(2) == table.end());
  EXPECT_TRUE(table.find(6) == table.end());
  EXPECT_TRUE(table.find(99) == table.end());
  EXPECT_EQ(table.find(4)->second, "t4");
  // The live entries past a token, in order, whether that token is live,
  // erased or beyond the last.
  const auto after = [&](std::uint64_t token) {
    std::vector<std::uint64_t> seen;
    table.for_each_after(token, [&](std::uint64_t at, std::string& entry) {
      EXPECT_EQ(entry, "t" + std::to_string(at));
      seen.push_back(at);
    });
    return seen;
  };
  EXPECT_EQ(after(0), (std::vector<std::uint64_t>{1, 3, 4, 5}));
  EXPECT_EQ(after(1), (std::vector<std::uint64_t>{3, 4, 5}));
  EXPECT_EQ(after(2), (std::vector<std::uint64_t>{3, 4, 5}));
  EXPECT_EQ(after(4), (std::vector<std::uint64_t>{5}));
  EXPECT_TRUE(after(5).empty());
  EXPECT_TRUE(after(99).empty());
  // get() and erase(token) agree with find() on live, erased and unknown tokens.
  ASSERT_NE(table.get(5), nullptr);
  EXPECT_EQ(*table.get(5), "t5");
  EXPECT_EQ(table.get(2), nullptr);
  EXPECT_EQ(table.get(6), nullptr);
  EXPECT_EQ(std::as_const(table).get(99), nullptr);
  EXPECT_FALSE(table.erase(std::uint64_t{2}));
  EXPECT_FALSE(table.erase(std::uint64_t{99}));
  EXPECT_DEATH(table.emplace(6, "reused"), "lifetime tokens out of order");  // tokens only grow
  // Erasing while iterating, the last entries included.
  for (auto it = table.begin(); it != table.end();) {
    const std::uint64_t token = it->first;
    ++it;
    if (token != 3) table.erase(table.find(token));
  }
  EXPECT_EQ(tokens_of(table), (std::vector<std::uint64_t>{3}));
  // Many short-lived entries behind one long-lived one: swept, still found.
  for (std::uint64_t token = 10; token < 2000; ++token) {
    table.emplace(token, "x");
    if (token > 10) table.erase(table.find(token - 1));  // a tombstone behind the newest
  }
  EXPECT_EQ(table.size(), 2u);  // 3 and 1999
  EXPECT_EQ(tokens_of(table), (std::vector<std::uint64_t>{3, 1999}));
  EXPECT_EQ(table.find(3)->second, "t3");
  EXPECT_TRUE(table.erase(std::uint64_t{1999}));  // the newest, by token
  EXPECT_EQ(tokens_of(table), (std::vector<std::uint64_t>{3}));
  EXPECT_EQ(table.get(1999), nullptr);
  table.clear();
  EXPECT_TRUE(table.empty());
  EXPECT_TRUE(table.begin() == table.end());
  EXPECT_EQ(table.last_token(), 1999u);  // kept across clear: tokens are never reused
}

// ---- inline materialization storage -------------------------------------------

// Counts live instances; the copy numbered `fail_at` throws.
struct Counted {
  static inline int live = 0;
  static inline int copies = 0;
  static inline int fail_at = -1;
  std::string text;
  explicit Counted(std::string text) : text(std::move(text)) { ++live; }
  Counted(const Counted& other) : text(other.text) {
    if (copies++ == fail_at) throw std::runtime_error("copy refused");
    ++live;
  }
  Counted(Counted&& other) noexcept : text(std::move(other.text)) { ++live; }
  Counted& operator=(const Counted&) = default;
  Counted& operator=(Counted&&) noexcept = default;
  ~Counted() { --live; }
};

TEST(InlineVector, ACopyThatThrowsDestroysWhatItBuilt) {
  {
    InlineVector<Counted, 1> items;
    for (const char* text : {"a", "b", "c"}) items.emplace_back(std::string(40, *text));  // spilled, heap strings
    ASSERT_EQ(Counted::live, 3);
    Counted::copies = 0;
    Counted::fail_at = 2;  // the third element's copy
    using Items = InlineVector<Counted, 1>;
    EXPECT_THROW(Items copy(items), std::runtime_error);
    EXPECT_EQ(Counted::live, 3);  // the two copies made were destroyed
    InlineVector<Counted, 1> target{Counted("x")};
    Counted::copies = 0;
    EXPECT_THROW(target = items, std::runtime_error);
    ASSERT_EQ(target.size(), 1u);  // an assignment that throws leaves the target as it was
    EXPECT_EQ(target.front().text, "x");
    Counted::fail_at = -1;
    target = items;
    EXPECT_EQ(target.size(), 3u);
    EXPECT_EQ(Counted::live, 6);
  }
  EXPECT_EQ(Counted::live, 0);
}

TEST(InlineVector, KeepsOrderAcrossTheSpillAndErase) {
  InlineVector<std::string, 1> items;
  EXPECT_TRUE(items.empty());
  items.push_back("a");
  EXPECT_FALSE(items.spilled());
  items.push_back(std::string(40, 'b'));  // heap-backed strings move with the buffer
  items.push_back("c");
  EXPECT_TRUE(items.spilled());
  items.push_back(items.front());  // an element of itself
  ASSERT_EQ(items.size(), 4u);
  EXPECT_EQ(items[3], "a");
  items.erase(items.begin() + 1);
  EXPECT_EQ(std::vector<std::string>(items.begin(), items.end()), (std::vector<std::string>{"a", "c", "a"}));
  InlineVector<std::string, 1> moved(std::move(items));
  EXPECT_TRUE(items.empty());
  EXPECT_EQ(moved.back(), "a");
  InlineVector<std::string, 1> single;
  single.push_back(std::string(40, 'x'));
  InlineVector<std::string, 1> taken(std::move(single));  // inline elements are moved one by one
  EXPECT_FALSE(taken.spilled());
  EXPECT_EQ(taken.front(), std::string(40, 'x'));
  taken = std::move(moved);
  EXPECT_EQ(taken.size(), 3u);
  EXPECT_EQ(taken.emplace_back(5, 'd'), "ddddd");  // built in place from the arguments
  EXPECT_EQ(std::vector<std::string>(taken.begin(), taken.end()), (std::vector<std::string>{"a", "c", "a", "ddddd"}));
  taken.clear();
  EXPECT_TRUE(taken.empty());
}

TEST(InlineVector, TriviallyCopyableElementsMoveAtEverySizeInlineAndSpilled) {
  // Elements like pointers and locations take the unrolled copy when inline.
  for (std::size_t size = 0; size <= 5; ++size) {
    InlineVector<int, 3> items;
    for (std::size_t index = 0; index < size; ++index) items.push_back(static_cast<int>(10 + index));
    EXPECT_EQ(items.spilled(), size > 3);
    std::vector<int> expected(items.begin(), items.end());
    InlineVector<int, 3> moved(std::move(items));
    EXPECT_TRUE(items.empty()) << size;
    EXPECT_EQ(std::vector<int>(moved.begin(), moved.end()), expected) << size;
    items.push_back(7);  // the moved-from vector is usable
    EXPECT_EQ(items.front(), 7);
    InlineVector<int, 3> assigned{1, 2, 3, 4, 5, 6};
    assigned = std::move(moved);
    EXPECT_EQ(std::vector<int>(assigned.begin(), assigned.end()), expected) << size;
    EXPECT_TRUE(moved.empty()) << size;
  }
}

// ---- the value table ----------------------------------------------------------

TEST(ValueTable, RecordsStayPutAcrossChunksAndRollbackNeverReissuesAHandle) {
  ValueTable table("m");
  std::vector<ValueRecord*> addresses;
  std::vector<ResidencyHandle> handles;
  for (int index = 0; index < 700; ++index) {  // crosses two chunk boundaries
    ValueRecord& record = table.add(blob_spec(), nullptr, std::nullopt);
    addresses.push_back(&record);
    handles.push_back(table.handle_of(record));
  }
  for (std::size_t index = 0; index < handles.size(); ++index) {
    ASSERT_EQ(table.find(handles[index]), addresses[index]) << index;
    EXPECT_EQ(handles[index].handle_id, std::to_string(index + 1));
  }
  std::size_t visited = 0;
  table.for_each([&](const ValueRecord& record) { EXPECT_EQ(&record, addresses[visited++]); });
  EXPECT_EQ(visited, 700u);
  // Roll back to exactly a chunk boundary, then add across it again.
  for (int index = 0; index < 700 - 512; ++index) table.remove_last();
  EXPECT_EQ(table.size(), 512u);
  EXPECT_EQ(table.find(handles[600]), nullptr);
  ValueRecord& next = table.add(blob_spec(), nullptr, std::nullopt);
  EXPECT_EQ(table.handle_of(next).handle_id, "701");
  EXPECT_EQ(table.find(table.handle_of(next)), &next);
  EXPECT_EQ(table.find(handles[511]), addresses[511]);
  EXPECT_EQ(table.find(ResidencyHandle{"m", "0", "Blob"}), nullptr);
  EXPECT_EQ(table.find(ResidencyHandle{"m", "99999", "Blob"}), nullptr);
  EXPECT_EQ(table.find(ResidencyHandle{"m", "1x", "Blob"}), nullptr);
  EXPECT_EQ(table.find(ResidencyHandle{"m", "01", "Blob"}), nullptr);  // the serial's value, not its id
  EXPECT_EQ(table.find(ResidencyHandle{"m", "+1", "Blob"}), nullptr);
  EXPECT_EQ(table.find(ResidencyHandle{"m", "", "Blob"}), nullptr);
  EXPECT_EQ(table.find(ResidencyHandle{"m", "18446744073709551617", "Blob"}), nullptr);  // past 2^64
  EXPECT_EQ(table.find(ResidencyHandle{"m", "1", "Other"}), nullptr);  // same serial, another type
  EXPECT_EQ(table.find(ResidencyHandle{"n", "1", "Blob"}), nullptr);
  EXPECT_THROW(table.lookup(ResidencyHandle{"n", "1", "Blob"}), ResidencyHandleError);
  addresses[0]->discarded = true;
  EXPECT_THROW(table.lookup(handles[0]), ResidencyHandleError);
  EXPECT_EQ(table.find(handles[0]), addresses[0]);
}

// A system clock and a 3 GHz counter the test moves by hand, counting reads.
struct ManualTime {
  static inline std::int64_t system = 0;
  static inline std::uint64_t ticks = 0;
  static inline int system_reads = 0;
  // How long one system reading takes; it samples the time at its start (the
  // worst case for the counter readings that bracket it).
  static inline std::int64_t read_ns = 0;
  static std::int64_t read_system() {
    ++system_reads;
    const std::int64_t sampled = system;
    advance(read_ns);
    return sampled;
  }
  static std::uint64_t read_ticks() { return ticks; }
  // Both clocks advance by `ns`, the counter at 3 ticks per nanosecond.
  static void advance(std::int64_t ns) {
    system += ns;
    ticks += static_cast<std::uint64_t>(ns) * 3;
  }
  ManualTime() {
    system = 1'700'000'000'000'000'000;
    ticks = 1'000'000;
    system_reads = 0;
    read_ns = 0;
  }
};

constexpr UnixClock::Timing manual_timing{10'000'000, 1'000'000'000};

std::int64_t distance(std::int64_t a, std::int64_t b) { return a > b ? a - b : b - a; }

// Calibrates `clock` over `time` (10 ms at ManualTime's 3 ticks per ns);
// whether that took.
bool calibrate(UnixClock& clock, ManualTime& time) {
  clock.now();
  time.advance(10'000'000);
  clock.now();
  return clock.calibrated();
}

TEST(UnixClock, ReadsTheSystemClockUntilCalibratedThenScalesTheCounterWithoutIt) {
  ManualTime time;
  UnixClock clock({&ManualTime::read_system, &ManualTime::read_ticks}, manual_timing);
  EXPECT_EQ(clock.now(), time.system);  // calibration starts
  EXPECT_FALSE(clock.calibrated());
  time.advance(9'999'999);
  EXPECT_EQ(clock.now(), time.system);  // not yet 10 ms of system time
  EXPECT_FALSE(clock.calibrated());
  time.advance(1);
  EXPECT_EQ(clock.now(), time.system);  // calibrates on this reading
  EXPECT_TRUE(clock.calibrated());
  const int reads = ManualTime::system_reads;
  for (std::int64_t step : {1, 7, 1'000, 123'456, 50'000'000, 400'000'000}) {
    time.advance(step);
    EXPECT_LE(distance(clock.now(), time.system), 1) << step;
  }
  EXPECT_EQ(ManualTime::system_reads, reads);  // every reading above came from the counter
}

TEST(UnixClock, ReanchorsWhenStaleAndFollowsAStepOfTheSystemClockKeepingTheRate) {
  ManualTime time;
  UnixClock clock({&ManualTime::read_system, &ManualTime::read_ticks}, manual_timing);
  ASSERT_TRUE(calibrate(clock, time));
  // Within the resync age no reading touches the system clock, even when it
  // has stepped: the step shows at the next anchor.
  time.advance(900'000'000);
  ManualTime::system += 5'000'000'000;  // a 5 s jump of the system clock alone
  const int reads = ManualTime::system_reads;
  EXPECT_LE(distance(clock.now(), time.system - 5'000'000'000), 1);
  EXPECT_EQ(ManualTime::system_reads, reads);
  time.advance(200'000'000);  // past the resync age: a new anchor, on the stepped clock
  EXPECT_EQ(clock.now(), time.system);
  EXPECT_EQ(ManualTime::system_reads, reads + 1);
  // The rate across the jump was refused: readings keep 3 ticks per ns.
  time.advance(300'000'000);
  EXPECT_LE(distance(clock.now(), time.system), 1);
  EXPECT_EQ(ManualTime::system_reads, reads + 1);
  // A system clock that steps back is followed at the next anchor too.
  ManualTime::system -= 60'000'000'000;
  time.advance(1'000'000'001);
  EXPECT_EQ(clock.now(), time.system);
  time.advance(1'000);
  EXPECT_LE(distance(clock.now(), time.system), 1);
}

TEST(UnixClock, RefinesTheRateOverEachLongSpanAndGivesTheSystemClockForACounterBelowTheAnchor) {
  ManualTime time;
  UnixClock clock({&ManualTime::read_system, &ManualTime::read_ticks}, manual_timing);
  clock.now();
  // Calibration sees 10 ms of system time against 30,000,120 ticks: 4 ppm fast.
  ManualTime::system += 10'000'000;
  ManualTime::ticks += 30'000'120;
  clock.now();
  ASSERT_TRUE(clock.calibrated());
  // Over the next second the true rate (3 per ns) shows as 4 us of drift.
  time.advance(1'000'000'000);
  const double drift = static_cast<double>(time.system - clock.now());
  EXPECT_GT(drift, 3'000.0);
  EXPECT_LT(drift, 5'000.0);
  time.advance(1'000'000);  // stale now: the new anchor measures the rate over that second
  EXPECT_EQ(clock.now(), time.system);
  time.advance(999'000'000);
  EXPECT_LE(distance(clock.now(), time.system), 10);
  // A counter reading below the anchor is not scaled.
  const int reads = ManualTime::system_reads;
  ManualTime::ticks -= 5'000'000'000;
  EXPECT_EQ(clock.now(), time.system);
  EXPECT_EQ(ManualTime::system_reads, reads + 1);
}

TEST(UnixClock, TakesAChangedCounterRateOnceTwoSpansInARowAgreeOnIt) {
  ManualTime time;
  UnixClock clock({&ManualTime::read_system, &ManualTime::read_ticks}, manual_timing);
  ASSERT_TRUE(calibrate(clock, time));  // 3 ticks per ns
  // From here the counter runs at 2 ticks per ns (another host's counter).
  const auto run = [](std::int64_t ns) {
    ManualTime::system += ns;
    ManualTime::ticks += static_cast<std::uint64_t>(ns) * 2;
  };
  // Still within the anchor's age in ticks: scaled at the old rate, behind.
  run(1'200'000'000);
  EXPECT_GT(time.system - clock.now(), 300'000'000);
  // Stale: anchored again. The span's rate disagrees with the current one,
  // as one across a system clock step would, and is not taken yet.
  run(400'000'000);
  EXPECT_EQ(clock.now(), time.system);
  run(1'000'000'000);
  EXPECT_GT(time.system - clock.now(), 300'000'000);
  // The next span measures the same new rate: now it is the clock's.
  run(600'000'000);
  EXPECT_EQ(clock.now(), time.system);
  const int reads = ManualTime::system_reads;
  for (std::int64_t step : {1'000, 250'000'000, 700'000'000}) {
    run(step);
    EXPECT_LE(distance(clock.now(), time.system), 1) << step;
  }
  EXPECT_EQ(ManualTime::system_reads, reads);  // from the counter, at its new rate
}

TEST(UnixClock, ASystemReadingBracketedWidelyByTheCounterNeitherCalibratesNorAnchors) {
  ManualTime time;
  UnixClock clock({&ManualTime::read_system, &ManualTime::read_ticks}, manual_timing);
  clock.now();
  time.advance(10'000'000);
  ManualTime::read_ns = 683;  // 2,049 ticks: one past the widest bracket (preempted mid-reading)
  std::int64_t sampled = time.system;
  EXPECT_EQ(clock.now(), sampled);
  EXPECT_FALSE(clock.calibrated());  // the reading paired the time with no particular tick
  ManualTime::read_ns = 682;  // 2,046 ticks: wide, but it counts, paired with its midpoint
  sampled = time.system;
  EXPECT_EQ(clock.now(), sampled);
  ASSERT_TRUE(clock.calibrated());
  ManualTime::read_ns = 0;
  // The midpoint is 1,023 ticks past the sampled time: a rate 34 ppm slow,
  // at most 17 us behind after half a second.
  time.advance(500'000'000);
  const std::int64_t behind = time.system - clock.now();
  EXPECT_GT(behind, 10'000);
  EXPECT_LT(behind, 20'000);
  // A stale anchor is not replaced from a wide bracket either.
  time.advance(600'000'000);
  ManualTime::read_ns = 1'000'000;
  const int reads = ManualTime::system_reads;
  sampled = time.system;
  EXPECT_EQ(clock.now(), sampled);
  ManualTime::read_ns = 0;
  EXPECT_EQ(clock.now(), time.system);  // still stale: the system clock again, and now a new anchor
  EXPECT_EQ(ManualTime::system_reads, reads + 2);
  time.advance(1'000);
  EXPECT_LE(distance(clock.now(), time.system), 1);
  EXPECT_EQ(ManualTime::system_reads, reads + 2);
}

TEST(UnixClock, TheProcessClockAgreesWithTheSystemClockAcrossThreadsAndAnchors) {
  UnixClock* clock = UnixClock::process_clock();
  if (clock == nullptr) GTEST_SKIP() << "no trusted time-stamp counter on this machine";
  const auto system_now = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  // Past calibration (10 ms of system time from the first reading).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (!clock->calibrated() && std::chrono::steady_clock::now() < deadline) {
    clock->now();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(clock->calibrated());
  std::atomic<int> outside{0};
  std::vector<std::thread> threads;
  for (int thread = 0; thread < 4; ++thread) {
    threads.emplace_back([&] {
      for (int index = 0; index < 20'000; ++index) {
        const std::int64_t before = system_now();
        const std::int64_t reading = clock->now();
        const std::int64_t after = system_now();
        // Within 1 ms of the system clock: the rate's error over one resync
        // age is microseconds, and a preempted thread widens the window.
        if (reading < before - 1'000'000 || reading > after + 1'000'000) outside.fetch_add(1);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(outside.load(), 0);
}

TEST(UnixClock, TrustsTheCounterOnlyWhenInvariantAndVouchedForByTheKernel) {
  const std::string reliable = "flags\t\t: fpu tsc constant_tsc nonstop_tsc tsc_reliable hypervisor";
  const std::string unvouched = "flags\t\t: fpu tsc constant_tsc nonstop_tsc tsc_known_freq hypervisor";
  struct Case {
    const char* choice;
    bool invariant;
    std::optional<std::string> source;
    std::string flags;
    bool trusted;
  };
  const std::vector<Case> cases{
      // The kernel's own clock is the counter.
      {nullptr, true, "tsc", unvouched, true},
      {nullptr, true, "tsc", "", true},
      // The KVM clock, with the counter marked reliable by the hypervisor;
      // only "system" turns the counter off.
      {nullptr, true, "kvm-clock", reliable, true},
      {"counter", true, "kvm-clock", reliable, true},
      {nullptr, true, "kvm-clock", "flags\t: fpu tsc_reliable", true},
      {nullptr, true, "kvm-clock", "flags:tsc_reliable fpu", true},
      // Not vouched for: no reliable flag (a word that merely contains it is
      // not it), another clock source, none readable, or no flags line.
      {nullptr, true, "kvm-clock", unvouched, false},
      {nullptr, true, "kvm-clock", "flags\t\t: fpu tsc_reliable_not nonstop_tsc", false},
      {nullptr, true, "kvm-clock", "flags\t\t: fpu not_tsc_reliable nonstop_tsc", false},
      {nullptr, true, "kvm-clock", "tsc_reliable", false},
      {nullptr, true, "kvm-clock", "", false},
      {nullptr, true, "hpet", reliable, false},
      {nullptr, true, "tsc ", reliable, false},
      {nullptr, true, std::nullopt, reliable, false},
      // A counter that is not invariant, or a process that asked for the system clock.
      {nullptr, false, "tsc", reliable, false},
      {nullptr, false, "kvm-clock", reliable, false},
      {"system", true, "tsc", reliable, false},
      {"system", true, "kvm-clock", reliable, false},
  };
  std::vector<std::size_t> wrong;
  for (std::size_t index = 0; index < cases.size(); ++index) {
    const Case& c = cases[index];
    if (UnixClock::trusts_counter({c.choice, c.invariant, c.source, c.flags}) != c.trusted) wrong.push_back(index);
  }
  EXPECT_EQ(wrong, std::vector<std::size_t>{}) << "cases decided wrongly, by index";
}

TEST(HandleText, SameTextAgreesWithStringEqualityAtEveryLengthAndDifferingByte) {
  // Every length across the loop, the 4- and 8-byte word paths and memcmp,
  // with strings equal, differing at each position, and sizes differing.
  for (std::size_t size = 0; size <= 24; ++size) {
    std::string a(size, 'x');
    for (std::size_t index = 0; index < size; ++index) a[index] = static_cast<char>('a' + index % 26);
    const std::string same = a;
    EXPECT_TRUE(same_text(a, same)) << size;
    for (std::size_t index = 0; index < size; ++index) {
      std::string other = a;
      other[index] = static_cast<char>(other[index] ^ 0x20);
      EXPECT_FALSE(same_text(a, other)) << size << " at " << index;
      EXPECT_FALSE(same_text(other, a)) << size << " at " << index;
    }
    EXPECT_FALSE(same_text(a, a + "y")) << size;
    EXPECT_FALSE(same_text(a + "y", a)) << size;
  }
  // A shorter string that is a prefix of the longer one's buffer.
  const std::string text = "manager-12345678901";
  EXPECT_FALSE(same_text(std::string_view(text).substr(0, 9), text));
  EXPECT_TRUE(same_text(std::string_view(text).substr(0, 9), "manager-1"));
}

TEST(HandleText, HandleSerialReadsOnlyTheDecimalsTheManagerWrites) {
  EXPECT_EQ(handle_serial("1"), 1u);
  EXPECT_EQ(handle_serial("42"), 42u);
  EXPECT_EQ(handle_serial("9999999999999999999"), 9999999999999999999u);  // 19 digits
  for (const char* text : {"", "0", "01", "+1", "-1", " 1", "1 ", "1x", "x1", "1.0", "/", ":",
                           "10000000000000000000", "18446744073709551617"}) {
    EXPECT_EQ(handle_serial(text), 0u) << '"' << text << '"';
  }
  for (std::uint64_t serial : {1ull, 9ull, 10ull, 255ull, 65536ull, 1234567890123ull}) {
    EXPECT_EQ(handle_serial(std::to_string(serial)), serial);
  }
}

TEST(ValueTable, AValueRecordKeepsSeveralMaterializationsInInsertionOrder) {
  ValueTable table("m");
  ValueRecord& record = table.add(blob_spec(), nullptr, std::nullopt);
  const auto value = [](std::int64_t start) {
    return ResidentValue("Blob", {{"data", at::arange(start, start + 1, at::TensorOptions().dtype(at::kLong))}});
  };
  for (const auto& [location, start] : {std::pair{CUDA1, 1}, std::pair{PINNED_HOST, 2}, std::pair{CUDA0, 3}}) {
    add_item(record, location, value(start), 8);
  }
  ASSERT_NE(record.at(PINNED_HOST), nullptr);
  EXPECT_EQ(record.at(PINNED_HOST)->value.field("data").item<std::int64_t>(), 2);
  record.materializations.erase(record.materializations.begin());
  EXPECT_EQ(record.at(CUDA1), nullptr);
  EXPECT_EQ(record.materializations.front().location, PINNED_HOST);
  EXPECT_EQ(record.at(CUDA0)->value.field("data").item<std::int64_t>(), 3);
}

// Two values resident on cuda:0 (and the first also on pageable host).
struct LifetimeFixture {
  ValueTable values{"m"};
  ValueRecord* first;
  ValueRecord* second;
  LifetimeTable table;
  harness::SimulatedRuntime runtime{};

  LifetimeFixture() {
    first = &values.add(blob_spec(), nullptr, std::nullopt);
    second = &values.add(blob_spec(), nullptr, std::nullopt);
    const auto value = [] { return ResidentValue("Blob", {{"data", at::arange(1, at::TensorOptions().dtype(at::kLong))}}); };
    for (ValueRecord* record : {first, second}) add_item(*record, CUDA0, value(), 8);
    add_item(*first, PAGEABLE_HOST, value(), 8);
  }
  CoveredRecords both() const {
    CoveredRecords records;
    records.push_back(first);
    records.push_back(second);
    return records;
  }
  std::vector<std::int64_t> counts(const ValueRecord* record, const ResidencyLocation& at) const {
    const Materialization* item = record->at(at);
    return {item->use_count, item->hold_count, item->pending_count};
  }
};

TEST(LifetimeTable, GrantsAndReleasesCountsInPairsWithOneTokenSequence) {
  LifetimeFixture fixture;
  LifetimeTable& table = fixture.table;
  const std::uint64_t lease = table.grant_lease(fixture.both(), CUDA0, fixture.runtime.stream(0, 1));
  const std::uint64_t hold = table.grant_hold(fixture.both(), CUDA0);
  const std::uint64_t reservation = table.add_reservation(CUDA0, 64, "kv");
  EXPECT_LT(lease, hold);
  EXPECT_LT(hold, reservation);
  EXPECT_EQ(fixture.counts(fixture.first, CUDA0), (std::vector<std::int64_t>{1, 1, 0}));
  EXPECT_EQ(fixture.counts(fixture.first, PAGEABLE_HOST), (std::vector<std::int64_t>{0, 0, 0}));
  EXPECT_EQ(table.active_lease_count(), 1u);
  EXPECT_TRUE(table.release_hold(hold));
  EXPECT_FALSE(table.release_hold(hold));  // released already: nothing to undo
  EXPECT_EQ(fixture.counts(fixture.second, CUDA0), (std::vector<std::int64_t>{1, 0, 0}));
  const auto released = table.release_reservation(reservation);
  ASSERT_TRUE(released.has_value());
  EXPECT_EQ(released->nbytes, 64);
  EXPECT_EQ(released->label, "kv");
  EXPECT_FALSE(table.release_reservation(reservation).has_value());
  table.end_reads(lease, *table.active_lease(lease));
  EXPECT_FALSE(table.active_lease(lease).has_value());
  EXPECT_TRUE(table.empty());
  EXPECT_EQ(fixture.counts(fixture.first, CUDA0), (std::vector<std::int64_t>{0, 0, 0}));
  // Tokens keep growing across clear().
  const std::uint64_t later = table.grant_hold(fixture.both(), CUDA0);
  table.clear();
  EXPECT_GT(table.add_reservation(PAGEABLE_HOST, 1, "x"), later);
}

// A lane lease is counted in its use count by the first fold after it was
// granted; ended in its lane after that, its count is undone by the next
// fold, not at once (only the gate's holder writes use counts). Up to
// ended_capacity such ends between two folds; the next one is refused, for
// the gate to release, and changes nothing.
TEST(LifetimeTable, ACountedLaneLeaseEndsInItsLaneAndTheNextFoldUncountsIt) {
  LifetimeFixture fixture;
  LifetimeTable& table = fixture.table;
  const unsigned lane = 3;
  const std::uint32_t used = 1u << lane;
  const std::uint64_t early = table.grant_lane_lease(lane, *fixture.first, PAGEABLE_HOST);
  EXPECT_TRUE(table.end_lane_lease(lane, early));  // never counted
  LifetimeTable::LaneCounts counts = table.fold_lanes(used);
  EXPECT_EQ(counts.versions, 2u);
  EXPECT_EQ(counts.pins, 0);
  EXPECT_EQ(fixture.counts(fixture.first, PAGEABLE_HOST), (std::vector<std::int64_t>{0, 0, 0}));
  std::vector<std::uint64_t> tokens;
  for (std::size_t i = 0; i < 9; ++i) tokens.push_back(table.grant_lane_lease(lane, *fixture.first, PAGEABLE_HOST));
  table.fold_lanes(used);
  EXPECT_EQ(fixture.counts(fixture.first, PAGEABLE_HOST), (std::vector<std::int64_t>{9, 0, 0}));
  for (std::size_t i = 0; i < 8; ++i) EXPECT_TRUE(table.end_lane_lease(lane, tokens[i])) << i;
  EXPECT_FALSE(table.end_lane_lease(lane, tokens[8]));  // the lane has noted as many as it holds
  EXPECT_FALSE(table.end_lane_lease(lane, tokens[0]));  // ended already
  EXPECT_EQ(fixture.counts(fixture.first, PAGEABLE_HOST), (std::vector<std::int64_t>{9, 0, 0}));
  EXPECT_EQ(table.active_lease_count(), 1u);
  counts = table.fold_lanes(used);
  EXPECT_EQ(counts.versions, 8u);
  EXPECT_EQ(counts.pins, -8);
  EXPECT_EQ(fixture.counts(fixture.first, PAGEABLE_HOST), (std::vector<std::int64_t>{1, 0, 0}));
  // The refused one, ended under the gate as the manager does: seen there as
  // an active host lease of its one value, without streams or a gate record.
  const std::optional<ActiveLease> refused = table.active_lease(tokens[8]);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->gate_record(), nullptr);
  EXPECT_EQ(std::vector<ValueRecord*>(refused->records().begin(), refused->records().end()),
            std::vector<ValueRecord*>{fixture.first});
  EXPECT_EQ(refused->location(), PAGEABLE_HOST);
  EXPECT_TRUE(refused->streams().empty());
  EXPECT_FALSE(table.active_lease(tokens[0]).has_value());  // ended in its lane
  table.end_reads(tokens[8], *refused);
  EXPECT_EQ(fixture.counts(fixture.first, PAGEABLE_HOST), (std::vector<std::int64_t>{0, 0, 0}));
  EXPECT_TRUE(table.empty());
  // A fold of a lane that ended nothing since changes no count.
  table.fold_lanes(used);
  EXPECT_EQ(fixture.counts(fixture.first, PAGEABLE_HOST), (std::vector<std::int64_t>{0, 0, 0}));
}

TEST(LifetimeTable, APendingLeaseProtectsUntilItsEventsCompleteAndIsReapedOnce) {
  LifetimeFixture fixture;
  LifetimeTable& table = fixture.table;
  harness::SimulatedRuntime& runtime = fixture.runtime;
  const c10::Stream stream = runtime.stream(0, 1);
  const std::uint64_t lease = table.grant_lease(fixture.both(), CUDA0, stream);
  runtime.enqueue(stream, 100);  // the consumer's kernel
  table.end_reads_pending(*table.active_lease(lease)->gate_record(), {runtime.record_event(stream)});
  EXPECT_FALSE(table.active_lease(lease).has_value());  // pending, no longer active
  EXPECT_EQ(table.pending_lease_count(), 1u);
  EXPECT_EQ(fixture.counts(fixture.first, CUDA0), (std::vector<std::int64_t>{0, 0, 1}));
  const Materialization& item = *fixture.first->at(CUDA0);
  EXPECT_TRUE(table.still_protects(item, runtime));
  EXPECT_EQ(table.reap(runtime), 0u);  // the event has not completed
  runtime.advance(100);
  EXPECT_FALSE(table.still_protects(item, runtime));  // it would end at the next reap
  EXPECT_EQ(fixture.counts(fixture.first, CUDA0), (std::vector<std::int64_t>{0, 0, 1}));  // but has not yet
  EXPECT_EQ(table.reap(runtime), 1u);
  EXPECT_EQ(table.pending_lease_count(), 0u);
  EXPECT_EQ(table.reap(runtime), 0u);
  EXPECT_EQ(fixture.counts(fixture.second, CUDA0), (std::vector<std::int64_t>{0, 0, 0}));
  EXPECT_TRUE(table.empty());
}

TEST(LifetimeTable, APendingLeaseWithoutEventsIsNeverReapedAndSynchronizingFinishesTheRest) {
  LifetimeFixture fixture;
  LifetimeTable& table = fixture.table;
  harness::SimulatedRuntime& runtime = fixture.runtime;
  const c10::Stream busy = runtime.stream(0, 1), idle = runtime.stream(0, 2);
  // Recording failed and so did synchronizing: pending with no events.
  const std::uint64_t unproven = table.grant_lease(fixture.both(), CUDA0, busy);
  table.end_reads_pending(*table.active_lease(unproven)->gate_record(), {});
  runtime.enqueue(idle, 10);
  const std::uint64_t proven = table.grant_lease(fixture.both(), CUDA0, idle);
  table.end_reads_pending(*table.active_lease(proven)->gate_record(), {runtime.record_event(idle)});
  runtime.advance(1000);
  EXPECT_EQ(table.reap(runtime), 1u);  // only the lease with a completed event
  EXPECT_TRUE(table.still_protects(*fixture.first->at(CUDA0), runtime));
  // Synchronizing waits on the streams of an event-less lease; one that never
  // completes fails the wait and stays pending.
  runtime.enqueue(busy, harness::SimulatedRuntime::never);
  std::vector<std::string> failures;
  EXPECT_EQ(table.synchronize_pending(runtime, [&](const LeaseRecord& lease, const std::exception& error) {
    failures.push_back(lease.location.name() + ": " + error.what());
  }), 0u);
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(fixture.counts(fixture.first, CUDA0), (std::vector<std::int64_t>{0, 0, 1}));
  EXPECT_EQ(table.active_lease_count(), 0u);
  EXPECT_EQ(table.pending_lease_count(), 1u);
  EXPECT_EQ(table.lease_count(), 1u);
  table.clear();
  EXPECT_EQ(table.pending_lease_count(), 0u);
}

// The owner CorePins keeps alive in these tests; `alive` follows it.
struct PinnedOwner : std::enable_shared_from_this<PinnedOwner> {
  explicit PinnedOwner(bool& alive) : alive(alive) { alive = true; }
  ~PinnedOwner() { alive = false; }
  bool& alive;
};

// A CorePins over a fresh owner that, once pinned, only the pins and the
// hold they hand back keep alive.
struct PinsFixture {
  bool alive = false;
  std::shared_ptr<PinnedOwner> spare = std::make_shared<PinnedOwner>(alive);
  PinnedOwner& owner = *spare;
  CorePins<PinnedOwner> pins;

  void pin() {
    pins.pin(owner);
    spare.reset();  // from the first pin on, the pins' hold is the only one
  }
};

TEST(CorePins, AnOwnerWithItsManagerKeepsItselfUntilOrphanedWithoutPins) {
  PinsFixture fixture;
  EXPECT_FALSE(fixture.pins.holds_itself());
  fixture.pin();
  fixture.pin();
  EXPECT_EQ(fixture.owner.weak_from_this().use_count(), 1);  // one hold, taken at the first pin
  EXPECT_TRUE(fixture.pins.holds_itself());
  EXPECT_EQ(fixture.pins.count(), 2);
  EXPECT_EQ(fixture.pins.unpin(), nullptr);
  EXPECT_EQ(fixture.pins.unpin(), nullptr);  // the last pin of an owner not orphaned
  EXPECT_TRUE(fixture.pins.holds_itself());
  EXPECT_TRUE(fixture.alive);
  std::shared_ptr<PinnedOwner> last = fixture.pins.orphan();
  ASSERT_NE(last, nullptr);
  EXPECT_FALSE(fixture.pins.holds_itself());
  EXPECT_TRUE(fixture.alive);  // until the caller drops the hold it was handed
  last.reset();
  EXPECT_FALSE(fixture.alive);
}

TEST(CorePins, AnOrphanedOwnerLetsGoAtItsLastPinIncludingPinsFromLanes) {
  PinsFixture fixture;
  fixture.pin();
  fixture.pins.add(2);  // two lane leases folded in
  EXPECT_EQ(fixture.pins.orphan(), nullptr);
  EXPECT_EQ(fixture.pins.unpin(), nullptr);
  EXPECT_EQ(fixture.pins.unpin(), nullptr);
  EXPECT_TRUE(fixture.alive);
  std::shared_ptr<PinnedOwner> last = fixture.pins.unpin();
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(fixture.pins.count(), 0);
  last.reset();
  EXPECT_FALSE(fixture.alive);
  // An owner never pinned has no hold on itself to hand back.
  CorePins<PinnedOwner> unpinned;
  EXPECT_EQ(unpinned.orphan(), nullptr);
}

TEST(CorePins, StrayUnpinsCountOnlyOnceSettledAndCanDropTheLastPin) {
  PinsFixture fixture;
  fixture.pin();
  fixture.pin();
  fixture.pin();
  EXPECT_FALSE(fixture.pins.has_strays());
  fixture.pins.add_stray();
  EXPECT_TRUE(fixture.pins.has_strays());
  EXPECT_EQ(fixture.pins.count(), 3);  // not yet settled
  EXPECT_EQ(fixture.pins.settle(), nullptr);
  EXPECT_FALSE(fixture.pins.has_strays());
  EXPECT_EQ(fixture.pins.count(), 2);
  EXPECT_EQ(fixture.pins.orphan(), nullptr);
  // An unpin of an orphaned owner settles the strays with it.
  fixture.pins.add_stray();
  std::shared_ptr<PinnedOwner> last = fixture.pins.unpin();
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(fixture.pins.count(), 0);
  // Strays counted from several threads at once are all settled.
  PinsFixture many;
  for (int i = 0; i < 4000; ++i) many.pin();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&many] {
      for (int i = 0; i < 1000; ++i) many.pins.add_stray();
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(many.pins.count(), 4000);
  std::shared_ptr<PinnedOwner> freed = many.pins.orphan();  // settles all 4000
  EXPECT_NE(freed, nullptr);
  EXPECT_EQ(many.pins.count(), 0);
}

TEST(Ring, KeepsTheLastItemsOldestFirstAndOverwritesSlotsInPlace) {
  Ring<std::string> ring(3);
  EXPECT_TRUE(ring.items().empty());
  for (const char* item : {"a", "b"}) ring.push(item);
  EXPECT_EQ(ring.items(), (std::vector<std::string>{"a", "b"}));
  for (const char* item : {"c", "d", "e"}) ring.push(item);
  EXPECT_EQ(ring.items(), (std::vector<std::string>{"c", "d", "e"}));
  EXPECT_EQ(ring.size(), 3u);
  // Every rotation of a full ring reads in push order.
  std::vector<int> pushed;
  Ring<int> numbers(4);
  for (int item = 0; item < 23; ++item) {
    numbers.push(item);
    pushed.push_back(item);
    const std::size_t kept = std::min<std::size_t>(pushed.size(), 4);
    EXPECT_EQ(numbers.items(), std::vector<int>(pushed.end() - static_cast<std::ptrdiff_t>(kept), pushed.end()))
        << item;
  }
  numbers.clear();
  EXPECT_TRUE(numbers.items().empty());
  numbers.push(99);
  EXPECT_EQ(numbers.items(), std::vector<int>{99});
  Ring<int> none(0);
  none.push(1);
  EXPECT_TRUE(none.items().empty());
  // A huge capacity allocates only as items arrive.
  Ring<int> large(std::size_t{1} << 40);
  large.push(7);
  EXPECT_EQ(large.items(), std::vector<int>{7});
}

TEST(Ring, KeepsItsItemsInPlaceAcrossBlocks) {
  // A capacity that ends inside a block, filled and wrapped several times.
  const std::size_t capacity = 2 * Ring<int>::block_slots + 44;
  Ring<int> ring(capacity);
  const auto addresses = [&] {
    std::vector<const int*> result;
    ring.for_each([&](const int& kept) { result.push_back(&kept); });
    return result;
  };
  // Half the ring kept (past the first block), then the rest pushed: the
  // items already kept did not move.
  const int half = static_cast<int>(capacity / 2);
  for (int item = 0; item < half; ++item) ring.push(item);
  const std::vector<const int*> before = addresses();
  for (int item = half; item < static_cast<int>(capacity); ++item) ring.push(item);
  const std::vector<const int*> after = addresses();
  ASSERT_EQ(after.size(), capacity);
  EXPECT_TRUE(std::equal(before.begin(), before.end(), after.begin()));
  const int pushes = static_cast<int>(capacity * 3 + 17);
  for (int item = static_cast<int>(capacity); item < pushes; ++item) ring.push(item);
  std::vector<int> expected;
  for (int item = pushes - static_cast<int>(capacity); item < pushes; ++item) expected.push_back(item);
  EXPECT_EQ(ring.items(), expected);
  EXPECT_EQ(ring.size(), capacity);
  ring.clear();
  EXPECT_EQ(ring.size(), 0u);
  ring.push(5);
  EXPECT_EQ(ring.items(), std::vector<int>{5});
}

TEST(Ring, FillsSlotsInPlaceAndAFillThatThrowsKeepsNothing) {
  Ring<std::string> ring(2);
  ring.push_in_place([](std::string& slot) {
    EXPECT_TRUE(slot.empty());  // a fresh slot while the ring fills
    slot = std::string(40, 'a');
  });
  EXPECT_THROW(ring.push_in_place([](std::string& slot) {
                 slot = "half";
                 throw std::runtime_error("fill failed");
               }),
               std::runtime_error);
  EXPECT_EQ(ring.items(), std::vector<std::string>{std::string(40, 'a')});  // the failed slot is gone
  ring.push("b");
  const char* reused = nullptr;
  ring.push_in_place([&](std::string& slot) {
    EXPECT_EQ(slot, std::string(40, 'a'));  // full: the oldest item's slot, overwritten
    reused = slot.data();
    slot.assign(39, 'c');
  });
  EXPECT_EQ(ring.items(), (std::vector<std::string>{"b", std::string(39, 'c')}));
  ring.for_each([&](const std::string& item) {
    if (item.size() == 39) {
      EXPECT_EQ(item.data(), reused);  // its buffer kept
    }
  });
  Ring<std::string> none(0);
  none.push_in_place([](std::string&) { ADD_FAILURE() << "a ring of capacity 0 fills nothing"; });
}

// A table with three values (one resident at two locations and protected,
// one source-backed and not resident, one discarded), two reservations and
// a budgeted CUDA location, assembled into a snapshot.
struct AssemblyFixture {
  ValueTable values{"m"};
  LocationLedger ledger;
  TokenTable<ReservationRecord> reservations;
  std::vector<c10::Device> sampled;

  AssemblyFixture() {
    ledger.add_budget(CUDA0, 1000);
    ledger.register_location(PAGEABLE_HOST);
    const auto tensor = [] { return ResidentValue("Blob", {{"data", at::arange(4, at::TensorOptions().dtype(at::kLong))}}); };
    ValueRecord& first = values.add(ResidencyValueSpec("Blob", 32, 48, ReplicaMode::replicable,
                                                       Recoverability::must_preserve), nullptr, std::nullopt);
    add_item(first, PAGEABLE_HOST, tensor(), 32);
    add_item(first, CUDA0, tensor(), 40);
    first.materializations.front().hold_count = 1;
    first.materializations.back().use_count = 2;
    first.materializations.back().pending_count = 1;
    ledger.add_used(PAGEABLE_HOST, 48);
    ledger.add_used(CUDA0, 48);
    values.add(ResidencyValueSpec("Blob", 16, 16, ReplicaMode::replicable, Recoverability::reconstructible),
               make_source([tensor] { return tensor(); }), PINNED_HOST);
    values.add(blob_spec(), nullptr, std::nullopt).discarded = true;
    reservations.emplace(1, ReservationRecord{CUDA0, 100, "kv"});
    reservations.emplace(2, ReservationRecord{PAGEABLE_HOST, 7, "scratch"});
    ledger.add_reserved(CUDA0, 100);
    ledger.add_reserved(PAGEABLE_HOST, 7);
  }

  ResidencySnapshot assemble() {
    return assemble_snapshot(
        {"m", 9, values, ledger, reservations},
        [this](const c10::Device& device) {
          sampled.push_back(device);
          return AllocatorSample{11, 22};
        },
        [] { return std::int64_t{123}; });
  }
};

TEST(SnapshotAssembly, BuildsTheRecordsTheCheckedConstructorsWouldAndCountsEachLocation) {
  AssemblyFixture fixture;
  const ResidencySnapshot snapshot = fixture.assemble();
  // The same records through the checked constructors: equal field for field.
  const ResidencySnapshot expected(
      "m", 9,
      {ResidencyValueSnapshot(ResidencyHandle{"m", "1", "Blob"},
                              ResidencyValueSpec("Blob", 32, 48, ReplicaMode::replicable, Recoverability::must_preserve),
                              {MaterializationSnapshot(PAGEABLE_HOST, 32, 32, 48, 0, 1, 0),
                               MaterializationSnapshot(CUDA0, 32, 40, 48, 2, 0, 1)},
                              false, std::nullopt, false),
       ResidencyValueSnapshot(ResidencyHandle{"m", "2", "Blob"},
                              ResidencyValueSpec("Blob", 16, 16, ReplicaMode::replicable,
                                                 Recoverability::reconstructible),
                              {}, true, PINNED_HOST, false),
       ResidencyValueSnapshot(ResidencyHandle{"m", "3", "Blob"}, blob_spec(), {}, false, std::nullopt, true)},
      {ResidencyLocationSnapshot(CUDA0, 1000, 48, 100, 852, 48, 148, 1, 1, 2, 0, 1, 11, 22),
       ResidencyLocationSnapshot(PAGEABLE_HOST, std::nullopt, 48, 7, std::nullopt, 48, 55, 1, 1, 0, 1, 0,
                                 std::nullopt, std::nullopt)},
      {ResidencyReservationSnapshot(CUDA0, 100, "kv"), ResidencyReservationSnapshot(PAGEABLE_HOST, 7, "scratch")},
      123);
  EXPECT_EQ(snapshot, expected);
  // Only the CUDA location's allocator is sampled, once.
  ASSERT_EQ(fixture.sampled.size(), 1u);
  EXPECT_EQ(fixture.sampled[0], CUDA0.device());
}

// Snapshot handle ids are counted up from the previous record's: across
// every carry (9 -> 10, 99 -> 100, 999 -> 1000) and after a serial that a
// rolled-back adopt never handed out, each must still be the record's own.
TEST(SnapshotAssembly, HandleIdsAreEachRecordsSerialAcrossCarriesAndGaps) {
  AssemblyFixture fixture;  // serials 1..3
  for (int index = 0; index < 1200; ++index) {
    fixture.values.add(blob_spec(), nullptr, std::nullopt).discarded = true;
    if (index == 5 || index == 95 || index == 996) fixture.values.remove_last();  // 9, 99 and 1000 are skipped
  }
  std::vector<std::string> issued;
  fixture.values.for_each([&](const ValueRecord& record) { issued.push_back(fixture.values.handle_of(record).handle_id); });
  const ResidencySnapshot snapshot = fixture.assemble();
  ASSERT_EQ(snapshot.values.size(), issued.size());
  for (std::size_t index = 0; index < issued.size(); ++index) {
    ASSERT_EQ(snapshot.values[index].handle, (ResidencyHandle{"m", issued[index], "Blob"})) << index;
    ASSERT_NE(fixture.values.find(snapshot.values[index].handle), nullptr) << index;
  }
  EXPECT_EQ(issued[7], "8");
  EXPECT_EQ(issued[8], "10");
  EXPECT_EQ(issued[97], "100");
  EXPECT_EQ(issued[997], "1001");
  EXPECT_EQ(issued.back(), "1203");
}

TEST(SnapshotAssemblyDeathTest, ALedgerThatDisagreesWithTheMaterializationsIsABug) {
  AssemblyFixture fixture;
  fixture.ledger.add_used(PAGEABLE_HOST, 1);  // a charge no materialization accounts for
  EXPECT_DEATH(fixture.assemble(), "ledger used bytes disagree with materializations");
}

TEST(SnapshotAssemblyDeathTest, AMaterializationItsChargeDoesNotCoverIsABug) {
  AssemblyFixture fixture;
  ValueRecord* first = fixture.values.find(ResidencyHandle{"m", "1", "Blob"});
  ASSERT_NE(first, nullptr);
  first->materializations.front().storage_nbytes = 49;  // more than the value's 48-byte charge
  EXPECT_DEATH(fixture.assemble(), "materialization charge does not cover its bytes");
}

// ---- transitions and the dry run over real parts ----------------------------------

ResidentValue blob(std::int64_t start) {
  return ResidentValue("Blob", {{"data", at::arange(start, start + 1, at::TensorOptions().dtype(at::kLong))}});
}

// The parts a manager composes, wired as it wires them, with an 8-byte budget
// at cuda:0 (one Blob).
struct EngineFixture {
  harness::SimulatedRuntime runtime{};
  ValueTable values{"m"};
  LocationLedger ledger;
  StateGate gate;
  std::uint64_t version = 0;
  LifetimeTable lifetimes;
  Transitions transitions{runtime, values, ledger, gate, version};
  PlanDryRun dry_run{runtime, values, ledger, lifetimes};

  EngineFixture() { ledger.add_budget(CUDA0, 8); }

  ResidencyHandle handle(const ValueRecord& record) const { return values.handle_of(record); }

  ValueRecord& adopt(std::int64_t start, ReplicaMode mode = ReplicaMode::replicable) {
    ValueRecord& record =
        values.add(ResidencyValueSpec("Blob", 8, 8, mode, Recoverability::must_preserve), nullptr, std::nullopt);
    transitions.install(record, PAGEABLE_HOST, blob(start), false);
    return record;
  }
  // As register_source does: the source's location is registered with the value.
  ValueRecord& add_source(std::function<ResidentValue()> load, const ResidencyLocation& at) {
    transitions.register_location(at);
    return values.add(ResidencyValueSpec("Blob", 8, 8, ReplicaMode::replicable, Recoverability::reconstructible),
                      make_source(std::move(load)), at);
  }
  std::int64_t used(const ResidencyLocation& at) const { return ledger.find(at) ? ledger.find(at)->used_bytes : 0; }
  std::int64_t reserved(const ResidencyLocation& at) const {
    return ledger.find(at) ? ledger.find(at)->reserved_bytes : 0;
  }
};

TEST(Transitions, InstallChargesClaimsAndBumpsAndRemoveUndoesEachOfThem) {
  EngineFixture fixture;
  ValueRecord& first = fixture.adopt(1);
  EXPECT_EQ(fixture.used(PAGEABLE_HOST), 8);
  EXPECT_EQ(fixture.version, 2u);  // pageable host's registration, then the install
  // The same storage cannot become a second value's materialization.
  ValueRecord& second = fixture.values.add(blob_spec(), nullptr, std::nullopt);
  EXPECT_THROW(fixture.transitions.install(second, PAGEABLE_HOST, ResidentValue(first.at(PAGEABLE_HOST)->value), false),
               ResidencyOwnershipError);
  EXPECT_TRUE(second.materializations.empty());
  EXPECT_EQ(fixture.used(PAGEABLE_HOST), 8);
  fixture.transitions.remove(first, PAGEABLE_HOST);
  EXPECT_EQ(fixture.used(PAGEABLE_HOST), 0);
  EXPECT_EQ(fixture.version, 3u);
  // The storage is free again once its materialization is gone.
  const ResidentValue kept = blob(7);
  fixture.transitions.install(second, PAGEABLE_HOST, ResidentValue(kept), false);
  fixture.transitions.remove(second, PAGEABLE_HOST);
  fixture.transitions.install(first, PAGEABLE_HOST, ResidentValue(kept), false);
  EXPECT_EQ(first.at(PAGEABLE_HOST)->value.field("data").item<std::int64_t>(), 7);
}

TEST(Transitions, ReconstructsUnderATemporaryChargeWhileTheGateRefusesEveryCall) {
  EngineFixture fixture;
  std::optional<StateGate::Entry> entry_during_load;
  std::int64_t reserved_during_load = -1;
  ValueRecord& record = fixture.add_source(
      [&] {
        entry_during_load = fixture.gate.enter();
        reserved_during_load = fixture.reserved(PAGEABLE_HOST);
        return blob(3);
      },
      PAGEABLE_HOST);
  const TransitionDecision decision =
      fixture.transitions.decide_and_apply(EnsureResident{fixture.handle(record), CUDA0}, record, std::nullopt);
  EXPECT_TRUE(decision.load);
  EXPECT_EQ(entry_during_load, StateGate::Entry::refused_loading);
  EXPECT_EQ(reserved_during_load, 8);
  EXPECT_EQ(fixture.reserved(PAGEABLE_HOST), 0);  // the temporary charge is returned
  EXPECT_EQ(fixture.used(CUDA0), 8);
  EXPECT_EQ(record.materializations.size(), 1u);
  EXPECT_EQ(record.at(CUDA0)->value.field("data").item<std::int64_t>(), 3);
  EXPECT_EQ(fixture.gate.enter(), StateGate::Entry::entered);  // loading ended
}

TEST(Transitions, AFailedOrRefusedTransitionLeavesTheStateAsItWas) {
  EngineFixture fixture;
  ValueRecord& held = fixture.adopt(1, ReplicaMode::exclusive);
  ValueRecord& other = fixture.adopt(2);
  bool fail = true;
  ValueRecord& loaded = fixture.add_source(
      [&]() -> ResidentValue {
        if (fail) throw std::runtime_error("disk gone");
        return other.at(PAGEABLE_HOST)->value;  // aliases another value's storage
      },
      PAGEABLE_HOST);
  const std::uint64_t version = fixture.version;
  EXPECT_THROW(fixture.transitions.decide_and_apply(EnsureResident{fixture.handle(loaded), CUDA0}, loaded, std::nullopt),
               std::runtime_error);
  fail = false;
  EXPECT_THROW(fixture.transitions.decide_and_apply(EnsureResident{fixture.handle(loaded), CUDA0}, loaded, std::nullopt),
               ResidencyOwnershipError);
  // A move whose source is protected, and one the budget cannot admit.
  held.at(PAGEABLE_HOST)->hold_count = 1;
  EXPECT_THROW(fixture.transitions.decide_and_apply(MoveResident{fixture.handle(held), CUDA0, std::nullopt}, held,
                                                    std::nullopt),
               ResidencyInUseError);
  held.at(PAGEABLE_HOST)->hold_count = 0;
  fixture.ledger.add_reserved(CUDA0, 1);
  EXPECT_THROW(fixture.transitions.decide_and_apply(MoveResident{fixture.handle(held), CUDA0, std::nullopt}, held,
                                                    std::nullopt),
               ResidencyBudgetError);
  fixture.ledger.remove_reserved(CUDA0, 1);
  EXPECT_EQ(fixture.version, version);
  EXPECT_EQ(fixture.reserved(PAGEABLE_HOST), 0);
  EXPECT_EQ(fixture.used(CUDA0), 0);
  EXPECT_TRUE(loaded.materializations.empty());
  ASSERT_EQ(held.materializations.size(), 1u);
  // Admitted, the move installs at the destination and removes the source.
  fixture.transitions.decide_and_apply(MoveResident{fixture.handle(held), CUDA0, std::nullopt}, held, std::nullopt);
  EXPECT_EQ(fixture.used(CUDA0), 8);
  EXPECT_EQ(fixture.used(PAGEABLE_HOST), 8);  // `other` only
  ASSERT_EQ(held.materializations.size(), 1u);
  EXPECT_EQ(held.materializations.front().location, CUDA0);
}

// One list of actions, as execute_actions passes them (the list lives to the
// end of the call it is made for).
PlanActions listed(const std::vector<ResidencyAction>& actions) { return PlanActions{{actions}}; }

TEST(PlanDryRun, PredictsPeaksAndRefusalsWithoutTouchingTheState) {
  EngineFixture fixture;
  ValueRecord& first = fixture.adopt(1);
  ValueRecord& second = fixture.adopt(2);
  const std::uint64_t version = fixture.version;
  const ResidencyAction ensure_first = EnsureResident{fixture.handle(first), CUDA0};
  const ResidencyAction drop_first = DropResident{fixture.handle(first), CUDA0};
  const ResidencyAction ensure_second = EnsureResident{fixture.handle(second), CUDA0};
  const ResidencyAction discard_first = DiscardValue{fixture.handle(first)};
  // Within the 8-byte budget only because the drop comes between the ensures.
  const auto feasible = fixture.dry_run.run(listed({ensure_first, drop_first, ensure_second}), {}, 0, nullptr);
  EXPECT_FALSE(feasible.failure.has_value());
  ASSERT_EQ(feasible.steps.size(), 3u);
  EXPECT_EQ(feasible.steps[0].record, &first);
  EXPECT_EQ(feasible.steps[1].record, &first);
  EXPECT_EQ(feasible.steps[2].record, &second);
  // Each step carries the decision execution will carry out: a copy to
  // CUDA0 from the host, its removal again, the second value's copy.
  EXPECT_TRUE(feasible.steps[0].decision.install && !feasible.steps[0].decision.load);
  EXPECT_EQ(feasible.steps[0].decision.source, PAGEABLE_HOST);
  EXPECT_EQ(feasible.steps[0].decision.destination, CUDA0);
  EXPECT_EQ(feasible.steps[1].decision.remove, CUDA0);
  EXPECT_FALSE(feasible.steps[1].decision.install);
  EXPECT_EQ(feasible.steps[2].decision.destination, CUDA0);
  EXPECT_TRUE(feasible.steps[2].decision.install);
  const auto peak_at = [](const PlanDryRun::Result& result, const ResidencyLocation& at) {
    for (const auto& [location, peak] : result.peaks) {
      if (location == at) return peak;
    }
    return std::int64_t{-1};
  };
  EXPECT_EQ(peak_at(feasible, CUDA0), 8);
  EXPECT_EQ(peak_at(feasible, PAGEABLE_HOST), 16);
  // The same two ensures without the drop: refused at the second, explained up to it.
  std::vector<ResidencyActionExplanation> explanations;
  const auto refused = fixture.dry_run.run(listed({ensure_first, ensure_second, drop_first}), {}, 0, &explanations);
  ASSERT_TRUE(refused.failure.has_value());
  EXPECT_EQ(*refused.failure, "transition exceeds budget at " + CUDA0.name());
  ASSERT_EQ(explanations.size(), 2u);
  EXPECT_TRUE(explanations[0].executable);
  EXPECT_FALSE(explanations[1].executable);
  EXPECT_EQ(peak_at(refused, CUDA0), 16);  // the refused charge is the predicted peak
  // A reservation admitted first leaves no room for either ensure.
  const auto reserved = fixture.dry_run.run(listed({ensure_first}), {MemoryReservation(CUDA0, 4, "kv")}, 0, nullptr);
  EXPECT_EQ(reserved.failure, "transition exceeds budget at " + CUDA0.name());
  // A location first used by the plan is registered in the shadow only.
  const ResidencyAction ensure_elsewhere = EnsureResident{fixture.handle(second), CUDA1};
  const auto elsewhere = fixture.dry_run.run(listed({ensure_elsewhere}), {}, 0, nullptr);
  EXPECT_FALSE(elsewhere.failure.has_value());
  EXPECT_EQ(peak_at(elsewhere, CUDA1), 8);
  // A value discarded earlier in the plan is refused like an unknown one.
  const auto discarded = fixture.dry_run.run(listed({discard_first, ensure_first}), {}, 0, nullptr);
  EXPECT_EQ(discarded.failure, "value '" + fixture.handle(first).handle_id + "' is discarded");
  // Nothing was charged, registered, bumped or discarded.
  EXPECT_EQ(fixture.version, version);
  EXPECT_EQ(fixture.used(CUDA0), 0);
  EXPECT_EQ(fixture.ledger.find(CUDA0)->peak_charged_bytes, 0);
  EXPECT_EQ(fixture.ledger.find(CUDA1), nullptr);
  EXPECT_FALSE(first.discarded);
  EXPECT_EQ(first.materializations.size(), 1u);
}

// A plan's actions come in three lists (reclaim, enter, exit), walked as one
// sequence: its reservations are admitted before the action they precede,
// which may be in any list or after the last, and the first refusal, in
// whichever list, ends the run with that action explained.
TEST(PlanDryRun, WalksThePlansListsInOrderWithTheReservationsBetween) {
  EngineFixture fixture;
  ValueRecord& first = fixture.adopt(1);
  ValueRecord& second = fixture.adopt(2);
  const std::vector<ResidencyAction> reclaim{DropResident{fixture.handle(first), PAGEABLE_HOST},
                                             DropResident{fixture.handle(second), CUDA0}};
  const std::vector<ResidencyAction> enter{EnsureResident{fixture.handle(first), CUDA0}};
  const std::vector<ResidencyAction> exit{DropResident{fixture.handle(first), CUDA0},
                                          EnsureResident{fixture.handle(second), CUDA0}};
  const PlanActions plan{{reclaim, enter, exit}};
  ASSERT_EQ(plan.size(), 5u);
  const std::vector<MemoryReservation> kv{MemoryReservation(CUDA0, 4, "kv")};
  // Steps in plan order, across the lists: the reclaim's drop of `first`
  // (its only copy: refused) is not a step because the run stops there.
  std::vector<ResidencyActionExplanation> explanations;
  const auto refused_first = fixture.dry_run.run(plan, {}, 0, &explanations);
  ASSERT_EQ(explanations.size(), 1u);
  EXPECT_EQ(std::get<DropResident>(explanations[0].action).handle, fixture.handle(first));
  EXPECT_TRUE(refused_first.failure.has_value());
  // Without the reclaim's refusal: every list is walked, in order.
  const std::vector<ResidencyAction> no_reclaim{DropResident{fixture.handle(second), CUDA0}};
  const PlanActions whole{{no_reclaim, enter, exit}};
  const auto feasible = fixture.dry_run.run(whole, {}, 0, nullptr);
  ASSERT_FALSE(feasible.failure.has_value()) << *feasible.failure;
  ASSERT_EQ(feasible.steps.size(), 4u);
  EXPECT_TRUE(feasible.steps[0].decision.changes_nothing());  // second is not at cuda:0
  EXPECT_EQ(feasible.steps[1].decision.destination, CUDA0);   // enter: first to cuda:0
  EXPECT_EQ(feasible.steps[2].decision.remove, CUDA0);        // exit: and away again
  EXPECT_EQ(feasible.steps[3].record, &second);               // exit: second to cuda:0
  // A 4-byte reservation before the enter list leaves no room for its 8
  // bytes: refused at the enter's ensure, after the reclaim's action ran.
  explanations.clear();
  const auto reserved_before_enter = fixture.dry_run.run(whole, kv, 1, &explanations);
  EXPECT_EQ(reserved_before_enter.failure, "transition exceeds budget at " + CUDA0.name());
  EXPECT_EQ(explanations.size(), 2u);
  // After the exit's drop (index 3), it fits until the last ensure.
  explanations.clear();
  const auto reserved_late = fixture.dry_run.run(whole, kv, 3, &explanations);
  EXPECT_EQ(reserved_late.failure, "transition exceeds budget at " + CUDA0.name());
  EXPECT_EQ(explanations.size(), 4u);
  // After the last action, the reservation itself is what does not fit.
  explanations.clear();
  const auto reserved_after = fixture.dry_run.run(whole, kv, 4, &explanations);
  EXPECT_EQ(reserved_after.failure, "reservation 'kv' exceeds budget at " + CUDA0.name());
  EXPECT_EQ(explanations.size(), 4u);
  EXPECT_TRUE(explanations.back().executable);
}

}  // namespace
}  // namespace fhelium::residency::detail
