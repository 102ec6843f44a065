// ManagerCore: the shared state behind ResidencyManager and its lifetimes.
//
// The core composes its parts, each with one job and its own unit tests
// (lib/tests/parts_test.cpp):
//  - the state gate (state_gate.hpp): one public call at a time, reentry
//    refused, except for host leases of one value, which take, read and
//    release in lanes alongside one another (core_lifetimes.cpp);
//  - the location ledger (ledger.hpp): budgets, charges and peaks;
//  - the value table with its storage-ownership index (value_table.hpp,
//    storage_index.hpp);
//  - the transition rules (transition_rules.hpp), which decide what an action
//    does to a value, once, for execution and the dry run alike;
//  - transitions (transitions.hpp), which carry a decision out: load, copy,
//    install, remove, discard;
//  - the plan dry run (dry_run.hpp): explain and every plan's preflight;
//  - the lifetime table (lifetime_table.hpp): leases, holds, reservations,
//    pending events and reaping;
//  - snapshot assembly (snapshot_assembly.hpp) and the trace and diagnostics
//    rings (ring.hpp);
//  - the pins (core_pins.hpp), which keep the core alive for its active
//    lifetime objects once the manager object is gone.
// The core itself checks each public call's arguments, takes the gate,
// sequences the parts, times and reports what they did, and turns failures
// into the public errors: primitives in core_transitions.cpp, plans and scopes
// in core_plans.cpp, lifetimes in core_lifetimes.cpp, observation and control
// in core_observe.cpp. Public entry points take the gate through StateAccess;
// *_locked helpers require it held.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "detail/core_pins.hpp"
#include "detail/dry_run.hpp"
#include "detail/ledger.hpp"
#include "detail/lifetime_records.hpp"
#include "detail/lifetime_table.hpp"
#include "detail/ring.hpp"
#include "detail/state_gate.hpp"
#include "detail/trace_record.hpp"
#include "detail/scope_exit.hpp"
#include "detail/transition_rules.hpp"
#include "detail/transitions.hpp"
#include "detail/value_table.hpp"
#include "fhelium/residency/inline_vector.hpp"
#include "fhelium/residency/lease.hpp"
#include "fhelium/residency/manager.hpp"
#include "fhelium/residency/runtime.hpp"
#include "fhelium/residency/value.hpp"

namespace fhelium::residency::detail {

struct ScopeEntry {
  std::vector<std::uint64_t> reservation_tokens;
  std::vector<ResidencyTransitionReport> transitions;
  std::int64_t started_at_ns = 0;
};

// A lease or hold granted: its token and the handles it covers.
struct LifetimeGrant {
  std::uint64_t token;
  HandleList handles;
};

class ManagerCore : public std::enable_shared_from_this<ManagerCore> {
 public:
  explicit ManagerCore(ManagerOptions options);

  // The manager object is going away. The core lives on, for the scopes that
  // share it and for every lifetime still active (see LifetimeToken); once the
  // last of those ends, the core is destroyed. Waits out another thread's
  // source load. Called once, by ~ResidencyManager.
  void disown() noexcept;

  const std::string& manager_id() const { return manager_id_; }
  const std::shared_ptr<DeviceRuntime>& runtime() const { return runtime_; }

  // Observation (core_observe.cpp).
  std::uint64_t state_version();
  std::vector<ResidencyLocation> locations();
  ResidencySnapshot snapshot();
  std::vector<ResidencyTransitionReport> trace();
  void clear_trace();
  std::vector<std::string> diagnostics();
  void close(bool wait, bool force);
  bool closed();

  // Values and primitives (core_transitions.cpp).
  ResidencyHandle adopt(ResidentValue&& value, std::optional<ResidencyLocation> at, ReplicaMode replica_mode);
  ResidencyHandle register_source(ResidencyValueSpec&& spec, std::shared_ptr<ResidencySource>&& source,
                                  ResidencyLocation source_location);
  // One action of type `Action`, built from `fields` in its report's place
  // (instantiated in core_transitions.cpp for each public call's fields).
  template <class Action, class... Fields>
  ResidencyTransitionReport run_action(const std::optional<c10::Stream>& stream, const Fields&... fields);

  // Plans (core_plans.cpp).
  ResidencyPlanReport execute_actions(const std::vector<ResidencyAction>& actions, const std::string& name,
                                      const TransferStreams& streams, std::optional<std::uint64_t> expected);
  ResidencyPlanExplanation explain(const ResidencyPlan& plan, std::optional<std::uint64_t> expected);
  ScopeEntry enter_scope(const ResidencyPlan& plan, const TransferStreams& streams,
                         std::optional<std::uint64_t> expected);
  ResidencyPlanReport exit_scope(const ResidencyPlan& plan, const TransferStreams& streams,
                                 const std::vector<std::uint64_t>& reservation_tokens,
                                 std::vector<ResidencyTransitionReport> transitions, std::int64_t started_at_ns);
  void abandon_scope(const std::vector<std::uint64_t>& reservation_tokens, const std::string& plan_name) noexcept;

  // Lifetimes (core_lifetimes.cpp). A repeated handle counts once, as in the
  // reference. Each grant pins the core for the new lifetime. A release that
  // gets into the core ends the lifetime object and drops its pin together,
  // whatever happens after, handing back through `last_pin` the core's hold
  // on itself when that was its last lifetime and the manager is gone (the
  // caller drops it when done with the core). A release refused entry
  // changes nothing: the lifetime stays active and pinned.
  LifetimeGrant acquire(const std::vector<ResidencyHandle>& handles, const ResidencyLocation& at,
                        const std::optional<c10::Stream>& consumer_stream);
  LifetimeGrant hold(const std::vector<ResidencyHandle>& handles, const ResidencyLocation& at);
  std::uint64_t reserve(const ResidencyLocation& location, std::int64_t nbytes, const std::string& label);
  ResidentValue leased_value(std::uint64_t token, const ResidencyHandle& handle);
  void add_consumer_stream(std::uint64_t token, const c10::Stream& stream);
  void release_lease(LifetimeToken& lifetime, bool wait, std::shared_ptr<ManagerCore>& last_pin);
  void release_hold(LifetimeToken& lifetime, std::shared_ptr<ManagerCore>& last_pin);
  void release_reservation(LifetimeToken& lifetime, std::shared_ptr<ManagerCore>& last_pin);
  // Destructor paths (the lifetime object has already ended): never throw;
  // record a diagnostic; always drop the pin.
  void abandon_lease(std::uint64_t token, std::shared_ptr<ManagerCore>& last_pin) noexcept;
  void abandon_hold(std::uint64_t token, std::shared_ptr<ManagerCore>& last_pin) noexcept;
  void abandon_reservation(std::uint64_t token, std::shared_ptr<ManagerCore>& last_pin) noexcept;

  // Operation observers (observer.hpp). Called without the state lock; an
  // exception from the observer is dropped and recorded as a diagnostic.
  bool observed() const noexcept { return static_cast<bool>(observer_); }
  void observe(ObservedOperation operation) noexcept;
  std::uint64_t next_scope_id() noexcept { return next_scope_id_.fetch_add(1) + 1; }

 private:
  // Holds the state lock for one public call and rejects reentry: from a
  // source load (any thread) and from a callback on the calling thread. Once
  // in, folds in what the lanes counted since the last call.
  class StateAccess {
   public:
    explicit StateAccess(ManagerCore& core) : core_(core) {
      const StateGate::Entry entry = core_.gate_.enter();
      if (entry != StateGate::Entry::entered) [[unlikely]] refuse(entry);
      core_.fold_lanes_locked();
    }
    ~StateAccess() {
      // Pins dropped by lifetimes abandoned during this call's source load
      // (see abandon_with); the core's hold on itself, if that was the last,
      // goes after the gate is left.
      std::shared_ptr<ManagerCore> last_pin;
      if (core_.pins_.has_strays()) [[unlikely]] last_pin = core_.pins_.settle();
      core_.gate_.leave();
    }
    StateAccess(const StateAccess&) = delete;
    StateAccess& operator=(const StateAccess&) = delete;

   private:
    // Throws the ResidencyReentrancyError that names why `entry` was refused.
    [[noreturn]] void refuse(StateGate::Entry entry) const;
    ManagerCore& core_;
  };

  // Control state.
  void require_open_locked() const;
  void bump_locked() { ++state_version_; }
  // The runtime's time, never earlier than a reading before it. Inline: a
  // primitive's report reads it twice.
  std::int64_t clock_locked() {
    last_clock_ns_ = std::max(last_clock_ns_, runtime_->now_ns());
    return last_clock_ns_;
  }
  void diagnose_locked(std::string message);
  void require_expected_version_locked(std::optional<std::uint64_t> expected) const;
  void check_streams_locked(const TransferStreams& streams) const;

  // Primitives (core_transitions.cpp): one action, timed and reported.
  // run_typed_locked carries out `action`, report.action's alternative of
  // that type, and fills in the rest of `report`; a caller that knows the
  // type (a primitive call) runs only that type's checks, rules and steps,
  // and a plan's actions are dispatched on their type once each.
  // `planned`, when given, is what the plan's preflight found for the action
  // (the dry run that admitted the plan, under this same lock): its value
  // record and its decision, so neither is made again, and its arguments
  // were checked there. `started_at_ns`, when given, is the action's start:
  // in a run of a plan's actions, the previous action's completion, so one
  // clock read marks both.
  template <class Action>
  void run_typed_locked(ResidencyTransitionReport& report, const Action& action,
                        const std::optional<c10::Stream>& stream, const PlanDryRun::Step* planned,
                        std::optional<std::int64_t> started_at_ns);
  // A plan's `action`, run with its report built at the end of `reports`
  // (copied there once, never moved) and its transfer stream taken from
  // `streams`; on a failure the report is removed again and the error
  // propagates.
  void append_run_locked(std::vector<ResidencyTransitionReport>& reports, const ResidencyAction& action,
                         const TransferStreams& streams, const PlanDryRun::Step* planned,
                         std::optional<std::int64_t> started_at_ns);
  std::pair<std::optional<std::int64_t>, std::optional<std::int64_t>> sample_allocator_locked(
      const std::optional<c10::Device>& device);

  // Lifetimes (core_lifetimes.cpp).
  // What a lifetime over the `requested` handles covers at `at`: the value
  // records, and the handle list it hands out. `unique` is the request's
  // unique handles (unique_handles), empty for one handle: that value's own
  // list is then borrowed. Throws ResidencyUnavailableError for a value not
  // resident at `at`, before anything changes.
  struct Covered {
    CoveredRecords records;
    HandleList handles;
  };
  Covered cover_locked(const std::vector<ResidencyHandle>& requested, HandleList unique, const ResidencyLocation& at);
  std::uint64_t reserve_locked(const ResidencyLocation& location, std::int64_t nbytes, const std::string& label);
  void release_reservation_locked(std::uint64_t token);
  void release_lease_locked(std::uint64_t token, bool wait);
  // Lease calls in a lane of the gate (see StateGate and LifetimeTable): a
  // host lease of one value taken or released alongside other threads'. The
  // lane does only what the call under the gate would do with the same
  // outcome; anything else (a closed core, the first pin, leases
  // pending to reap, a value not resident at `at`, the call's errors) is left
  // to that call: nullopt / false, having changed nothing.
  std::optional<LifetimeGrant> acquire_in_lane(const ResidencyHandle& handle, const ResidencyLocation& at);
  bool release_in_lane(LifetimeToken& lifetime) noexcept;
  std::optional<ResidentValue> leased_value_in_lane(std::uint64_t token, const ResidencyHandle& handle);
  // Folds what the lanes counted since the last entry into the state
  // version and the pins; right after entering the gate.
  void fold_lanes_locked() noexcept {
    const std::uint32_t used = gate_.take_used_lanes();
    if (used == 0) [[likely]] return;
    const LifetimeTable::LaneCounts counts = lifetimes_.fold_lanes(used);
    state_version_ += counts.versions;
    pins_.add(counts.pins);
  }
  void reap_locked() { state_version_ += lifetimes_.reap(*runtime_); }

  // Ends `lifetime` and drops its pin (see release_lease).
  void end_lifetime_locked(LifetimeToken& lifetime, std::shared_ptr<ManagerCore>& last_pin) noexcept {
    lifetime.deactivate();
    last_pin = pins_.unpin();
  }
  // Runs `body`, an abandon's work, under the state lock and drops the
  // abandoned lifetime's pin on the way out, whatever happens. When entry is
  // refused (a callback of this thread's own call destroying the lifetime,
  // or another thread's source load) the lifetime's record stays as it is
  // and its pin is counted as a stray (CorePins::add_stray): the call holding the gate
  // settles it when it leaves (StateAccess), or this thread does if the
  // gate has come free meanwhile (see CorePins).
  template <class Body>
  void abandon_with(std::shared_ptr<ManagerCore>& last_pin, Body body) noexcept;
  void synchronize_pending_locked();

  const std::string manager_id_;
  const std::shared_ptr<DeviceRuntime> runtime_;
  const std::function<void(const std::string&)> diagnostic_sink_;
  const OperationObserver observer_;
  std::atomic<std::uint64_t> next_scope_id_{0};

  // The state lock: one public call at a time, reentry refused.
  StateGate gate_;

  // The pins of active lifetime objects (see LifetimeToken), which keep the
  // core alive once the manager object is gone. Guarded by gate_, except
  // for stray unpins.
  CorePins<ManagerCore> pins_;

  bool closed_ = false;
  std::uint64_t state_version_ = 0;
  std::int64_t last_clock_ns_ = 0;
  LocationLedger ledger_;
  ValueTable values_;
  Transitions transitions_{*runtime_, values_, ledger_, gate_, state_version_};
  LifetimeTable lifetimes_;
  PlanDryRun dry_run_{*runtime_, values_, ledger_, lifetimes_};
  Ring<TraceRecord> trace_;
  Ring<std::string> diagnostics_;
};

}  // namespace fhelium::residency::detail
