// ResidencyController: automatic residency over one manager.
//
// The controller turns a declarative ResidencyRequest into a manager plan:
// it simulates the request on a tensor-free snapshot, and where a location
// lacks room it searches, depth first with backtracking and memoized failed
// states, for victims the policy ranks (drop a replica, drop the sole copy of
// a source-backed value, or move a sole must-preserve copy to another
// requested location or a fallback tier). The manager stays the only owner of
// materializations and the only executor: decide() changes nothing (it never
// loads a source and never bumps state_version), the resulting decision is
// bound to the manager's state_version, and entering its scope re-checks that
// version before any action. Values stay cached after a use; nothing is
// evicted in the background.
//
// Thread-safety: every method may be called from any thread; decisions and
// metadata updates are serialized by the controller's lock. The manager must
// outlive the controller, and the controller every ResidencyUse it returned.
// A ResidencyUse is move-only; use one from one thread at a time.
#pragma once

#include <c10/core/Stream.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "fhelium/residency/errors.hpp"
#include "fhelium/residency/lease.hpp"
#include "fhelium/residency/manager.hpp"
#include "fhelium/residency/plan.hpp"
#include "fhelium/residency/policy.hpp"
#include "fhelium/residency/request.hpp"
#include "fhelium/residency/scope.hpp"
#include "fhelium/residency/snapshot.hpp"

namespace fhelium::residency {

class ResidentValue;

// Consumer streams of a use: one CUDA stream per required CUDA location.
using ConsumerStreams = std::map<ResidencyLocation, c10::Stream>;

// One reclaim action the controller chose, with the policy evidence for it:
// rank is the victim's position in the policy's order at that step; the
// released location and bytes are what the action frees.
struct ResidencyEviction {
  ResidencyAction action;  // DropResident or MoveResident
  std::int64_t rank;
  ResidencyLocation released_location;
  std::int64_t released_nbytes;
  std::string reason;

  // Throws std::invalid_argument for another action kind, a negative rank or
  // byte count, or an empty reason.
  ResidencyEviction(ResidencyAction action, std::int64_t rank, ResidencyLocation released_location,
                    std::int64_t released_nbytes, std::string reason);
  friend bool operator==(const ResidencyEviction&, const ResidencyEviction&) = default;
};

// The immutable, state-bound result of decide(): valid only for the issuing
// manager at expected_state_version. The plan holds the chosen reclaim
// actions, the request's reservations and the enter actions (no exit
// actions: values stay cached).
struct ResidencyDecision {
  std::string manager_id;
  std::uint64_t expected_state_version;
  std::int64_t explored_states;
  ResidencyRequest request;
  ResidencyPlan plan;
  std::string policy_name;
  ResidencyPolicyConfig policy_config;
  std::vector<ResidencyEviction> evictions;
  ResidencyPlanExplanation explanation;

  // Throws std::invalid_argument for an empty manager id or policy name,
  // explored_states < 1, an empty policy config key, request, plan and
  // explanation names that disagree, or an infeasible explanation.
  ResidencyDecision(std::string manager_id, std::uint64_t expected_state_version, std::int64_t explored_states,
                    ResidencyRequest request, ResidencyPlan plan, std::string policy_name,
                    ResidencyPolicyConfig policy_config, std::vector<ResidencyEviction> evictions,
                    ResidencyPlanExplanation explanation);
};

class ResidencyController;

// One automatic admission: decide, enter the decision's scope, and borrow
// every required value (one lease per location). Single use: enter() once,
// then close(). Values stay cached after close().
class ResidencyUse {
 public:
  ResidencyUse(ResidencyUse&&) noexcept = default;
  ResidencyUse& operator=(ResidencyUse&&) noexcept = default;
  ResidencyUse(const ResidencyUse&) = delete;
  ResidencyUse& operator=(const ResidencyUse&) = delete;
  // An entered, unclosed use abandons its leases and scope (each reports the
  // abandonment through the manager's diagnostics).
  ~ResidencyUse() = default;

  const ResidencyRequest& request() const noexcept { return request_; }

  // Decides, enters the scope and acquires the leases. On failure everything
  // acquired so far is released and the scope closed; decision(), report()
  // and exit_error() stay readable and the exception propagates. Throws
  // std::logic_error when called a second time.
  void enter();
  // Releases the leases, then closes the scope, and returns its report.
  // Idempotent; returns nullopt when entry failed before the scope entered.
  // Throws std::logic_error before enter().
  std::optional<ResidencyPlanReport> close();
  // enter(), body(), close(); close() also runs when the body throws.
  template <class Body>
  std::optional<ResidencyPlanReport> run(Body&& body) {
    enter();
    try {
      std::forward<Body>(body)();
    } catch (...) {
      try {
        close();
      } catch (...) {
      }
      throw;
    }
    return close();
  }

  bool active() const noexcept { return entered_ && !closed_; }
  // The decision entry made. Throws std::logic_error before entry decided.
  const ResidencyDecision& decision() const;
  // The borrowed value for one requirement. Throws std::logic_error before
  // enter(), std::invalid_argument for a pair the request does not contain,
  // ResidencyLifetimeClosedError after close() or a failed entry.
  ResidentValue value(const ResidencyHandle& handle, const ResidencyLocation& at) const;
  ResidentValue value(const ResidencyRequirement& requirement) const;
  // Every borrowed value in requirement order (same errors as value()).
  std::vector<std::pair<ResidencyRequirement, ResidentValue>> values() const;
  // The scope's report once it closed (also after an entry failure that
  // happened after the scope entered).
  std::optional<ResidencyPlanReport> report() const;
  // The scope's exit failure, if its close failed.
  std::optional<ResidencyPlanExecutionError> exit_error() const;

 private:
  friend class ResidencyController;
  ResidencyUse(ResidencyController& controller, ResidencyRequest request, ConsumerStreams consumer_streams,
               TransferStreams transfer_streams);
  void unwind() noexcept;

  ResidencyController* controller_;
  ResidencyRequest request_;
  ConsumerStreams consumer_streams_;
  TransferStreams transfer_streams_;
  std::optional<ResidencyDecision> decision_;
  std::optional<ResidencyScope> scope_;
  std::vector<ResidencyLease> leases_;
  // For requirement i, the index in leases_ of the lease that covers it.
  std::vector<std::size_t> lease_of_requirement_;
  bool entered_ = false;
  bool closed_ = false;
};

class ResidencyController {
 public:
  // `policy` defaults to DeterministicTieredLRU without fallback tiers.
  // Throws std::invalid_argument for a policy with an empty name or a
  // search_state_limit below 1.
  explicit ResidencyController(ResidencyManager& manager, std::shared_ptr<const ResidencyPolicy> policy = nullptr,
                               std::int64_t search_state_limit = 100000);
  ResidencyController(const ResidencyController&) = delete;
  ResidencyController& operator=(const ResidencyController&) = delete;

  ResidencyManager& manager() const noexcept { return *manager_; }
  const ResidencyPolicy& policy() const noexcept { return *policy_; }
  std::int64_t search_state_limit() const noexcept { return search_state_limit_; }

  // Sets eviction hints for a live handle of this manager. Throws
  // ResidencyHandleError for a foreign, unknown or discarded handle, and
  // std::invalid_argument for a stable_key another handle already uses.
  void set_policy_metadata(const ResidencyHandle& handle, std::int64_t priority = 0,
                           std::optional<std::string> stable_key = std::nullopt);
  // Current hints of `handle` (defaults when none were set).
  ResidencyPolicyMetadata policy_metadata(const ResidencyHandle& handle) const;
  // Logical access epoch of `handle`'s last use, if any.
  std::optional<std::int64_t> last_access_epoch(const ResidencyHandle& handle) const;

  // Derives a decision without executing anything or changing manager state.
  // Throws std::invalid_argument for a malformed request or an unavailable
  // location, ResidencyHandleError for a foreign, unknown or discarded
  // handle, ResidencyOwnershipError for an EXCLUSIVE value required at two
  // locations, ResidencyUnavailableError for a value with neither a replica
  // nor a source, ResidencySearchLimitError when the search hits its limit,
  // ResidencyPlanError when no victim sequence makes the request fit, and
  // ResidencyStaleStateError when the manager changed while deciding.
  ResidencyDecision decide(const ResidencyRequest& request);

  // A scope that re-checks the decision's state_version on entry. Throws
  // ResidencyHandleError for another manager's decision and
  // ResidencyPlanError for one issued under another policy configuration.
  ResidencyScope scope(const ResidencyDecision& decision, TransferStreams transfer_streams = {});

  // A use of `request`. consumer_streams must cover exactly the request's
  // CUDA locations, each with a stream on that device (std::invalid_argument
  // otherwise, before anything is decided).
  ResidencyUse use(ResidencyRequest request, ConsumerStreams consumer_streams = {},
                   TransferStreams transfer_streams = {});

 private:
  friend class ResidencyUse;
  void record_accesses(const std::vector<ResidencyHandle>& handles);
  void validate_decision(const ResidencyDecision& decision) const;

  ResidencyManager* manager_;
  std::shared_ptr<const ResidencyPolicy> policy_;
  std::int64_t search_state_limit_;
  mutable std::recursive_mutex mutex_;
  std::unordered_map<ResidencyHandle, ResidencyPolicyMetadata> metadata_;
  std::unordered_map<ResidencyHandle, std::int64_t> last_access_;
  std::int64_t access_epoch_ = 0;
};

}  // namespace fhelium::residency
