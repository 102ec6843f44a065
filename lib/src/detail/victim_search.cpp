#include "detail/victim_search.hpp"

#include <pthread.h>

#include <algorithm>
#include <exception>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <functional>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <variant>

#include "detail/tiered_lru_key.hpp"
#include "fhelium/residency/errors.hpp"

namespace fhelium::residency::detail {

namespace {

// A non-owning reference to a callable, so that the search's continuations
// cost no allocation.
template <class Signature>
class FunctionRef;

template <class Result, class... Args>
class FunctionRef<Result(Args...)> {
 public:
  template <class Callable>
    requires(!std::is_same_v<std::remove_cv_t<Callable>, FunctionRef>)
  FunctionRef(Callable& callable) noexcept  // NOLINT: implicit by design
      : object_(&callable), call_([](void* object, Args... args) -> Result {
          return (*static_cast<Callable*>(object))(std::forward<Args>(args)...);
        }) {}
  Result operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  Result (*call_)(void*, Args...);
};

// One materialization as the planner sees it. A planned copy inherits its
// source's fields (as the reference projects them), except the location.
struct Placement {
  ResidencyLocation location;
  std::int64_t charged_nbytes;
  bool is_protected;
  friend bool operator==(const Placement&, const Placement&) = default;
};
using Placements = std::vector<Placement>;  // sorted by location

const Placement* find(const Placements& placements, const ResidencyLocation& location) {
  for (const auto& placement : placements) {
    if (placement.location == location) return &placement;
  }
  return nullptr;
}

void insert(Placements& placements, Placement placement) {
  const auto at = std::find_if(placements.begin(), placements.end(),
                               [&](const Placement& existing) { return placement.location < existing.location; });
  placements.insert(at, placement);
}

void erase(Placements& placements, const ResidencyLocation& location) {
  placements.erase(std::remove_if(placements.begin(), placements.end(),
                                  [&](const Placement& existing) { return existing.location == location; }),
                   placements.end());
}

bool same_locations(const Placements& left, const Placements& right) {
  return std::equal(left.begin(), left.end(), right.begin(), right.end(),
                    [](const Placement& a, const Placement& b) { return a.location == b.location; });
}

// Bytes per location; absent means zero.
using Bytes = std::map<ResidencyLocation, std::int64_t>;

std::int64_t get(const Bytes& bytes, const ResidencyLocation& location) {
  const auto found = bytes.find(location);
  return found == bytes.end() ? 0 : found->second;
}

void add(Bytes& bytes, const ResidencyLocation& location, std::int64_t delta) {
  const std::int64_t total = get(bytes, location) + delta;
  if (total == 0) {
    bytes.erase(location);
  } else {
    bytes[location] = total;
  }
}

struct ReclaimStep {
  std::size_t value;
  std::optional<ResidencyLocation> move_to;  // absent: a drop
  ResidencyLocation released_location;
  std::int64_t rank;
  std::int64_t released_nbytes;
  std::string reason;
};

// One search state: placements that differ from the snapshot, bytes, and the
// reclaim steps that led here.
struct State {
  std::map<std::size_t, Placements> changed;
  Bytes used;
  Bytes reserved;
  std::vector<ReclaimStep> reclaim;
};

struct Shortfall {
  ResidencyLocation location;
  std::int64_t additional;
  std::string stage;
};

// A failed branch of the search: why, for the final message.
struct BranchFailure {
  std::string message;
};

struct LimitReached {
  std::string message;
};

// Keeps a list of failure reasons readable: the search may explore many
// thousands of states, and each failure names its children's failures.
constexpr std::size_t max_detail_chars = 4000;

std::string bounded_join(const std::vector<std::string>& parts) {
  std::string joined;
  std::size_t shown = 0;
  for (const auto& part : parts) {
    if (joined.size() + part.size() > max_detail_chars && shown > 0) break;
    if (!joined.empty()) joined += "; ";
    joined += part.size() > max_detail_chars ? part.substr(0, max_detail_chars) + "..." : part;
    ++shown;
  }
  if (shown < parts.size()) joined += "; and " + std::to_string(parts.size() - shown) + " more";
  return joined;
}

// Marks a search key open for the lifetime of one search frame.
class Open {
 public:
  Open(std::set<std::vector<std::int64_t>>& keys, const std::vector<std::int64_t>& key)
      : keys_(keys), at_(keys.insert(key).first) {}
  Open(const Open&) = delete;
  Open& operator=(const Open&) = delete;
  ~Open() { keys_.erase(at_); }

 private:
  std::set<std::vector<std::int64_t>>& keys_;
  std::set<std::vector<std::int64_t>>::iterator at_;
};

class Search {
 public:
  explicit Search(const VictimSearchInput& input) : input_(input) {
    const auto& values = input.snapshot.values;
    entries_.reserve(values.size());
    for (std::size_t index = 0; index < values.size(); ++index) {
      const ResidencyValueSnapshot& value = values[index];
      Placements base;
      for (const auto& materialization : value.materializations) {
        insert(base, {materialization.location, materialization.charged_nbytes, materialization.is_protected()});
      }
      if (!value.discarded) {
        for (const auto& placement : base) by_location_[placement.location].push_back(index);
      }
      entries_.push_back({&value, std::move(base), {}, std::nullopt});
    }
    for (const auto& location : input.snapshot.locations) {
      if (location.budget_bytes) budgets_.emplace(location.location, *location.budget_bytes);
      if (location.used_bytes != 0) initial_.used[location.location] = location.used_bytes;
      if (location.reserved_bytes != 0) initial_.reserved[location.location] = location.reserved_bytes;
    }
    // The controller's facts are usually about few handles: walk them.
    for (const auto& [handle, metadata] : input.metadata) {
      if (const auto found = input.index.find(handle); found != input.index.end()) {
        entries_[found->second].metadata = metadata;
      }
    }
    for (const auto& [handle, epoch] : input.last_access_epoch) {
      if (const auto found = input.index.find(handle); found != input.index.end()) {
        entries_[found->second].last_access_epoch = epoch;
      }
    }
    for (const auto& requirement : input.request.requirements) {
      required_.insert({input.index.at(requirement.handle), requirement.location});
    }
    offered_.assign(entries_.size(), 0);
  }

  // First the reference's rules; when they find nothing and met a choice
  // the complete rules make differently, those rules from the start (the
  // explored states of both count against the one limit).
  VictimSearchResult run() {
    std::optional<std::pair<State, std::vector<ResidencyAction>>> found;
    try {
      found = search_request(initial_);
    } catch (const BranchFailure&) {
      if (!diverges_) throw;
      reference_rules_ = false;
      failed_requests_.clear();
      failed_capacities_.clear();
      found = search_request(initial_);
    }
    auto& [state, enter] = *found;
    VictimSearchResult result;
    for (const auto& step : state.reclaim) {
      const ResidencyHandle& handle = entries_[step.value].value->handle;
      ResidencyAction action = step.move_to ? ResidencyAction(MoveResident{handle, *step.move_to, step.released_location})
                                            : ResidencyAction(DropResident{handle, step.released_location});
      result.reclaim.push_back(action);
      result.evictions.emplace_back(std::move(action), step.rank, step.released_location, step.released_nbytes,
                                    step.reason);
    }
    result.enter = std::move(enter);
    result.explored_states = explored_;
    return result;
  }

  std::int64_t explored() const noexcept { return explored_; }

 private:
  using Endpoint = std::pair<std::size_t, ResidencyLocation>;
  using Yield = FunctionRef<bool(const State&)>;

  struct Entry {
    const ResidencyValueSnapshot* value;
    Placements base;
    // The controller's facts, looked up once per decision.
    ResidencyPolicyMetadata metadata;
    std::optional<std::int64_t> last_access_epoch;
  };

  // ---- state access -------------------------------------------------------

  const Placements& placements(const State& state, std::size_t value) const {
    const auto found = state.changed.find(value);
    return found == state.changed.end() ? entries_[value].base : found->second;
  }

  void set_placements(State& state, std::size_t value, Placements placements) const {
    if (placements == entries_[value].base) {
      state.changed.erase(value);
    } else {
      state.changed[value] = std::move(placements);
    }
  }

  const ResidencyHandle& handle(std::size_t value) const { return entries_[value].value->handle; }

  bool fits(const Bytes& used, const Bytes& reserved, const ResidencyLocation& location,
            std::int64_t additional) const {
    const auto budget = budgets_.find(location);
    if (budget == budgets_.end()) return true;
    const __int128 total = static_cast<__int128>(get(used, location)) + get(reserved, location) + additional;
    return total <= budget->second;
  }

  // Counts a canonical state the search explores, once however many
  // questions it asks of it (so a search over N reachable states never needs
  // a limit above N). The questions themselves are bounded too, at
  // `questions_per_state` per allowed state, so the work stays bounded.
  static constexpr std::int64_t questions_per_state = 64;
  void count(const std::string& objective, const std::vector<std::int64_t>& signature) {
    ++questions_;
    if (questions_ / questions_per_state >= input_.state_limit) {
      throw LimitReached{"the search asked " + std::to_string(questions_) + " questions of " +
                         std::to_string(explored_) + " states, its work bound for a state limit of " +
                         std::to_string(input_.state_limit) + ", while " + objective};
    }
    if (seen_states_.count(signature) != 0) return;
    if (explored_ >= input_.state_limit) {
      throw LimitReached{"the search reached its state limit of " + std::to_string(input_.state_limit) +
                         " while " + objective};
    }
    seen_states_.insert(signature);
    ++explored_;
  }

  // Canonical signature: each value whose locations differ from the
  // snapshot, then used and reserved bytes per location.
  std::vector<std::int64_t> signature(const State& state) const {
    std::vector<std::int64_t> key;
    for (const auto& [value, placements] : state.changed) {
      if (same_locations(placements, entries_[value].base)) continue;
      key.push_back(static_cast<std::int64_t>(value));
      key.push_back(static_cast<std::int64_t>(placements.size()));
      for (const auto& placement : placements) key.push_back(placement.location.ordinal());
    }
    key.push_back(-1);
    for (const Bytes* bytes : {&state.used, &state.reserved}) {
      for (const auto& [location, amount] : *bytes) {
        key.push_back(location.ordinal());
        key.push_back(amount);
      }
      key.push_back(-1);
    }
    return key;
  }

  // ---- simulation of the request ------------------------------------------

  // The request's reservations, then each requirement in order, on a copy of
  // `state`: the enter actions, or where it first runs out of room.
  std::variant<std::vector<ResidencyAction>, Shortfall> simulate(const State& state) const {
    Bytes used = state.used;
    Bytes reserved = state.reserved;
    std::map<std::size_t, Placements> touched;
    const auto current = [&](std::size_t value) -> Placements& {
      auto found = touched.find(value);
      if (found == touched.end()) found = touched.emplace(value, placements(state, value)).first;
      return found->second;
    };
    for (const auto& reservation : input_.request.reservations) {
      if (!fits(used, reserved, reservation.location, reservation.nbytes)) {
        return Shortfall{reservation.location, reservation.nbytes, "reservation '" + reservation.label + "'"};
      }
      add(reserved, reservation.location, reservation.nbytes);
    }
    std::vector<ResidencyAction> actions;
    for (const auto& requirement : input_.request.requirements) {
      const std::size_t value = input_.index.at(requirement.handle);
      Placements& resident = current(value);
      const ResidencyLocation& destination = requirement.location;
      if (find(resident, destination) != nullptr) continue;
      const ResidencyValueSnapshot& snapshot = *entries_[value].value;
      const std::int64_t charge = snapshot.spec.storage_nbytes;
      const bool temporary = resident.empty();
      const std::string name = "'" + requirement.handle.handle_id + "'";
      ResidencyLocation source;
      if (temporary) {
        if (!snapshot.source_location) {
          throw ResidencyUnavailableError("value " + name + " (" + snapshot.spec.value_type + ") required at " +
                                          destination.name() +
                                          " has no materialization and no reconstruction source");
        }
        source = *snapshot.source_location;
        if (!fits(used, reserved, source, charge)) {
          return Shortfall{source, charge, "reconstruction of " + name + " at its source location"};
        }
        add(reserved, source, charge);
        // Loading at the destination itself reuses the one charge.
        if (source == destination) add(reserved, source, -charge);
      } else {
        source = resident.front().location;
      }
      if (!fits(used, reserved, destination, charge)) {
        return Shortfall{destination, charge, "materialization of " + name + " at " + destination.name()};
      }
      add(used, destination, charge);
      Placement copy = temporary ? Placement{destination, charge, false} : *find(resident, source);
      copy.location = destination;
      insert(resident, copy);
      if (temporary && source != destination) add(reserved, source, -charge);
      if (snapshot.spec.replica_mode == ReplicaMode::exclusive) {
        actions.push_back(MoveResident{requirement.handle, destination,
                                       temporary ? std::nullopt : std::optional<ResidencyLocation>(source)});
        if (!temporary) {
          erase(resident, source);
          add(used, source, -charge);
        }
      } else {
        actions.push_back(EnsureResident{requirement.handle, destination});
      }
    }
    return actions;
  }

  // ---- victims --------------------------------------------------------------

  // The unprotected materializations at `location` in `state` that the
  // search may release (values in `blocked` are left out: the complete rules
  // would offer them), ordered by `before`: those still where the snapshot
  // had them in the order of `base`, merged with the few the state moved.
  template <class Before>
  std::vector<std::size_t> candidates(const State& state, const ResidencyLocation& location,
                                      const std::set<std::size_t>& blocked, const std::vector<std::size_t>& base,
                                      Before before) {
    std::vector<std::size_t> unchanged, moved;
    unchanged.reserve(base.size());
    for (const std::size_t value : base) {
      if (state.changed.count(value) == 0 && releasable(state, value, location, blocked)) unchanged.push_back(value);
    }
    for (const auto& [value, placements] : state.changed) {
      if (find(placements, location) != nullptr && releasable(state, value, location, blocked)) moved.push_back(value);
    }
    std::sort(moved.begin(), moved.end(), before);
    std::vector<std::size_t> result(unchanged.size() + moved.size());
    std::merge(unchanged.begin(), unchanged.end(), moved.begin(), moved.end(), result.begin(), before);
    return result;
  }

  bool releasable(const State& state, std::size_t value, const ResidencyLocation& location,
                  const std::set<std::size_t>& blocked) {
    const Placement* placement = find(placements(state, value), location);
    if (placement == nullptr || placement->is_protected) return false;
    if (blocked.count(value) != 0) {
      diverges_ = true;  // the complete rules would offer this one
      return false;
    }
    return true;
  }

  ResidencyEvictionCandidate candidate(const State& state, std::size_t value, const ResidencyLocation& location) const {
    return ResidencyEvictionCandidate(handle(value), location, find(placements(state, value), location)->charged_nbytes,
                                      static_cast<std::int64_t>(value), entries_[value].last_access_epoch,
                                      entries_[value].metadata);
  }

  const std::vector<std::size_t>& resident_at(const ResidencyLocation& location) const {
    static const std::vector<std::size_t> none;
    const auto found = by_location_.find(location);
    return found == by_location_.end() ? none : found->second;
  }

  // The victims at `location` in the policy's order, values not required
  // there before required ones. DeterministicTieredLRU's key is a total
  // order fixed for the whole decision, so the order of any set of values is
  // the order of all of them restricted to that set: each location's values
  // are sorted by it once, and the policy is not asked. Any other policy is
  // asked in every state, in registration order.
  std::vector<std::size_t> ordered(const State& state, const ResidencyLocation& location,
                                   const std::set<std::size_t>& blocked) {
    std::vector<std::size_t> all;
    if (builtin_ != nullptr) {
      const auto before = [this](std::size_t a, std::size_t b) { return lru_key(a) < lru_key(b); };
      auto sorted = sorted_by_location_.find(location);
      if (sorted == sorted_by_location_.end()) {
        std::vector<std::size_t> order = resident_at(location);
        std::sort(order.begin(), order.end(), before);
        sorted = sorted_by_location_.emplace(location, std::move(order)).first;
      }
      all = candidates(state, location, blocked, sorted->second, before);
    } else {
      all = candidates(state, location, blocked, resident_at(location), std::less<std::size_t>());
    }
    std::vector<std::size_t> ordinary, required;
    ordinary.reserve(all.size());
    for (const std::size_t value : all) (required_.count({value, location}) != 0 ? required : ordinary).push_back(value);
    if (builtin_ == nullptr) {
      ordinary = ranked(state, location, ordinary);
      required = ranked(state, location, required);
    }
    ordinary.insert(ordinary.end(), required.begin(), required.end());
    return ordinary;
  }

  TieredLruKey lru_key(std::size_t value) const {
    return tiered_lru_key(entries_[value].metadata, entries_[value].last_access_epoch,
                          static_cast<std::int64_t>(value));
  }

  // A policy of the user's own: asked in every state, its answer checked.
  std::vector<std::size_t> ranked(const State& state, const ResidencyLocation& location,
                                  const std::vector<std::size_t>& group) const {
    if (group.empty()) return group;
    std::vector<ResidencyEvictionCandidate> offered;
    offered.reserve(group.size());
    for (const std::size_t value : group) {
      offered.push_back(candidate(state, value, location));
      offered_[value] = 1;
    }
    const std::vector<ResidencyEvictionCandidate> order = input_.policy.order_candidates(std::move(offered));
    // A permutation: each offered candidate once and unchanged, checked
    // against the facts it was built from.
    std::vector<std::size_t> result;
    result.reserve(order.size());
    bool permutation = order.size() == group.size();
    for (std::size_t index = 0; permutation && index < order.size(); ++index) {
      const ResidencyEvictionCandidate& candidate = order[index];
      const std::int64_t registration = candidate.registration_index;
      permutation = registration >= 0 && static_cast<std::size_t>(registration) < offered_.size() &&
                    offered_[static_cast<std::size_t>(registration)] == 1;
      if (!permutation) break;
      const auto value = static_cast<std::size_t>(registration);
      offered_[value] = 2;  // seen once
      const Entry& entry = entries_[value];
      permutation = candidate.location == location && candidate.handle == entry.value->handle &&
                    candidate.last_access_epoch == entry.last_access_epoch && candidate.metadata == entry.metadata;
      result.push_back(value);
    }
    for (const std::size_t value : group) offered_[value] = 0;
    if (!permutation) {
      throw std::logic_error("residency policy '" + input_.policy.name() + "' must return every one of the " +
                             std::to_string(group.size()) +
                             " candidates it was given exactly once and unchanged (it returned " +
                             std::to_string(order.size()) + ", not a permutation of them)");
    }
    return result;
  }

  std::vector<ResidencyLocation> destinations_for(std::size_t value, const ResidencyLocation& source) const {
    std::vector<ResidencyLocation> result;
    for (const auto& [required_value, location] : required_) {  // ordered by location within a value
      if (required_value == value && location != source) result.push_back(location);
    }
    for (const auto& location : input_.policy.fallback_locations(source)) {
      if (std::find(result.begin(), result.end(), location) == result.end()) result.push_back(location);
    }
    return result;
  }

  // Every legal way to free the materialization of `value` at `source`,
  // each offered to `yield` until it returns true (stop: found).
  bool reclaim_states(const State& state, std::size_t value, const ResidencyLocation& source, std::int64_t rank,
                      const std::set<std::size_t>& blocked, const std::set<Endpoint>& active, Yield yield) {
    const Endpoint pair{value, source};
    if (active.count(pair) != 0) return false;
    const ResidencyValueSnapshot& snapshot = *entries_[value].value;
    const std::int64_t charge = snapshot.spec.storage_nbytes;
    const Placements& resident = placements(state, value);
    const Placement* released = find(resident, source);
    if (released == nullptr) return false;
    const std::int64_t released_nbytes = released->charged_nbytes;
    const bool alternatives = std::any_of(resident.begin(), resident.end(),
                                          [&](const Placement& placement) { return placement.location != source; });
    if (alternatives || snapshot.has_source) {
      State trial = state;
      Placements remaining = resident;
      erase(remaining, source);
      set_placements(trial, value, std::move(remaining));
      add(trial.used, source, -charge);
      trial.reclaim.push_back({value, std::nullopt, source, rank, released_nbytes,
                               alternatives ? "another materialization preserves the value"
                                            : "its registered source can reconstruct the value"});
      if (yield(trial)) return true;
    }
    const std::vector<ResidencyLocation> destinations = destinations_for(value, source);
    if (alternatives && reference_rules_) {
      // The reference only drops a replica. The complete rules also move it:
      // its other copies may be released later on the same path (to make
      // room for this very move, say), and then this copy keeps the value.
      for (const auto& destination : destinations) {
        if (find(resident, destination) == nullptr) diverges_ = true;
      }
      return false;
    }
    for (const ResidencyLocation& destination : destinations) {
      if (find(resident, destination) != nullptr) continue;  // no better than the drop above
      const bool requested = required_.count({value, destination}) != 0;
      // The reference keeps every copy of a value being moved out of the
      // nested search; the complete rules only the copy being moved.
      std::set<std::size_t> inner_blocked = blocked;
      if (reference_rules_) inner_blocked.insert(value);
      std::set<Endpoint> inner_active = active;
      inner_active.insert(pair);
      auto place = [&](const State& capacitated) {
        const Placements& now = placements(capacitated, value);
        const Placement* from = find(now, source);
        if (from == nullptr || find(now, destination) != nullptr) return false;
        State trial = capacitated;
        Placements moved = now;
        Placement copy = *from;
        copy.location = destination;
        insert(moved, copy);
        add(trial.used, destination, charge);
        erase(moved, source);
        set_placements(trial, value, std::move(moved));
        add(trial.used, source, -charge);
        trial.reclaim.push_back({value, destination, source, rank, released_nbytes,
                                 "materialization moved to " + destination.name() +
                                     (requested ? ", where the request needs it"
                                                : ", a fallback tier of " + source.name()) +
                                     ", so the value stays resident"});
        return yield(trial);
      };
      if (capacity_states(state, destination, charge, inner_blocked, inner_active, place)) return true;
    }
    return false;
  }

  // States in which `location` can admit `additional` more bytes, reached by
  // reclaiming victims there other than the materializations being moved
  // (`active`) and, under the reference rules, other than any copy of the
  // values being moved (`blocked`).
  bool capacity_states(const State& state, const ResidencyLocation& location, std::int64_t additional,
                       const std::set<std::size_t>& blocked, const std::set<Endpoint>& active, Yield yield) {
    if (fits(state.used, state.reserved, location, additional)) return yield(state);
    const std::vector<std::int64_t> state_signature = signature(state);
    std::vector<std::int64_t> key = state_signature;
    key.push_back(location.ordinal());
    key.push_back(additional);
    key.push_back(-2);
    for (const std::size_t value : blocked) key.push_back(static_cast<std::int64_t>(value));
    key.push_back(-2);
    for (const auto& [value, at] : active) {
      key.push_back(static_cast<std::int64_t>(value));
      key.push_back(at.ordinal());
    }
    if (failed_capacities_.count(key) != 0) return false;
    // The same question already being answered higher up: everything this
    // instance could find, that one finds too.
    if (open_capacities_.count(key) != 0) {
      ++cycles_cut_;
      return false;
    }
    count("making room at " + location.name(), state_signature);
    const std::int64_t cuts_before = cycles_cut_;
    Open open(open_capacities_, key);
    const std::vector<std::size_t> order = ordered(state, location, blocked);
    bool produced = false;
    for (std::size_t rank = 0; rank < order.size(); ++rank) {
      const std::size_t victim = order[rank];
      if (active.count({victim, location}) != 0) continue;
      auto deliver = [&](const State& result) {
        produced = true;
        return yield(result);
      };
      auto deeper = [&](const State& reclaimed) {
        return capacity_states(reclaimed, location, additional, blocked, active, deliver);
      };
      if (reclaim_states(state, victim, location, static_cast<std::int64_t>(rank), blocked, active, deeper)) {
        return true;
      }
    }
    // A failure that relied on cutting a cycle is only a failure while the
    // cut-off ancestor is open, so it is not remembered.
    if (!produced && cycles_cut_ == cuts_before) failed_capacities_.insert(std::move(key));
    return false;
  }

  std::string describe_victim(std::size_t value, const ResidencyLocation& location) const {
    return "victim '" + handle(value).handle_id + "' at " + location.name();
  }

  // The whole request from `state`: the state its reclaim steps reach and the
  // enter actions, or BranchFailure.
  std::pair<State, std::vector<ResidencyAction>> search_request(const State& state) {
    std::vector<std::int64_t> key = signature(state);
    if (failed_requests_.count(key) != 0) throw BranchFailure{"an equivalent state was already exhausted"};
    // Reclaim steps that lead back to a state on the current path (a value
    // moved back and forth between tiers) add nothing: depth-first search
    // with every entered state remembered still finds any reachable plan.
    if (open_requests_.count(key) != 0) throw BranchFailure{"it leads back to a state already being searched"};
    count("deciding the ordered request", key);
    if (depth_ >= max_depth) {
      throw LimitReached{"the search nests more than " + std::to_string(max_depth) +
                         " reclaim steps deep, more than its stack allows"};
    }
    Open open(open_requests_, key);
    ++depth_;
    struct Leave {
      std::int64_t& depth;
      ~Leave() { --depth; }
    } leave{depth_};
    auto simulated = simulate(state);
    if (auto* enter = std::get_if<std::vector<ResidencyAction>>(&simulated)) return {state, std::move(*enter)};
    const Shortfall shortfall = std::get<Shortfall>(std::move(simulated));
    const std::vector<std::size_t> order = ordered(state, shortfall.location, {});
    std::vector<std::string> failures;
    std::optional<std::pair<State, std::vector<ResidencyAction>>> found;
    for (std::size_t rank = 0; rank < order.size(); ++rank) {
      const std::size_t victim = order[rank];
      bool produced = false;
      auto attempt = [&](const State& trial) {
        produced = true;
        try {
          found = search_request(trial);
          return true;
        } catch (const BranchFailure& failure) {
          failures.push_back(describe_victim(victim, shortfall.location) + ": " + failure.message);
          return false;
        }
      };
      reclaim_states(state, victim, shortfall.location, static_cast<std::int64_t>(rank), {}, {}, attempt);
      if (found) return std::move(*found);
      if (!produced) {
        failures.push_back(describe_victim(victim, shortfall.location) + ": no legal drop or fallback transition");
      }
    }
    failed_requests_.insert(std::move(key));
    const auto budget = budgets_.find(shortfall.location);
    std::string message = shortfall.location.name() + " cannot admit " + std::to_string(shortfall.additional) +
                          " bytes for " + shortfall.stage + " (budget_bytes=" +
                          (budget == budgets_.end() ? std::string("none") : std::to_string(budget->second)) +
                          ", used_bytes=" + std::to_string(get(state.used, shortfall.location)) +
                          ", reserved_bytes=" + std::to_string(get(state.reserved, shortfall.location)) +
                          ") and no invariant-valid victim sequence satisfies the complete ordered request";
    if (order.empty()) message += " (no unprotected materialization there)";
    if (!failures.empty()) message += " (" + bounded_join(failures) + ")";
    throw BranchFailure{std::move(message)};
  }

  const VictimSearchInput& input_;
  std::vector<Entry> entries_;
  std::map<ResidencyLocation, std::vector<std::size_t>> by_location_;
  // The built-in policy's order is computed here, not asked of it.
  const DeterministicTieredLRU* builtin_ = dynamic_cast<const DeterministicTieredLRU*>(&input_.policy);
  std::map<ResidencyLocation, std::vector<std::size_t>> sorted_by_location_;
  std::map<ResidencyLocation, std::int64_t> budgets_;
  std::set<Endpoint> required_;
  State initial_;
  std::int64_t explored_ = 0;
  std::set<std::vector<std::int64_t>> failed_requests_;
  std::set<std::vector<std::int64_t>> failed_capacities_;
  // Keys of the searches on the current path.
  std::set<std::vector<std::int64_t>> open_requests_;
  std::set<std::vector<std::int64_t>> open_capacities_;
  std::int64_t cycles_cut_ = 0;
  std::int64_t questions_ = 0;
  // Whole-request searches on the current path; each costs a few stack
  // frames, and the search thread's stack holds this many with room to spare.
  static constexpr std::int64_t max_depth = 150000;
  std::int64_t depth_ = 0;
  std::set<std::vector<std::int64_t>> seen_states_;  // canonical states counted
  // Whether the search follows the reference's rules, and whether it met a
  // choice where the complete rules differ.
  bool reference_rules_ = true;
  bool diverges_ = false;
  // Scratch for checking a policy's order, by registration index: 0 not
  // offered, 1 offered, 2 returned.
  mutable std::vector<std::size_t> offered_;
};

}  // namespace

namespace {

VictimSearchResult search_here(const VictimSearchInput& input) {
  Search search(input);
  try {
    return search.run();
  } catch (const LimitReached& limit) {
    throw ResidencySearchLimitError(input.request.name, input.state_limit, search.explored(), limit.message);
  } catch (const BranchFailure& failure) {
    throw ResidencyPlanError("automatic residency request '" + input.request.name +
                             "' is infeasible: " + failure.message);
  }
}

// The search nests a few frames per victim, so a request that needs many
// thousands of victims would exhaust an ordinary thread's stack. It runs on
// a thread of its own with a large stack (address space reserved, pages used
// only as deep as the search goes); where no such thread can be made, here.
constexpr std::size_t search_stack_bytes = std::size_t{1} << 30;

struct SearchJob {
  const VictimSearchInput* input;
  std::optional<VictimSearchResult> result;
  std::exception_ptr error;
};

void* run_job(void* pointer) {
  auto* job = static_cast<SearchJob*>(pointer);
  try {
    job->result = search_here(*job->input);
  } catch (...) {
    job->error = std::current_exception();
  }
  return nullptr;
}

}  // namespace

VictimSearchResult search_victims(const VictimSearchInput& input) {
  SearchJob job{&input, std::nullopt, nullptr};
  pthread_attr_t attributes;
  bool threaded = pthread_attr_init(&attributes) == 0;
  if (threaded) {
    pthread_t thread;
    threaded = pthread_attr_setstacksize(&attributes, search_stack_bytes) == 0 &&
               pthread_create(&thread, &attributes, run_job, &job) == 0;
    pthread_attr_destroy(&attributes);
    if (threaded) pthread_join(thread, nullptr);
  }
  if (!threaded) run_job(&job);
  if (job.error) std::rethrow_exception(job.error);
  return std::move(*job.result);
}

}  // namespace fhelium::residency::detail
