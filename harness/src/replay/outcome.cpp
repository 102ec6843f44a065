#include "replay/outcome.hpp"

#include "fhelium/harness/error_kind.hpp"
#include "fhelium/harness/fault_injecting_runtime.hpp"

namespace fhelium::harness::replay_detail {

using namespace residency;

namespace {

bool is_injected(const std::exception& error) {
  if (injected_rule(error)) return true;
  if (const auto* plan = dynamic_cast<const ResidencyPlanExecutionError*>(&error)) {
    try {
      plan->rethrow_cause();
    } catch (const std::exception& cause) {
      return injected_rule(cause).has_value();
    } catch (...) {
    }
  }
  return false;
}

void record_budget(Classified& result, const ResidencyBudgetError& error) {
  result.budget_location = error.location();
  result.budget_bytes = error.budget_bytes();
  result.used_bytes = error.used_bytes();
  result.reserved_bytes = error.reserved_bytes();
  result.requested_bytes = error.requested_bytes();
}

}  // namespace

Classified classify(const std::exception_ptr& error) {
  Classified result;
  result.kind = error_kind(error);
  try {
    std::rethrow_exception(error);
  } catch (const ResidencyPlanExecutionError& e) {
    result.phase = to_string(e.phase());
    result.failed_index = e.failed_action_index() ? e.failed_action_index() : e.failed_reservation_index();
    result.committed = static_cast<std::int64_t>(e.partial_report().transitions.size());
    result.failed_action = e.failed_action();
    if (e.failed_reservation()) result.failed_reservation = e.failed_reservation()->label;
    // A budget error that made the plan fail is reported with its numbers too.
    try {
      e.rethrow_cause();
    } catch (const ResidencyBudgetError& cause) {
      record_budget(result, cause);
    } catch (...) {
    }
  } catch (const ResidencyBudgetError& e) {
    record_budget(result, e);
  } catch (const ResidencyStaleStateError& e) {
    result.stale_expected = e.expected_version();
    result.stale_actual = e.actual_version();
  } catch (...) {
  }
  try {
    std::rethrow_exception(error);
  } catch (const c10::Error& e) {
    result.message = e.what_without_backtrace();
    result.injected = injected_rule(e).has_value();
  } catch (const std::exception& e) {
    result.message = e.what();
    result.injected = is_injected(e);
  } catch (...) {
    result.message = "non-standard exception";
  }
  return result;
}

std::string name_of(const std::optional<ResidencyLocation>& location) {
  return location ? location->name() : std::string("none");
}

}  // namespace fhelium::harness::replay_detail
