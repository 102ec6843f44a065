#include "fhelium/harness/verdict_checker.hpp"

#include <limits>

namespace fhelium::harness {

using namespace residency;

namespace {

const char* kind_name(LifetimeCall::Kind kind) {
  switch (kind) {
    case LifetimeCall::Kind::acquire: return "acquire";
    case LifetimeCall::Kind::hold: return "hold";
    case LifetimeCall::Kind::reserve: return "reserve";
  }
  return "lifetime call";
}

// The verdict `before` implies for an acquire or hold: nullopt (granted),
// "handle" or "unavailable", with the handle that decides it.
std::pair<std::optional<std::string>, std::string> covering_verdict(const ResidencySnapshot& before,
                                                                    const LifetimeCall& call) {
  for (const auto& handle : call.handles) {
    const ResidencyValueSnapshot* value = handle.manager_id == before.manager_id ? before.value(handle) : nullptr;
    if (value == nullptr || value->discarded) {
      return {"handle", "value '" + handle.handle_id + "' is unknown, foreign or discarded"};
    }
    bool resident = false;
    for (const auto& item : value->materializations) resident = resident || item.location == call.location;
    if (!resident) return {"unavailable", "value '" + handle.handle_id + "' is not resident at " + call.location.name()};
  }
  return {std::nullopt, "every value is resident at " + call.location.name()};
}

// The verdict `before` implies for a reservation: nullopt (granted) or "budget".
std::pair<std::optional<std::string>, std::string> reserving_verdict(const ResidencySnapshot& before,
                                                                     const LifetimeCall& call) {
  const std::string bytes = std::to_string(call.bytes) + " bytes";
  for (const auto& location : before.locations) {
    if (location.location != call.location) continue;
    const std::int64_t charged = location.used_bytes + location.reserved_bytes;
    if (location.budget_bytes) {
      const std::int64_t room = *location.budget_bytes - charged;
      const std::string state = std::to_string(room) + " bytes of budget remain at " + call.location.name();
      if (call.bytes > room) return {"budget", state + ", fewer than " + bytes};
      return {std::nullopt, state + ", enough for " + bytes};
    }
    if (call.bytes > std::numeric_limits<std::int64_t>::max() - charged) {
      return {"budget", bytes + " more would take the charge at " + call.location.name() + " past INT64_MAX"};
    }
    break;
  }
  return {std::nullopt, call.location.name() + " has no budget and room for " + bytes};
}

}  // namespace

std::vector<InvariantViolation> check_lifetime_verdict(const ResidencySnapshot& before, const LifetimeCall& call) {
  const bool reserving = call.kind == LifetimeCall::Kind::reserve;
  const auto [expected, why] = reserving ? reserving_verdict(before, call) : covering_verdict(before, call);
  const std::optional<std::string>& actual = call.error_kind;
  const bool judged = !actual || *actual == "budget" || *actual == "handle" || *actual == "unavailable";
  if (!judged || actual == expected) return {};
  const std::string what = std::string(kind_name(call.kind)) + " at " + call.location.name();
  const std::string outcome = actual ? "failed with " + *actual : std::string("was granted");
  const std::string wanted = expected ? "fail with " + *expected : std::string("be granted");
  return {{"lifetime-verdict", what + " " + outcome + ", but the state before it says it should " + wanted + " (" +
                                   why + ")"}};
}

std::vector<InvariantViolation> check_budget_refusal(const ResidencySnapshot& before, const BudgetRefusal& refusal,
                                                     std::optional<std::int64_t> requested) {
  constexpr std::int64_t unbounded = std::numeric_limits<std::int64_t>::max();
  std::int64_t budget = unbounded, used = 0, reserved = 0;
  if (const ResidencyLocationSnapshot* location = before.location(refusal.location)) {
    budget = location->budget_bytes.value_or(unbounded);
    used = location->used_bytes;
    reserved = location->reserved_bytes;
  }
  std::vector<InvariantViolation> violations;
  const auto violated = [&](const std::string& detail) {
    violations.push_back({"budget-refusal", "budget error at " + refusal.location.name() + " " + detail});
  };
  const auto figure = [&](const char* name, std::int64_t reported, std::int64_t actual) {
    if (reported != actual) {
      violated("reports " + std::string(name) + " " + std::to_string(reported) + ", the state before it has " +
               std::to_string(actual));
    }
  };
  figure("budget_bytes", refusal.budget_bytes, budget);
  figure("used_bytes", refusal.used_bytes, used);
  figure("reserved_bytes", refusal.reserved_bytes, reserved);
  if (requested) figure("requested_bytes", refusal.requested_bytes, *requested);
  // used + reserved never exceed the budget, so the room cannot overflow.
  const std::int64_t room = budget - used - reserved;
  if (refusal.requested_bytes <= room) {
    violated("refuses " + std::to_string(refusal.requested_bytes) + " bytes, but " + std::to_string(room) +
             " fit there before it");
  }
  return violations;
}

}  // namespace fhelium::harness
