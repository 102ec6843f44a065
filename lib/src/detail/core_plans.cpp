// Plan execution: execute_actions and scope entry/exit. Plans are preflighted
// as a whole, then executed without rollback; a runtime failure becomes a
// ResidencyPlanExecutionError carrying the committed prefix and the cause.
#include <c10/util/Exception.h>

#include <stdexcept>

#include "detail/blank_text.hpp"
#include "detail/check.hpp"
#include "detail/handle_check.hpp"
#include "detail/manager_core.hpp"
#include "fhelium/residency/errors.hpp"

namespace fhelium::residency::detail {

namespace {

void require_plan_name(const std::string& name) {
  if (is_blank(name)) {
    throw std::invalid_argument("residency plan name must be non-empty");
  }
}

void require_valid_actions(const std::vector<ResidencyAction>& actions) {
  for (const auto& action : actions) require_well_formed(action_handle(action));
}

void require_valid_handles(const ResidencyPlan& plan) {
  for (const auto* list : {&plan.reclaim, &plan.enter, &plan.exit}) require_valid_actions(*list);
}

// A plan's reservations. A malformed handle takes precedence over a
// malformed reservation: callers check the handles first (require_valid_plan)
// or when this throws (explain).
void require_valid_reservations(const ResidencyPlan& plan) {
  // MemoryReservation's fields are public and may have changed since it was
  // built: rebuilding one re-applies its own rules (one copy of them).
  for (const auto& reservation : plan.reservations) {
    try {
      MemoryReservation(reservation.location, reservation.nbytes, reservation.label);
    } catch (const std::invalid_argument& error) {
      throw std::invalid_argument("plan '" + plan.name + "': " + error.what());
    }
  }
}

// Argument checks of a whole plan, before the state lock: a malformed plan is
// rejected without reaping, registering or bumping anything.
void require_valid_plan(const ResidencyPlan& plan) {
  require_plan_name(plan.name);
  require_valid_handles(plan);
  require_valid_reservations(plan);
}

std::string current_error_text() {
  try {
    throw;
  } catch (const c10::Error& error) {
    return error.what_without_backtrace();  // the backtrace belongs in logs, not in messages
  } catch (const std::exception& error) {
    return error.what();
  } catch (...) {
    return "non-standard exception";
  }
}

struct FailurePoint {
  PlanPhase phase;
  std::optional<ResidencyAction> action;
  std::optional<std::int64_t> action_index;
  std::optional<MemoryReservation> reservation = std::nullopt;
  std::optional<std::int64_t> reservation_index = std::nullopt;
};

// Must be called inside a catch block: wraps the current exception.
[[noreturn]] void throw_execution_error(const std::string& plan_name, FailurePoint point,
                                        std::vector<ResidencyTransitionReport> transitions, std::int64_t started,
                                        std::int64_t now) {
  const std::exception_ptr cause = std::current_exception();
  const std::string detail = current_error_text();
  throw ResidencyPlanExecutionError(plan_name, point.phase,
                                    ResidencyPlanReport(plan_name, std::move(transitions), started, now),
                                    std::move(point.action), point.action_index, std::move(point.reservation),
                                    point.reservation_index, cause, detail);
}

// The start of the next action of a run whose reports begin at `first` in
// `transitions`: the previous action's completion; none for the run's first.
std::optional<std::int64_t> previous_completion(const std::vector<ResidencyTransitionReport>& transitions,
                                                std::size_t first) {
  if (transitions.size() <= first) return std::nullopt;
  return transitions.back().completed_at_ns;
}

PlanActions whole_plan(const ResidencyPlan& plan) { return PlanActions{{plan.reclaim, plan.enter, plan.exit}}; }

}  // namespace

void ManagerCore::require_expected_version_locked(std::optional<std::uint64_t> expected) const {
  if (expected && *expected != state_version_) throw ResidencyStaleStateError(*expected, state_version_);
}

void ManagerCore::check_streams_locked(const TransferStreams& streams) const {
  for (const auto& [location, stream] : streams) runtime_->check_stream(location, stream);
}

// Explain changes nothing, so its handles need no check before the dry run: a
// handle the dry run resolves is one this manager issued, and every issued
// handle is well formed (its value_type is a validated ResidencyValueSpec's,
// for adopted values too), while one it cannot resolve makes the plan
// infeasible. Only an infeasible plan can hold a malformed handle, then, and
// only then are the handles checked, before the explanation is returned (a
// malformed handle is an argument error, as everywhere). A feasible plan
// saves a pass over it. The argument error still comes before every error
// the call itself raises after its name check (a malformed reservation,
// reentrancy, a closed manager, a stale expected version, and any added
// later): whatever is thrown inside the `try` checks the handles first.
ResidencyPlanExplanation ManagerCore::explain(const ResidencyPlan& plan, std::optional<std::uint64_t> expected) {
  require_plan_name(plan.name);
  std::vector<ResidencyActionExplanation> explanations;
  PlanDryRun::Result run;
  try {
    require_valid_reservations(plan);
    StateAccess access(*this);
    require_open_locked();
    require_expected_version_locked(expected);
    run = dry_run_.run(whole_plan(plan), plan.reservations, plan.reclaim.size(), &explanations);
  } catch (...) {
    require_valid_handles(plan);
    throw;
  }
  if (run.failure) require_valid_handles(plan);
  const bool feasible = !run.failure.has_value();
  return ResidencyPlanExplanation(plan.name, std::move(explanations), plan.reservations, std::move(run.peaks), feasible,
                                  std::move(run.failure));
}

[[gnu::hot]]
ResidencyPlanReport ManagerCore::execute_actions(const std::vector<ResidencyAction>& actions, const std::string& name,
                                                 const TransferStreams& streams,
                                                 std::optional<std::uint64_t> expected) {
  require_plan_name(name);
  require_valid_actions(actions);
  StateAccess access(*this);
  require_open_locked();
  reap_locked();
  const std::int64_t started = clock_locked();
  require_expected_version_locked(expected);
  check_streams_locked(streams);
  const PlanDryRun::Result preflight = dry_run_.run(PlanActions{{actions}}, {}, 0, nullptr);
  if (preflight.failure) {
    throw ResidencyPlanError("residency plan '" + name + "' is infeasible: " + *preflight.failure);
  }
  FHELIUM_CHECK(preflight.steps.size() == actions.size(), "a feasible preflight decides every action");
  std::vector<ResidencyTransitionReport> transitions;
  transitions.reserve(actions.size());
  for (std::size_t index = 0; index < actions.size(); ++index) {
    try {
      // Each action after the first starts when the previous one completed.
      append_run_locked(transitions, actions[index], streams, &preflight.steps[index],
                        previous_completion(transitions, 0));
    } catch (...) {
      throw_execution_error(name, {PlanPhase::execute, actions[index], static_cast<std::int64_t>(index)},
                            std::move(transitions), started, clock_locked());
    }
  }
  return ResidencyPlanReport(name, std::move(transitions), started, clock_locked());
}

ScopeEntry ManagerCore::enter_scope(const ResidencyPlan& plan, const TransferStreams& streams,
                                    std::optional<std::uint64_t> expected) {
  require_valid_plan(plan);
  StateAccess access(*this);
  require_open_locked();
  reap_locked();
  ScopeEntry entry;
  entry.started_at_ns = clock_locked();
  require_expected_version_locked(expected);
  check_streams_locked(streams);
  const PlanActions actions = whole_plan(plan);
  const PlanDryRun::Result preflight = dry_run_.run(actions, plan.reservations, plan.reclaim.size(), nullptr);
  if (preflight.failure) {
    throw ResidencyPlanError("residency plan '" + plan.name + "' is infeasible: " + *preflight.failure);
  }
  FHELIUM_CHECK(preflight.steps.size() == actions.size(), "a feasible preflight decides every action");
  // Admitted reservations are released on every failure path of entry.
  ScopeExit release_reservations([&] {
    for (auto it = entry.reservation_tokens.rbegin(); it != entry.reservation_tokens.rend(); ++it) {
      release_reservation_locked(*it);
    }
  });
  // `first` is the phase's first action in the whole plan (reclaim, enter, exit).
  const auto run_phase = [&](const std::vector<ResidencyAction>& phase_actions, PlanPhase phase, std::size_t first) {
    const std::size_t before = entry.transitions.size();
    for (std::size_t index = 0; index < phase_actions.size(); ++index) {
      try {
        append_run_locked(entry.transitions, phase_actions[index], streams,
                          &preflight.steps[first + index], previous_completion(entry.transitions, before));
      } catch (...) {
        throw_execution_error(plan.name, {phase, phase_actions[index], static_cast<std::int64_t>(index)},
                              entry.transitions, entry.started_at_ns, clock_locked());
      }
    }
  };
  run_phase(plan.reclaim, PlanPhase::reclaim, 0);
  for (std::size_t index = 0; index < plan.reservations.size(); ++index) {
    const MemoryReservation& reservation = plan.reservations[index];
    try {
      entry.reservation_tokens.push_back(reserve_locked(reservation.location, reservation.nbytes, reservation.label));
    } catch (...) {
      throw_execution_error(plan.name,
                            {PlanPhase::reserve, std::nullopt, std::nullopt, reservation,
                             static_cast<std::int64_t>(index)},
                            entry.transitions, entry.started_at_ns, clock_locked());
    }
  }
  run_phase(plan.enter, PlanPhase::enter, plan.reclaim.size());
  release_reservations.dismiss();
  return entry;
}

ResidencyPlanReport ManagerCore::exit_scope(const ResidencyPlan& plan, const TransferStreams& streams,
                                            const std::vector<std::uint64_t>& reservation_tokens,
                                            std::vector<ResidencyTransitionReport> transitions,
                                            std::int64_t started_at_ns) {
  StateAccess access(*this);
  ScopeExit release_reservations([&] {
    for (auto it = reservation_tokens.rbegin(); it != reservation_tokens.rend(); ++it) release_reservation_locked(*it);
  });
  require_open_locked();
  reap_locked();  // the reference reaps at the start of every scope exit
  const std::size_t before = transitions.size();
  for (std::size_t index = 0; index < plan.exit.size(); ++index) {
    try {
      append_run_locked(transitions, plan.exit[index], streams, nullptr,
                        previous_completion(transitions, before));
    } catch (...) {
      throw_execution_error(plan.name, {PlanPhase::exit, plan.exit[index], static_cast<std::int64_t>(index)},
                            std::move(transitions), started_at_ns, clock_locked());
    }
  }
  return ResidencyPlanReport(plan.name, std::move(transitions), started_at_ns, clock_locked());
}

void ManagerCore::abandon_scope(const std::vector<std::uint64_t>& reservation_tokens,
                                const std::string& plan_name) noexcept {
  try {
    StateAccess access(*this);
    if (closed_) return;  // close() cleared the reservations and reported it
    for (auto it = reservation_tokens.rbegin(); it != reservation_tokens.rend(); ++it) release_reservation_locked(*it);
    diagnose_locked("an active scope for plan '" + plan_name +
                    "' was abandoned; its reservations were released and its exit actions were not run");
  } catch (...) {
  }
}

}  // namespace fhelium::residency::detail
