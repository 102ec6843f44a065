#include "fhelium/residency/errors.hpp"

#include <limits>
#include <memory>
#include <utility>

namespace fhelium::residency {

namespace {

std::string budget_message(const ResidencyLocation& location, std::int64_t budget, std::int64_t used,
                           std::int64_t reserved, std::int64_t requested) {
  return "residency budget exceeded at " + location.name() + ": budget_bytes=" + std::to_string(budget) +
         ", used_bytes=" + std::to_string(used) + ", reserved_bytes=" + std::to_string(reserved) +
         ", requested_bytes=" + std::to_string(requested) +
         ", remaining_bytes=" + std::to_string(budget - used - reserved);
}

std::string execution_message(const std::string& plan_name, PlanPhase phase,
                              const std::optional<ResidencyAction>& action, std::optional<std::int64_t> action_index,
                              const std::optional<MemoryReservation>& reservation,
                              std::optional<std::int64_t> reservation_index, std::size_t committed,
                              const std::string& detail) {
  std::string message = "residency plan '" + plan_name + "' failed in phase " + to_string(phase);
  if (action) message += " at action " + std::to_string(action_index.value_or(-1)) + " (" + describe(*action) + ")";
  if (reservation) {
    message += " at reservation " + std::to_string(reservation_index.value_or(-1)) + " ('" + reservation->label +
               "', " + std::to_string(reservation->nbytes) + " bytes at " + reservation->location.name() + ")";
  }
  message += " after " + std::to_string(committed) + " committed transition(s): " + detail;
  return message;
}

}  // namespace

ResidencyBudgetError::ResidencyBudgetError(ResidencyLocation location, std::int64_t budget_bytes,
                                           std::int64_t used_bytes, std::int64_t reserved_bytes,
                                           std::int64_t requested_bytes)
    : ResidencyBudgetError(budget_message(location, budget_bytes, used_bytes, reserved_bytes, requested_bytes),
                           location, budget_bytes, used_bytes, reserved_bytes, requested_bytes) {}

ResidencyBudgetError ResidencyBudgetError::unrepresentable(ResidencyLocation location, std::int64_t used_bytes,
                                                           std::int64_t reserved_bytes, std::int64_t requested_bytes) {
  constexpr std::int64_t limit = std::numeric_limits<std::int64_t>::max();
  return ResidencyBudgetError("residency charge at " + location.name() +
                                  " would exceed the largest representable byte count (" + std::to_string(limit) +
                                  "): used_bytes=" + std::to_string(used_bytes) +
                                  ", reserved_bytes=" + std::to_string(reserved_bytes) +
                                  ", requested_bytes=" + std::to_string(requested_bytes),
                              location, limit, used_bytes, reserved_bytes, requested_bytes);
}

ResidencyBudgetError::ResidencyBudgetError(std::string message, ResidencyLocation location,
                                           std::int64_t budget_bytes, std::int64_t used_bytes,
                                           std::int64_t reserved_bytes, std::int64_t requested_bytes)
    : ResidencyError(message),
      location_(location),
      budget_bytes_(budget_bytes),
      used_bytes_(used_bytes),
      reserved_bytes_(reserved_bytes),
      requested_bytes_(requested_bytes) {}

ResidencyStaleStateError::ResidencyStaleStateError(std::uint64_t expected_version, std::uint64_t actual_version)
    : ResidencyPlanError("stale residency decision: expected state_version " + std::to_string(expected_version) +
                         ", manager is at " + std::to_string(actual_version)),
      expected_version_(expected_version),
      actual_version_(actual_version) {}

ResidencySearchLimitError::ResidencySearchLimitError(std::string request_name, std::int64_t state_limit,
                                                     std::int64_t explored_states, std::string detail)
    : ResidencyPlanError("automatic residency search for '" + request_name +
                         "' is inconclusive: it stopped at its state limit (state_limit=" +
                         std::to_string(state_limit) + ", explored_states=" + std::to_string(explored_states) +
                         ") before proving the request feasible or not. " + detail),
      request_name_(std::make_shared<const std::string>(std::move(request_name))),
      state_limit_(state_limit),
      explored_states_(explored_states),
      detail_(std::make_shared<const std::string>(std::move(detail))) {}

const char* to_string(PlanPhase phase) noexcept {
  switch (phase) {
    case PlanPhase::execute: return "execute";
    case PlanPhase::reclaim: return "reclaim";
    case PlanPhase::reserve: return "reserve";
    case PlanPhase::enter: return "enter";
    case PlanPhase::exit: return "exit";
  }
  return "unknown";
}

ResidencyPlanExecutionError::ResidencyPlanExecutionError(
    std::string plan_name, PlanPhase phase, ResidencyPlanReport partial_report,
    std::optional<ResidencyAction> failed_action, std::optional<std::int64_t> failed_action_index,
    std::optional<MemoryReservation> failed_reservation, std::optional<std::int64_t> failed_reservation_index,
    std::exception_ptr cause, const std::string& detail)
    : ResidencyError(execution_message(plan_name, phase, failed_action, failed_action_index, failed_reservation,
                                       failed_reservation_index, partial_report.transitions.size(), detail)),
      plan_name_(std::make_shared<const std::string>(std::move(plan_name))),
      phase_(phase),
      partial_report_(std::make_shared<const ResidencyPlanReport>(std::move(partial_report))),
      failed_action_(std::make_shared<const std::optional<ResidencyAction>>(std::move(failed_action))),
      failed_action_index_(failed_action_index),
      failed_reservation_(std::make_shared<const std::optional<MemoryReservation>>(std::move(failed_reservation))),
      failed_reservation_index_(failed_reservation_index),
      cause_(std::move(cause)) {}

}  // namespace fhelium::residency
