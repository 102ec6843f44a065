// Exception hierarchy of the residency manager.
//
// Every residency failure derives from ResidencyError (a std::runtime_error).
// Malformed arguments raise std::invalid_argument instead. Runtime failures
// (allocation, copy, source load) reach callers of direct primitives with their
// concrete type unchanged; only plan execution wraps them, in
// ResidencyPlanExecutionError, which keeps the original reachable through
// cause(). Exceptions are immutable values and safe to pass between threads.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "fhelium/residency/plan.hpp"
#include "fhelium/residency/snapshot.hpp"

namespace fhelium::residency {

class ResidencyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A handle that is foreign, unknown or discarded.
class ResidencyHandleError : public ResidencyError {
 public:
  using ResidencyError::ResidencyError;
};

// A value that is not resident where it is needed, with no way to make it so.
class ResidencyUnavailableError : public ResidencyError {
 public:
  using ResidencyError::ResidencyError;
};

// An admission that would exceed a location's strict budget.
class ResidencyBudgetError : public ResidencyError {
 public:
  ResidencyBudgetError(ResidencyLocation location, std::int64_t budget_bytes, std::int64_t used_bytes,
                       std::int64_t reserved_bytes, std::int64_t requested_bytes);
  // A charge that would push used + reserved bytes past the largest
  // representable byte count (INT64_MAX), at a location with or without a
  // budget. budget_bytes() is then INT64_MAX.
  static ResidencyBudgetError unrepresentable(ResidencyLocation location, std::int64_t used_bytes,
                                              std::int64_t reserved_bytes, std::int64_t requested_bytes);
  ResidencyLocation location() const noexcept { return location_; }
  std::int64_t budget_bytes() const noexcept { return budget_bytes_; }
  std::int64_t used_bytes() const noexcept { return used_bytes_; }
  std::int64_t reserved_bytes() const noexcept { return reserved_bytes_; }
  std::int64_t requested_bytes() const noexcept { return requested_bytes_; }

 private:
  ResidencyBudgetError(std::string message, ResidencyLocation location, std::int64_t budget_bytes,
                       std::int64_t used_bytes, std::int64_t reserved_bytes, std::int64_t requested_bytes);
  ResidencyLocation location_;
  std::int64_t budget_bytes_, used_bytes_, reserved_bytes_, requested_bytes_;
};

// A protected materialization (active lease, hold or pending event) that an
// operation would remove.
class ResidencyInUseError : public ResidencyError {
 public:
  using ResidencyError::ResidencyError;
};

// A transition that breaks ownership rules: replicating an EXCLUSIVE value,
// dropping the last MUST_PRESERVE copy, aliased backing storage.
class ResidencyOwnershipError : public ResidencyError {
 public:
  using ResidencyError::ResidencyError;
};

// A materialization whose type, bytes or placement do not match its spec.
class ResidencyMaterializationError : public ResidencyError {
 public:
  using ResidencyError::ResidencyError;
};

// A plan that preflight found infeasible; nothing was changed.
class ResidencyPlanError : public ResidencyError {
 public:
  using ResidencyError::ResidencyError;
};

// The manager's state version differs from the caller's expectation.
class ResidencyStaleStateError : public ResidencyPlanError {
 public:
  ResidencyStaleStateError(std::uint64_t expected_version, std::uint64_t actual_version);
  std::uint64_t expected_version() const noexcept { return expected_version_; }
  std::uint64_t actual_version() const noexcept { return actual_version_; }

 private:
  std::uint64_t expected_version_, actual_version_;
};

// An automatic residency search that stopped at its state limit before it
// could prove the request feasible or infeasible: the answer is inconclusive,
// not "infeasible". Nothing was changed.
class ResidencySearchLimitError : public ResidencyPlanError {
 public:
  ResidencySearchLimitError(std::string request_name, std::int64_t state_limit, std::int64_t explored_states,
                            std::string detail);
  const std::string& request_name() const noexcept { return *request_name_; }
  std::int64_t state_limit() const noexcept { return state_limit_; }
  std::int64_t explored_states() const noexcept { return explored_states_; }
  const std::string& detail() const noexcept { return *detail_; }

 private:
  // Shared so that copying the exception (as throw does) never throws.
  std::shared_ptr<const std::string> request_name_;
  std::int64_t state_limit_, explored_states_;
  std::shared_ptr<const std::string> detail_;
};

enum class PlanPhase { execute, reclaim, reserve, enter, exit };
const char* to_string(PlanPhase phase) noexcept;

// A runtime failure after plan execution began. Transitions before the failure
// stay committed and are listed in partial_report(). Not a ResidencyPlanError.
class ResidencyPlanExecutionError : public ResidencyError {
 public:
  ResidencyPlanExecutionError(std::string plan_name, PlanPhase phase, ResidencyPlanReport partial_report,
                              std::optional<ResidencyAction> failed_action, std::optional<std::int64_t> failed_action_index,
                              std::optional<MemoryReservation> failed_reservation,
                              std::optional<std::int64_t> failed_reservation_index, std::exception_ptr cause,
                              const std::string& detail);
  const std::string& plan_name() const noexcept { return *plan_name_; }
  PlanPhase phase() const noexcept { return phase_; }
  const ResidencyPlanReport& partial_report() const noexcept { return *partial_report_; }
  const std::optional<ResidencyAction>& failed_action() const noexcept { return *failed_action_; }
  std::optional<std::int64_t> failed_action_index() const noexcept { return failed_action_index_; }
  const std::optional<MemoryReservation>& failed_reservation() const noexcept { return *failed_reservation_; }
  std::optional<std::int64_t> failed_reservation_index() const noexcept { return failed_reservation_index_; }
  // The original failure, with its concrete type.
  std::exception_ptr cause() const noexcept { return cause_; }
  [[noreturn]] void rethrow_cause() const { std::rethrow_exception(cause_); }

 private:
  // Shared so that copying the exception (as throw does) never throws.
  std::shared_ptr<const std::string> plan_name_;
  PlanPhase phase_;
  std::shared_ptr<const ResidencyPlanReport> partial_report_;
  std::shared_ptr<const std::optional<ResidencyAction>> failed_action_;
  std::optional<std::int64_t> failed_action_index_;
  std::shared_ptr<const std::optional<MemoryReservation>> failed_reservation_;
  std::optional<std::int64_t> failed_reservation_index_;
  std::exception_ptr cause_;
};

// A public call made while a source's load() runs on this manager.
class ResidencyReentrancyError : public ResidencyError {
 public:
  using ResidencyError::ResidencyError;
};

// Use of a lease, hold or reservation after it was released.
class ResidencyLifetimeClosedError : public ResidencyError {
 public:
  using ResidencyError::ResidencyError;
};

// Use of a manager after close().
class ResidencyClosedError : public ResidencyError {
 public:
  using ResidencyError::ResidencyError;
};

}  // namespace fhelium::residency
