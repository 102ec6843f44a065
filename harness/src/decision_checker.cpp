#include "fhelium/harness/decision_checker.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <variant>

namespace fhelium::harness {

using namespace residency;

namespace {

std::string value_name(const ResidencyHandle& handle) { return "value '" + handle.handle_id + "'"; }

// describe(action) with the handle id quoted ("drop '3' at cuda:0"), as
// every handle id in a detail is, so a replay can put its names in: the
// action is described with its id already quoted, so the wording stays
// describe()'s own.
std::string quoted(ResidencyAction action) {
  std::visit([](auto& fields) { fields.handle.handle_id = "'" + fields.handle.handle_id + "'"; }, action);
  return describe(action);
}

}  // namespace

std::vector<InvariantViolation> check_decision(const ResidencySnapshot& state, const ResidencyDecision& decision,
                                               bool pending_events_protect) {
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
  for (const auto& value : state.values) {
    values[value.handle.handle_id] = &value;
    for (const auto& materialization : value.materializations) {
      at[value.handle.handle_id].insert(materialization.location);
      const bool is_protected = pending_events_protect ? materialization.is_protected()
                                                       : materialization.use_count + materialization.hold_count > 0;
      if (is_protected) protected_pairs.insert({value.handle.handle_id, materialization.location});
    }
  }
  for (std::size_t index = 0; index < plan.reclaim.size(); ++index) {
    const ResidencyAction& action = plan.reclaim[index];
    const ResidencyHandle& handle = action_handle(action);
    if (index < decision.evictions.size() && !(decision.evictions[index].action == action)) {
      violated("eviction " + std::to_string(index) + " does not describe reclaim action " + quoted(action));
    }
    const auto found = values.find(handle.handle_id);
    if (found == values.end() || !(found->second->handle == handle) || found->second->discarded) {
      violated("reclaim action " + quoted(action) + " names an unknown or discarded value");
      continue;
    }
    const ResidencyValueSnapshot& value = *found->second;
    std::set<ResidencyLocation>& places = at[handle.handle_id];
    ResidencyLocation released;
    if (const auto* drop = std::get_if<DropResident>(&action)) {
      released = drop->location;
    } else if (const auto* move = std::get_if<MoveResident>(&action)) {
      if (!move->from_location) {
        violated("reclaim move " + quoted(action) + " leaves its source implicit");
        continue;
      }
      released = *move->from_location;
    } else {
      violated("reclaim action " + quoted(action) + " is neither a drop nor a move");
      continue;
    }
    if (index < decision.evictions.size() && decision.evictions[index].released_location != released) {
      violated("eviction " + std::to_string(index) + " names released location " +
               decision.evictions[index].released_location.name() + ", its action releases " + released.name());
    }
    if (places.count(released) == 0) {
      violated("reclaim action " + quoted(action) + " releases a materialization that does not exist then");
      continue;
    }
    if (protected_pairs.count({handle.handle_id, released}) != 0) {
      violated("reclaim action " + quoted(action) + " touches a protected materialization of " + value_name(handle) +
               " at " + released.name());
    }
    places.erase(released);
    if (const auto* move = std::get_if<MoveResident>(&action)) {
      if (!places.insert(move->to).second) {
        violated("reclaim move " + quoted(action) + " moves onto an existing materialization");
      }
    } else if (places.empty() && value.spec.recoverability == Recoverability::must_preserve) {
      violated("reclaim action " + quoted(action) + " drops the last copy of must-preserve " + value_name(handle));
    }
  }
  for (const auto& value : state.values) {
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
  // Deciding observes the manager, and observing retires the leases whose
  // events have completed (the replay's own snapshot before the step may
  // have been kept from that by a failing query, or an event may complete
  // in between on a real device). So the one change allowed is such a reap:
  // pending event counts go down, state_version goes up by the number of
  // leases retired, and nothing else moves. Every retired lease covered at
  // least one materialization and took one from each count it covered, so
  // the version moves exactly when some count went down, by no more than all
  // the counts did and no less than any one of them did.
  std::int64_t retired_events = 0, most_at_one = 0;
  const auto pending_went_down = [&](std::int64_t was, std::int64_t is) { return is >= 0 && is <= was; };
  if (before.values.size() != after.values.size()) {
    violated("value count changed from " + std::to_string(before.values.size()) + " to " +
             std::to_string(after.values.size()));
  } else {
    for (std::size_t i = 0; i < before.values.size(); ++i) {
      const ResidencyValueSnapshot& was = before.values[i];
      if (was == after.values[i]) continue;  // the common case: no copy
      ResidencyValueSnapshot is = after.values[i];
      bool reaped_only = was.materializations.size() == is.materializations.size();
      for (std::size_t m = 0; reaped_only && m < is.materializations.size(); ++m) {
        MaterializationSnapshot& item = is.materializations[m];
        const std::int64_t had = was.materializations[m].pending_event_count;
        if (!pending_went_down(had, item.pending_event_count)) {
          reaped_only = false;
          break;
        }
        retired_events += had - item.pending_event_count;
        most_at_one = std::max(most_at_one, had - item.pending_event_count);
        item.pending_event_count = had;
      }
      if (!reaped_only || !(was == is)) violated("value snapshot of " + value_name(was.handle) + " changed");
    }
  }
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
      const bool reaped_only = pending_went_down(was.pending_event_count, is.pending_event_count);
      if (reaped_only) is.pending_event_count = was.pending_event_count;
      if (!reaped_only || was != is) violated("location accounting changed at " + was.location.name());
    }
  }
  if (before.reservations != after.reservations) violated("reservations changed");
  const bool version_moved = after.state_version != before.state_version;
  const bool version_fits_reap = after.state_version > before.state_version && retired_events > 0 &&
                                 after.state_version - before.state_version <= static_cast<std::uint64_t>(retired_events) &&
                                 after.state_version - before.state_version >= static_cast<std::uint64_t>(most_at_one);
  if (version_moved ? !version_fits_reap : retired_events > 0) {
    violated("state_version moved from " + std::to_string(before.state_version) + " to " +
             std::to_string(after.state_version) + " while " + std::to_string(retired_events) +
             " pending events were retired");
  }
  return violations;
}

}  // namespace fhelium::harness
