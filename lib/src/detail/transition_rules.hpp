// The transition rules, written once: what one action does to one value,
// decided from a view of that value's state. Execution decides through
// decide_transition against the real records, explain against its shadow of
// them, so the two cannot disagree about the source, the no-op, the refusal,
// the reconstruction or what is installed and removed; each then applies the
// decision its own way (copies and charges, or shadow charges and a reason).
//
// A View provides:
//   const ValueRecord& record() const;           // spec and registered source
//   bool resident(const ResidencyLocation&) const;
//   std::size_t count() const;                  // materializations
//   // the smallest resident location other than `exclude`
//   std::optional<ResidencyLocation> first(const std::optional<ResidencyLocation>& exclude) const;
//   bool protected_at(const ResidencyLocation&) const;  // resident and protected
//   std::vector<ResidencyLocation> protected_locations() const;  // in insertion order
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "detail/value_table.hpp"
#include "fhelium/residency/plan.hpp"

namespace fhelium::residency::detail {

enum class Refusal : std::uint8_t {
  none,
  exclusive_replica,       // ensure would give an EXCLUSIVE value a second materialization
  no_source,               // nothing resident and no registered source
  explicit_source_absent,  // a move's explicit source is not resident
  source_protected,        // a move's source is protected
  target_protected,        // a drop's materialization is protected
  final_must_preserve,     // a drop would lose the only copy of a MUST_PRESERVE value
  discard_protected,       // a discarded value is protected somewhere
};

struct TransitionDecision {
  std::optional<ResidencyLocation> source;       // as reported
  std::optional<ResidencyLocation> destination;  // as reported
  const char* no_op = nullptr;                   // the reason, when the action changes nothing
  Refusal refusal = Refusal::none;
  std::optional<ResidencyLocation> refused_at;   // the protected or absent location
  bool load = false;     // reconstruct from the registered source at *source (a temporary charge there)
  bool install = false;  // materialize at *destination from *source
  bool exclusive_transition = false;  // a move: its destination may briefly coexist with its source
  std::optional<ResidencyLocation> remove;  // removed after any install
  bool discard = false;  // every materialization and the source go

  bool changes_nothing() const { return no_op != nullptr; }
  bool refused() const { return refusal != Refusal::none; }
};

// Helpers for views: the smallest location of `items` (read through
// `location_of`) other than `exclude`, and those that `is_protected`, in order.
template <class Range, class LocationOf>
std::optional<ResidencyLocation> smallest_location(const Range& items, const std::optional<ResidencyLocation>& exclude,
                                                   LocationOf location_of) {
  std::optional<ResidencyLocation> best;
  for (const auto& item : items) {
    const ResidencyLocation& location = location_of(item);
    if (exclude && location == *exclude) continue;
    if (!best || location < *best) best = location;
  }
  return best;
}

template <class Range, class LocationOf, class Protected>
std::vector<ResidencyLocation> protected_locations_of(const Range& items, LocationOf location_of,
                                                      Protected is_protected) {
  std::vector<ResidencyLocation> result;
  for (const auto& item : items) {
    if (is_protected(item)) result.push_back(location_of(item));
  }
  return result;
}

// Where `record` is reconstructed from: its registered source's location,
// none without a source.
inline std::optional<ResidencyLocation> registered_source(const ValueRecord& record) {
  return record.source ? record.source_location : std::optional<ResidencyLocation>();
}

// One overload per action type, so that a caller that knows the type (a
// primitive call) pays for no dispatch and runs none of the other types'
// rules; the ResidencyAction overload below picks one.
template <class View>
TransitionDecision decide_transition(const EnsureResident& ensure, const View& value) {
  const ValueRecord& record = value.record();
  TransitionDecision decision;
  decision.destination = ensure.location;
  if (value.resident(ensure.location)) {
    decision.no_op = "destination already resident";
  } else if (record.spec.replica_mode == ReplicaMode::exclusive && value.count() > 0) {
    decision.refusal = Refusal::exclusive_replica;
  } else if (value.count() > 0) {
    decision.source = value.first(std::nullopt);
    decision.install = true;
  } else if (const std::optional<ResidencyLocation> source = registered_source(record)) {
    decision.source = source;
    decision.load = decision.install = true;
  } else {
    decision.refusal = Refusal::no_source;
  }
  return decision;
}

template <class View>
TransitionDecision decide_transition(const MoveResident& move, const View& value) {
  const ValueRecord& record = value.record();
  TransitionDecision decision;
  decision.destination = move.to;
  std::optional<ResidencyLocation> chosen;
  if (move.from_location) {
    if (!value.resident(*move.from_location)) {
      decision.source = move.from_location;
      decision.refusal = Refusal::explicit_source_absent;
      decision.refused_at = move.from_location;
      return decision;
    }
    chosen = move.from_location;
  } else {
    chosen = value.first(move.to);
  }
  decision.source = chosen;
  if (chosen && value.protected_at(*chosen) && !(value.resident(move.to) && *chosen == move.to)) {
    decision.refusal = Refusal::source_protected;
    decision.refused_at = chosen;
    return decision;
  }
  if (value.resident(move.to)) {
    // An explicit source equal to the destination stays reported as the
    // source; an implicit one has none. Onto an existing replica, a move
    // only removes its source.
    if (!chosen || *chosen == move.to) {
      decision.no_op = "destination already owns the selected replica";
    } else {
      decision.remove = chosen;
    }
    return decision;
  }
  if (chosen) {
    decision.install = decision.exclusive_transition = true;
    decision.remove = chosen;
    return decision;
  }
  // Never loaded: reconstruct and keep only the destination.
  decision.source = registered_source(record);
  if (!decision.source) {
    decision.refusal = Refusal::no_source;
    return decision;
  }
  decision.load = decision.install = decision.exclusive_transition = true;
  return decision;
}

template <class View>
TransitionDecision decide_transition(const DropResident& drop, const View& value) {
  TransitionDecision decision;
  decision.source = drop.location;
  if (!value.resident(drop.location)) {
    decision.no_op = "materialization already absent";
  } else if (value.protected_at(drop.location)) {
    decision.refusal = Refusal::target_protected;
    decision.refused_at = drop.location;
  } else if (value.count() == 1 && !value.record().source) {
    decision.refusal = Refusal::final_must_preserve;
    decision.refused_at = drop.location;
  } else {
    decision.remove = drop.location;
  }
  return decision;
}

template <class View>
TransitionDecision decide_transition(const DiscardValue&, const View& value) {
  TransitionDecision decision;
  const std::vector<ResidencyLocation> protected_places = value.protected_locations();
  if (!protected_places.empty()) {
    decision.refusal = Refusal::discard_protected;
    decision.refused_at = protected_places.front();
  } else {
    decision.discard = true;
  }
  return decision;
}

template <class View>
TransitionDecision decide_transition(const ResidencyAction& action, const View& value) {
  return std::visit([&](const auto& typed) { return decide_transition(typed, value); }, action);
}

// The CUDA device whose allocator a report of `action` samples before and
// after it, or none (host actions sample nothing): the action's CUDA
// destination (ensure, move) or dropped location; else, for a move, its
// CUDA explicit source; else, for a move without an explicit source and for
// a discard, the first CUDA location among the value's materializations
// `items` (read through `location_of`) in insertion order, as the state was
// before the action.
template <class Action, class Range, class LocationOf>
std::optional<c10::Device> allocator_device(const Action& action, const Range& items, LocationOf location_of) {
  const auto first_cuda = [&]() -> std::optional<c10::Device> {
    for (const auto& item : items) {
      const ResidencyLocation& location = location_of(item);
      if (location.is_cuda()) return location.device();
    }
    return std::nullopt;
  };
  if constexpr (std::is_same_v<Action, EnsureResident> || std::is_same_v<Action, DropResident>) {
    if (action.location.is_cuda()) return action.location.device();
  } else if constexpr (std::is_same_v<Action, MoveResident>) {
    if (action.to.is_cuda()) return action.to.device();
    if (!action.from_location) return first_cuda();
    if (action.from_location->is_cuda()) return action.from_location->device();
  } else {
    static_assert(std::is_same_v<Action, DiscardValue>);
    return first_cuda();
  }
  return std::nullopt;
}

template <class Range, class LocationOf>
std::optional<c10::Device> allocator_device(const ResidencyAction& action, const Range& items, LocationOf location_of) {
  return std::visit([&](const auto& typed) { return allocator_device(typed, items, location_of); }, action);
}

// The reason explain reports for a refused decision (the reference's words).
std::string refusal_reason(const TransitionDecision& decision, const std::vector<ResidencyLocation>& protected_places);

}  // namespace fhelium::residency::detail
