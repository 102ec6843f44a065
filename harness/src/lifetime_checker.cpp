#include "fhelium/harness/lifetime_checker.hpp"

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

}  // namespace fhelium::harness
