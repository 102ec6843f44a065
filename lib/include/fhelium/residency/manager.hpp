// ResidencyManager: the single authority over where managed values live.
//
// The manager owns opaque handles to tensor values, moves their
// materializations between pageable host, pinned host and CUDA locations
// through a DeviceRuntime, charges every byte against optional strict
// per-location budgets, protects materializations that readers still use,
// runs ordered plans after a dry-run explanation, and publishes immutable
// snapshots and reports.
//
// Thread-safety: every public method is safe to call from any thread; calls
// are serialized by one state lock. While a source's load() runs, every other
// public call on the same manager, from any thread, fails with
// ResidencyReentrancyError instead of blocking. After close(), calls fail with
// ResidencyClosedError.
//
// Errors: residency failures throw the ResidencyError hierarchy (errors.hpp),
// malformed arguments std::invalid_argument; both leave state unchanged
// except state_version and peaks. Allocation, copy and source-load failures
// from direct primitives propagate with their own type.
#pragma once

#include <c10/core/Stream.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fhelium/residency/lease.hpp"
#include "fhelium/residency/location.hpp"
#include "fhelium/residency/model.hpp"
#include "fhelium/residency/observer.hpp"
#include "fhelium/residency/plan.hpp"
#include "fhelium/residency/runtime.hpp"
#include "fhelium/residency/scope.hpp"
#include "fhelium/residency/snapshot.hpp"

namespace fhelium::residency {

class ResidentValue;

struct ManagerOptions {
  // Strict byte limits; these locations are registered first, in the order
  // listed here (as the reference registers its budget mapping). A location
  // listed twice is an argument error.
  LocationBudgets budgets = {};
  // Transition reports kept by trace(); 0 disables the trace.
  std::int64_t trace_capacity = 4096;
  // Device runtime; default_runtime() when null.
  std::shared_ptr<DeviceRuntime> runtime = nullptr;
  // Receives each diagnostic (abandoned lifetimes, synchronous fallbacks) as it
  // is recorded. Called with the state lock held: it must not call the manager.
  std::function<void(const std::string&)> diagnostic_sink = nullptr;
  // Receives a tensor-free record of each state-changing public call and its
  // outcome, after the call (observer.hpp); null: nothing is observed.
  OperationObserver operation_observer = nullptr;
};

class ResidencyManager {
 public:
  // Throws std::invalid_argument for a negative budget or trace capacity, a
  // location budgeted twice, or a budgeted CUDA location the runtime does not
  // have.
  explicit ResidencyManager(ManagerOptions options = {});
  ResidencyManager(const ResidencyManager&) = delete;
  ResidencyManager& operator=(const ResidencyManager&) = delete;
  // Leaves lifetimes that outlive the manager object valid; does not close.
  ~ResidencyManager();

  const std::string& manager_id() const noexcept;
  // Monotonic version of placement, ownership and lifetime state.
  std::uint64_t state_version() const;
  // Budgeted, then observed locations in registration order.
  std::vector<ResidencyLocation> locations() const;
  const std::shared_ptr<DeviceRuntime>& runtime() const noexcept;

  // Takes ownership of `value` (MUST_PRESERVE; charge = max(logical, storage)).
  // `at` defaults to where the runtime says the value lives. The caller must
  // not keep using the tensors. Throws ResidencyMaterializationError when the
  // value is not at `at`, ResidencyBudgetError, ResidencyOwnershipError when
  // its storage is already managed.
  ResidencyHandle adopt(ResidentValue value, std::optional<ResidencyLocation> at = std::nullopt,
                        ReplicaMode replica_mode = ReplicaMode::exclusive);

  // Registers a RECONSTRUCTIBLE value loaded lazily from `source` at
  // `source_location`. Nothing is loaded now. Throws std::invalid_argument for
  // a MUST_PRESERVE spec or a null source.
  ResidencyHandle register_source(ResidencyValueSpec spec, std::shared_ptr<ResidencySource> source,
                                  ResidencyLocation source_location = PAGEABLE_HOST);
  ResidencyHandle register_source(ResidencyValueSpec spec, std::function<ResidentValue()> load,
                                  ResidencyLocation source_location = PAGEABLE_HOST);

  // Makes `handle` resident at `at`, keeping other replicas; a no-op when it
  // already is. Reconstructs from the source when no replica exists.
  ResidencyTransitionReport ensure(const ResidencyHandle& handle, const ResidencyLocation& at,
                                   std::optional<c10::Stream> stream = std::nullopt);
  // Same as ensure().
  ResidencyTransitionReport copy(const ResidencyHandle& handle, const ResidencyLocation& to,
                                 std::optional<c10::Stream> stream = std::nullopt);
  // Materializes at `to` and removes the source replica (explicit, or the
  // first of pageable, pinned, CUDA by index other than `to`).
  ResidencyTransitionReport move(const ResidencyHandle& handle, const ResidencyLocation& to,
                                 std::optional<ResidencyLocation> from_location = std::nullopt,
                                 std::optional<c10::Stream> stream = std::nullopt);
  // Removes one unprotected replica; refuses the last MUST_PRESERVE copy.
  ResidencyTransitionReport drop(const ResidencyHandle& handle, const ResidencyLocation& at);
  // Ends the value; its handle stays visible in snapshots as discarded.
  ResidencyTransitionReport discard(const ResidencyHandle& handle);

  // Preflights `actions` as one plan, then executes them in order. Throws
  // ResidencyStaleStateError / ResidencyPlanError before any change, or
  // ResidencyPlanExecutionError (phase execute) with the committed prefix.
  ResidencyPlanReport execute_actions(const std::vector<ResidencyAction>& actions,
                                      const std::string& name = "residency-actions",
                                      const TransferStreams& transfer_streams = {},
                                      std::optional<std::uint64_t> expected_state_version = std::nullopt);

  // Dry run of reclaim, reservations, enter and exit. Changes nothing: no
  // version bump, no reaping, no location registration.
  ResidencyPlanExplanation explain(const ResidencyPlan& plan,
                                   std::optional<std::uint64_t> expected_state_version = std::nullopt) const;

  // A single-use scope for `plan`; nothing runs until ResidencyScope::enter().
  ResidencyScope scope(ResidencyPlan plan, TransferStreams transfer_streams = {},
                       std::optional<std::uint64_t> expected_state_version = std::nullopt);

  // Borrows already-resident values at `at` atomically; never materializes.
  // CUDA locations need a consumer stream on that device. Throws
  // std::invalid_argument for no handles, duplicate handles or a bad stream,
  // ResidencyUnavailableError when a value is not resident at `at`.
  ResidencyLease acquire(const std::vector<ResidencyHandle>& handles, const ResidencyLocation& at,
                         std::optional<c10::Stream> consumer_stream = std::nullopt);
  // Protects resident materializations without exposing them.
  ResidencyHold hold(const std::vector<ResidencyHandle>& handles, const ResidencyLocation& at);
  // Charges `nbytes` of headroom at `location` under `label`.
  ResidencyReservation reserve(const ResidencyLocation& location, std::int64_t nbytes, const std::string& label);

  ResidencySnapshot snapshot() const;
  // Retained transition reports, oldest first, each equal to the one its call
  // (or plan) returned. Kept compactly and rebuilt here, so keeping them costs
  // the calls little; this call builds every report anew. Works after close().
  std::vector<ResidencyTransitionReport> trace() const;
  void clear_trace();
  // Recorded diagnostics, oldest first (bounded).
  std::vector<std::string> diagnostics() const;

  // Releases manager state. wait=true synchronizes pending lease events first.
  // Throws ResidencyInUseError (naming the counts) while leases, holds or
  // reservations remain, unless force=true, which clears them. Idempotent.
  void close(bool wait = true, bool force = false);
  bool closed() const;

 private:
  std::shared_ptr<detail::ManagerCore> core_;
};

}  // namespace fhelium::residency
