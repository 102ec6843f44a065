#include "fhelium/harness/decision_checker.hpp"

#include <map>
#include <set>
#include <string>
#include <variant>

namespace fhelium::harness {

using namespace residency;

namespace {

std::string value_name(const ResidencyHandle& handle) { return "value '" + handle.handle_id + "'"; }

}  // namespace

std::vector<InvariantViolation> check_decision(const ResidencySnapshot& before, const ResidencyDecision& decision) {
  std::vector<InvariantViolation> violations;
  const auto violated = [&](const std::string& detail) { violations.push_back({"decision-evictions", detail}); };
  const ResidencyPlan& plan = decision.plan;
  if (decision.evictions.size() != plan.reclaim.size()) {
    violated("decision lists " + std::to_string(decision.evictions.size()) + " evictions for " +
             std::to_string(plan.reclaim.size()) + " reclaim actions");
  }
  if (!plan.exit.empty()) violated("decision plan has exit actions; values must stay cached");
  if (plan.reservations != decision.request.reservations) violated("decision plan changed the request's reservations");
  for (const auto* list : {&plan.reclaim, &plan.enter}) {
    for (const auto& action : *list) {
      if (std::holds_alternative<DiscardValue>(action)) violated("decision plan discards " + value_name(action_handle(action)));
    }
  }
  // Replay the reclaim actions over the snapshot's placements.
  // Keyed by handle id: one snapshot holds one manager's handles.
  std::map<std::string, const ResidencyValueSnapshot*> values;
  std::map<std::string, std::set<ResidencyLocation>> at;
  std::set<std::pair<std::string, ResidencyLocation>> protected_pairs;
  for (const auto& value : before.values) {
    values[value.handle.handle_id] = &value;
    for (const auto& materialization : value.materializations) {
      at[value.handle.handle_id].insert(materialization.location);
      if (materialization.is_protected()) protected_pairs.insert({value.handle.handle_id, materialization.location});
    }
  }
  for (std::size_t index = 0; index < plan.reclaim.size(); ++index) {
    const ResidencyAction& action = plan.reclaim[index];
    const ResidencyHandle& handle = action_handle(action);
    if (index < decision.evictions.size() && !(decision.evictions[index].action == action)) {
      violated("eviction " + std::to_string(index) + " does not describe reclaim action " + describe(action));
    }
    const auto found = values.find(handle.handle_id);
    if (found == values.end() || !(found->second->handle == handle) || found->second->discarded) {
      violated("reclaim action " + describe(action) + " names an unknown or discarded value");
      continue;
    }
    const ResidencyValueSnapshot& value = *found->second;
    std::set<ResidencyLocation>& places = at[handle.handle_id];
    ResidencyLocation released;
    if (const auto* drop = std::get_if<DropResident>(&action)) {
      released = drop->location;
    } else if (const auto* move = std::get_if<MoveResident>(&action)) {
      if (!move->from_location) {
        violated("reclaim move " + describe(action) + " leaves its source implicit");
        continue;
      }
      released = *move->from_location;
    } else {
      violated("reclaim action " + describe(action) + " is neither a drop nor a move");
      continue;
    }
    if (index < decision.evictions.size() && decision.evictions[index].released_location != released) {
      violated("eviction " + std::to_string(index) + " names released location " +
               decision.evictions[index].released_location.name() + ", its action releases " + released.name());
    }
    if (places.count(released) == 0) {
      violated("reclaim action " + describe(action) + " releases a materialization that does not exist then");
      continue;
    }
    if (protected_pairs.count({handle.handle_id, released}) != 0) {
      violated("reclaim action " + describe(action) + " touches a protected materialization of " + value_name(handle) +
               " at " + released.name());
    }
    places.erase(released);
    if (const auto* move = std::get_if<MoveResident>(&action)) {
      if (!places.insert(move->to).second) {
        violated("reclaim move " + describe(action) + " moves onto an existing materialization");
      }
    } else if (places.empty() && value.spec.recoverability == Recoverability::must_preserve) {
      violated("reclaim action " + describe(action) + " drops the last copy of must-preserve " + value_name(handle));
    }
  }
  for (const auto& value : before.values) {
    if (value.discarded || value.spec.recoverability != Recoverability::must_preserve) continue;
    if (!value.materializations.empty() && at[value.handle.handle_id].empty()) {
      violated("must-preserve " + value_name(value.handle) + " has no materialization after the reclaim actions");
    }
  }
  if (!decision.explanation.feasible) violated("decision explanation is infeasible");
  return violations;
}

std::vector<InvariantViolation> check_unchanged(const ResidencySnapshot& before, const ResidencySnapshot& after) {
  std::vector<InvariantViolation> violations;
  const auto violated = [&](const std::string& detail) { violations.push_back({"decide-read-only", detail}); };
  if (before.state_version != after.state_version) {
    violated("state_version moved from " + std::to_string(before.state_version) + " to " +
             std::to_string(after.state_version));
  }
  if (before.values != after.values) violated("value snapshots changed");
  // Allocator figures are telemetry sampled from the runtime by each
  // snapshot (best effort, and a fault may fail the sampling); the manager's
  // own accounting is everything else.
  if (before.locations.size() != after.locations.size()) {
    violated("registered locations changed from " + std::to_string(before.locations.size()) + " to " +
             std::to_string(after.locations.size()));
  } else {
    for (std::size_t i = 0; i < before.locations.size(); ++i) {
      ResidencyLocationSnapshot was = before.locations[i];
      ResidencyLocationSnapshot is = after.locations[i];
      was.allocator_allocated_bytes = is.allocator_allocated_bytes = std::nullopt;
      was.allocator_reserved_bytes = is.allocator_reserved_bytes = std::nullopt;
      if (was != is) violated("location accounting changed at " + was.location.name());
    }
  }
  if (before.reservations != after.reservations) violated("reservations changed");
  return violations;
}

}  // namespace fhelium::harness
