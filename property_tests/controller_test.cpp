// Controller properties on small random states and requests:
//  - decide() succeeds exactly when a deliberately naive exhaustive search
//    over the same legal moves (drop a replica, drop a source-backed sole copy,
//    move a copy to one of its value's requested locations or a fallback tier
//    of its location)
//    finds a state in which the request fits;
//  - the controller explores no more states than the naive search's whole
//    reachable state space, so a state limit of that size always suffices;
//  - decide() never changes the manager, repeats itself exactly, and its plan
//    runs: afterwards every requirement is resident, every reservation held,
//    and no protected materialization was touched.
// The naive search and its admission rules are written here from the
// documented rules, independently of the controller's search.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <deque>
#include <iostream>
#include <map>
#include <set>
#include <tuple>

#include <ATen/ops/arange.h>

#include "fhelium/harness/simulated_runtime.hpp"
#include "fhelium/residency.hpp"

namespace fhelium::residency {
namespace {

constexpr std::int64_t unit_bytes = 64;  // one unit = 16 float32 elements

const std::vector<ResidencyLocation>& places() {
  static const std::vector<ResidencyLocation> all{PAGEABLE_HOST, PINNED_HOST, cuda_location(0)};
  return all;
}

ResidentValue blob(std::int64_t units, float seed) {
  at::Tensor data = at::arange(units * 16, at::TensorOptions().dtype(at::kFloat)).add_(seed);
  return ResidentValue("Blob", {{"data", data}});
}

// ---- the naive model --------------------------------------------------------

struct NaiveValue {
  std::int64_t charge;
  bool exclusive;
  std::optional<ResidencyLocation> source;
};

struct NaiveState {
  std::vector<std::set<ResidencyLocation>> at;  // per value
  std::map<ResidencyLocation, std::int64_t> used;
  auto key() const { return std::make_pair(at, used); }
};

struct NaiveWorld {
  std::vector<NaiveValue> values;
  std::map<ResidencyLocation, std::int64_t> budget;
  std::map<ResidencyLocation, std::int64_t> reserved;
  std::set<std::pair<std::size_t, ResidencyLocation>> protected_pairs;
  std::vector<std::pair<std::size_t, ResidencyLocation>> requirements;
  std::vector<MemoryReservation> reservations;
  std::map<ResidencyLocation, std::vector<ResidencyLocation>> fallback;

  bool fits(const std::map<ResidencyLocation, std::int64_t>& used, const std::map<ResidencyLocation, std::int64_t>& held,
            const ResidencyLocation& location, std::int64_t more) const {
    const auto limit = budget.find(location);
    if (limit == budget.end()) return true;
    const auto get = [&](const auto& map) {
      const auto found = map.find(location);
      return found == map.end() ? std::int64_t{0} : found->second;
    };
    return get(used) + get(held) + more <= limit->second;
  }

  // The request admitted on top of `state`: reservations, then each
  // requirement in order with the manager's admission rules.
  bool request_fits(NaiveState state) const {
    auto held = reserved;
    for (const auto& reservation : reservations) {
      if (!fits(state.used, held, reservation.location, reservation.nbytes)) return false;
      held[reservation.location] += reservation.nbytes;
    }
    for (const auto& [value, destination] : requirements) {
      auto& at = state.at[value];
      if (at.count(destination) != 0) continue;
      const NaiveValue& spec = values[value];
      if (at.empty()) {
        if (!spec.source) return false;
        // A load charges its source location until the copy lands; loading at
        // the destination itself needs the one charge only.
        if (*spec.source != destination) {
          if (!fits(state.used, held, *spec.source, spec.charge)) return false;
          held[*spec.source] += spec.charge;
          const bool ok = fits(state.used, held, destination, spec.charge);
          held[*spec.source] -= spec.charge;
          if (!ok) return false;
        } else if (!fits(state.used, held, destination, spec.charge)) {
          return false;
        }
        state.used[destination] += spec.charge;
        at.insert(destination);
        continue;
      }
      const ResidencyLocation source = *at.begin();  // pageable, pinned, then CUDA
      // A move leaves its source, which no reader may still be using.
      if (spec.exclusive && protected_pairs.count({value, source}) != 0) return false;
      if (!fits(state.used, held, destination, spec.charge)) return false;
      state.used[destination] += spec.charge;
      at.insert(destination);
      if (spec.exclusive) {
        at.erase(source);
        state.used[source] -= spec.charge;
      }
    }
    return true;
  }

  std::string describe(const NaiveState& state) const {
    std::string text;
    for (std::size_t value = 0; value < values.size(); ++value) {
      text += "value " + std::to_string(value) + " (" + std::to_string(values[value].charge) + " B, " +
              (values[value].exclusive ? "exclusive" : "replicable") +
              (values[value].source ? ", source at " + values[value].source->name() : std::string()) + ") at";
      for (const auto& location : state.at[value]) {
        text += " " + location.name() + (protected_pairs.count({value, location}) ? "(protected)" : "");
      }
      text += "\n";
    }
    for (const auto& [location, limit] : budget) text += "budget " + location.name() + " " + std::to_string(limit) + "\n";
    for (const auto& [location, bytes] : reserved) {
      text += "standing reservation " + location.name() + " " + std::to_string(bytes) + "\n";
    }
    for (const auto& [source, destinations] : fallback) {
      text += "tier " + source.name() + " ->";
      for (const auto& destination : destinations) text += " " + destination.name();
      text += "\n";
    }
    for (const auto& [value, at] : requirements) text += "require " + std::to_string(value) + " at " + at.name() + "\n";
    for (const auto& reservation : reservations) {
      text += "reserve " + std::to_string(reservation.nbytes) + " at " + reservation.location.name() + "\n";
    }
    return text;
  }

  std::vector<NaiveState> moves(const NaiveState& state) const {
    std::vector<NaiveState> next;
    for (std::size_t value = 0; value < values.size(); ++value) {
      for (const ResidencyLocation& location : state.at[value]) {
        if (protected_pairs.count({value, location}) != 0) continue;
        const NaiveValue& spec = values[value];
        const bool sole = state.at[value].size() == 1;
        if (!sole || spec.source) {
          NaiveState dropped = state;
          dropped.at[value].erase(location);
          dropped.used[location] -= spec.charge;
          next.push_back(std::move(dropped));
        }
        std::set<ResidencyLocation> destinations;
        for (const auto& [required, at] : requirements) {
          if (required == value && at != location) destinations.insert(at);
        }
        if (const auto tiers = fallback.find(location); tiers != fallback.end()) {
          destinations.insert(tiers->second.begin(), tiers->second.end());
        }
        for (const ResidencyLocation& destination : destinations) {
          if (state.at[value].count(destination) != 0) continue;
          if (!fits(state.used, reserved, destination, spec.charge)) continue;
          NaiveState moved = state;
          moved.at[value].erase(location);
          moved.at[value].insert(destination);
          moved.used[destination] += spec.charge;
          moved.used[location] -= spec.charge;
          next.push_back(std::move(moved));
        }
      }
    }
    return next;
  }

  // Breadth-first over every reachable state: whether one admits the
  // request, and how many states exist.
  std::pair<bool, std::int64_t> search(const NaiveState& start) const {
    std::set<decltype(start.key())> seen{start.key()};
    std::deque<NaiveState> queue{start};
    bool found = false;
    while (!queue.empty()) {
      NaiveState state = std::move(queue.front());
      queue.pop_front();
      if (request_fits(state)) found = true;
      for (auto& next : moves(state)) {
        for (auto it = next.used.begin(); it != next.used.end();) it = it->second == 0 ? next.used.erase(it) : ++it;
        if (seen.insert(next.key()).second) queue.push_back(std::move(next));
      }
    }
    return {found, static_cast<std::int64_t>(seen.size())};
  }
};

// The built-in policy behind an interface the controller cannot recognise,
// so every state's candidates are offered to order_candidates(): decisions
// must equal the ones the controller makes with its shortcut for the
// built-in order (each location sorted once per decision).
class AskedEveryTime final : public ResidencyPolicy {
 public:
  explicit AskedEveryTime(ResidencyFallbackTiers tiers) : inner_(std::move(tiers)) {}
  std::string name() const override { return inner_.name(); }
  ResidencyPolicyConfig config_identity() const override { return inner_.config_identity(); }
  std::vector<ResidencyLocation> fallback_locations(const ResidencyLocation& location) const override {
    return inner_.fallback_locations(location);
  }
  std::vector<ResidencyEvictionCandidate> order_candidates(
      std::vector<ResidencyEvictionCandidate> candidates) const override {
    ++calls;
    return inner_.order_candidates(std::move(candidates));
  }
  mutable std::int64_t calls = 0;

 private:
  DeterministicTieredLRU inner_;
};

// ---- generated worlds -------------------------------------------------------

struct Setup {
  std::shared_ptr<harness::SimulatedRuntime> runtime = std::make_shared<harness::SimulatedRuntime>();
  std::unique_ptr<ResidencyManager> manager;
  std::vector<ResidencyHandle> handles;
  std::vector<ResidencyHold> holds;
  std::vector<ResidencyReservation> reservations;
  NaiveWorld world;
  ResidencyFallbackTiers tiers;
};

template <class F>
void ignore_refusals(F&& call) {
  try {
    call();
  } catch (const ResidencyError&) {
  }
}

std::unique_ptr<Setup> generate_setup() {
  auto setup = std::make_unique<Setup>();
  ManagerOptions options;
  options.runtime = setup->runtime;
  for (const auto& location : places()) {
    if (*rc::gen::weightedElement<bool>({{3, true}, {1, false}})) {
      const auto units = *rc::gen::weightedElement<std::int64_t>({{2, 1}, {4, 2}, {3, 3}, {1, 4}});
      options.budgets.emplace_back(location, units * unit_bytes);
    }
  }
  setup->manager = std::make_unique<ResidencyManager>(std::move(options));
  ResidencyManager& manager = *setup->manager;
  const auto count = *rc::gen::inRange<int>(2, 7);
  for (int index = 0; index < count; ++index) {
    const auto units = *rc::gen::inRange<std::int64_t>(1, 3);
    const bool replicable = *rc::gen::arbitrary<bool>();
    const bool source_backed = *rc::gen::weightedElement<bool>({{2, false}, {1, true}});
    const ResidencyLocation home = *rc::gen::elementOf(places());
    const auto mode = replicable ? ReplicaMode::replicable : ReplicaMode::exclusive;
    if (source_backed) {
      auto runtime = setup->runtime;
      const float seed = static_cast<float>(index);
      setup->handles.push_back(manager.register_source(
          ResidencyValueSpec("Blob", units * unit_bytes, units * unit_bytes, mode, Recoverability::reconstructible),
          [runtime, units, seed, home] { return runtime->copy_to(blob(units, seed), home, std::nullopt); }, home));
      continue;
    }
    try {
      setup->handles.push_back(
          manager.adopt(setup->runtime->copy_to(blob(units, static_cast<float>(index)), home, std::nullopt), home, mode));
    } catch (const ResidencyBudgetError&) {
      // Did not fit its home: this value is left out.
    }
  }
  RC_PRE(!setup->handles.empty());
  const auto handle_gen = rc::gen::elementOf(setup->handles);
  const auto ensures = *rc::gen::inRange<int>(2, 14);
  for (int index = 0; index < ensures; ++index) {
    const ResidencyHandle handle = *handle_gen;
    const ResidencyLocation to = *rc::gen::elementOf(places());
    if (*rc::gen::arbitrary<bool>()) {
      ignore_refusals([&] { manager.ensure(handle, to); });
    } else {
      ignore_refusals([&] { manager.move(handle, to); });
    }
  }
  const auto holds = *rc::gen::inRange<int>(0, 3);
  for (int index = 0; index < holds; ++index) {
    const ResidencyHandle handle = *handle_gen;
    const ResidencyLocation at = *rc::gen::elementOf(places());
    ignore_refusals([&] { setup->holds.push_back(manager.hold({handle}, at)); });
  }
  if (*rc::gen::weightedElement<bool>({{3, false}, {1, true}})) {
    const ResidencyLocation at = *rc::gen::elementOf(places());
    ignore_refusals([&] { setup->reservations.push_back(manager.reserve(at, unit_bytes, "standing")); });
  }
  for (const auto& location : places()) {
    if (*rc::gen::arbitrary<bool>()) {
      std::vector<ResidencyLocation> others;
      for (const auto& other : places()) {
        if (other != location && *rc::gen::arbitrary<bool>()) others.push_back(other);
      }
      if (!others.empty() && *rc::gen::arbitrary<bool>()) std::reverse(others.begin(), others.end());
      setup->tiers.emplace_back(location, others);
    }
  }
  return setup;
}

// The naive world read from the manager's own snapshot.
NaiveState observe(Setup& setup) {
  const ResidencySnapshot snapshot = setup.manager->snapshot();
  NaiveWorld& world = setup.world;
  NaiveState state;
  for (const auto& handle : setup.handles) {
    const ResidencyValueSnapshot& value = *snapshot.value(handle);
    std::set<ResidencyLocation> at;
    for (const auto& materialization : value.materializations) {
      at.insert(materialization.location);
      if (materialization.is_protected()) world.protected_pairs.insert({world.values.size(), materialization.location});
    }
    world.values.push_back({value.spec.storage_nbytes, value.spec.replica_mode == ReplicaMode::exclusive,
                            value.source_location});
    state.at.push_back(std::move(at));
  }
  for (const auto& location : snapshot.locations) {
    if (location.budget_bytes) world.budget[location.location] = *location.budget_bytes;
    if (location.used_bytes != 0) state.used[location.location] = location.used_bytes;
    if (location.reserved_bytes != 0) world.reserved[location.location] = location.reserved_bytes;
  }
  for (const auto& [source, destinations] : setup.tiers) world.fallback[source] = destinations;
  return state;
}

struct Stats {
  std::int64_t cases = 0, feasible = 0, with_evictions = 0, with_moves = 0;
  double worst_ratio = 0;
  ~Stats() {
    if (cases > 0) {
      std::cout << "controller cases: " << cases << ", feasible " << feasible << ", with evictions "
                << with_evictions << ", with moves " << with_moves
                << ", worst explored/naive-states ratio " << worst_ratio << "\n";
    }
  }
};
Stats stats;

RC_GTEST_PROP(Controller, DecideSucceedsExactlyWhenANaiveExhaustiveSearchFindsAPlan, ()) {
  std::unique_ptr<Setup> setup = generate_setup();
  ResidencyManager& manager = *setup->manager;
  const NaiveState start = observe(*setup);
  NaiveWorld& world = setup->world;

  std::vector<ResidencyRequirement> requirements;
  const auto wanted = *rc::gen::inRange<int>(1, 4);
  for (int index = 0; index < wanted; ++index) {
    const auto value = *rc::gen::inRange<std::size_t>(0, setup->handles.size());
    // Mostly where the value is absent and room is limited, so victims are needed.
    std::vector<ResidencyLocation> pressured;
    for (const auto& location : places()) {
      if (start.at[value].count(location) == 0 && world.budget.count(location) != 0) pressured.push_back(location);
    }
    const bool pressure = !pressured.empty() && *rc::gen::weightedElement<bool>({{3, true}, {1, false}});
    const ResidencyRequirement requirement{setup->handles[value],
                                           pressure ? *rc::gen::elementOf(pressured) : *rc::gen::elementOf(places())};
    if (std::find(requirements.begin(), requirements.end(), requirement) != requirements.end()) continue;
    requirements.push_back(requirement);
    world.requirements.emplace_back(value, requirement.location);
  }
  std::vector<MemoryReservation> reservations;
  if (*rc::gen::weightedElement<bool>({{2, false}, {1, true}})) {
    reservations.emplace_back(*rc::gen::elementOf(places()), *rc::gen::inRange<std::int64_t>(0, 3) * unit_bytes,
                              "workspace");
  }
  world.reservations = reservations;
  const ResidencyRequest request("generated", requirements, reservations);

  bool exclusive_twice = false;
  for (const auto& requirement : world.requirements) {
    const auto& value = requirement.first;  // a named reference: the lambda below captures it
    const auto count = std::count_if(world.requirements.begin(), world.requirements.end(),
                                     [&](const auto& other) { return other.first == value; });
    exclusive_twice = exclusive_twice || (count > 1 && world.values[value].exclusive);
  }

  auto policy = std::make_shared<const DeterministicTieredLRU>(setup->tiers);
  ResidencyController controller(manager, policy);
  auto asked = std::make_shared<AskedEveryTime>(setup->tiers);
  ResidencyController asking(manager, asked);
  // Priorities and stable keys that reorder victims, the same for every
  // controller here (keys descend as registration ascends, against it).
  std::vector<std::tuple<ResidencyHandle, std::int64_t, std::optional<std::string>>> hints;
  for (std::size_t index = 0; index < setup->handles.size(); ++index) {
    if (!*rc::gen::arbitrary<bool>()) continue;
    const auto priority = *rc::gen::inRange<std::int64_t>(-1, 2);
    std::optional<std::string> key;
    if (*rc::gen::arbitrary<bool>()) key = "key-" + std::to_string(9 - index);
    hints.emplace_back(setup->handles[index], priority, key);
  }
  const auto hint = [&](ResidencyController& target) {
    for (const auto& [handle, priority, key] : hints) target.set_policy_metadata(handle, priority, key);
  };
  hint(controller);
  hint(asking);
  const std::uint64_t version = manager.state_version();
  if (exclusive_twice) {
    RC_ASSERT_THROWS_AS(controller.decide(request), ResidencyOwnershipError);
    RC_ASSERT(manager.state_version() == version);
    return;
  }
  const auto [naive_feasible, naive_states] = world.search(start);
  std::optional<ResidencyDecision> decision;
  try {
    decision.emplace(controller.decide(request));
  } catch (const ResidencySearchLimitError& error) {
    RC_FAIL(std::string("search limit reached on a tiny state: ") + error.what());
  } catch (const ResidencyPlanError& error) {
    RC_ASSERT(manager.state_version() == version);
    if (naive_feasible) {
      RC_FAIL(std::string("controller refused a request the naive search admits: ") + error.what() + "\n" +
              world.describe(start));
    }
  }
  RC_ASSERT(manager.state_version() == version);
  RC_ASSERT(decision.has_value() == naive_feasible);
  try {
    const ResidencyDecision other = asking.decide(request);
    RC_ASSERT(decision.has_value());
    RC_ASSERT(other.plan.reclaim == decision->plan.reclaim);
    RC_ASSERT(other.plan.enter == decision->plan.enter);
    RC_ASSERT(other.evictions == decision->evictions);
    RC_ASSERT(other.explored_states == decision->explored_states);
    if (!decision->evictions.empty()) RC_ASSERT(asked->calls > 0);
  } catch (const ResidencyPlanError&) {
    RC_ASSERT(!decision.has_value());
  }
  ++stats.cases;
  if (!decision) return;
  ++stats.feasible;

  const double ratio = static_cast<double>(decision->explored_states) / static_cast<double>(naive_states);
  stats.worst_ratio = std::max(stats.worst_ratio, ratio);
  // Each explored state is a reachable canonical state, counted once: never
  // more than the naive search's, so a limit the naive search fits in suffices.
  RC_ASSERT(decision->explored_states <= naive_states);
  ResidencyController tight(manager, policy, naive_states);
  hint(tight);
  const ResidencyDecision bounded = tight.decide(request);
  RC_ASSERT(bounded.plan.reclaim == decision->plan.reclaim);
  RC_ASSERT(decision->explanation.feasible);
  RC_ASSERT(decision->evictions.size() == decision->plan.reclaim.size());
  if (!decision->evictions.empty()) ++stats.with_evictions;
  for (std::size_t index = 0; index < decision->evictions.size(); ++index) {
    const ResidencyEviction& eviction = decision->evictions[index];
    RC_ASSERT(eviction.action == decision->plan.reclaim[index]);
    RC_ASSERT(!std::holds_alternative<DiscardValue>(eviction.action));
    if (std::holds_alternative<MoveResident>(eviction.action)) ++stats.with_moves;
    const auto value = static_cast<std::size_t>(
        std::find(setup->handles.begin(), setup->handles.end(), action_handle(eviction.action)) -
        setup->handles.begin());
    RC_ASSERT(world.protected_pairs.count({value, eviction.released_location}) == 0);
  }

  const ResidencyDecision again = controller.decide(request);
  RC_ASSERT(again.plan.reclaim == decision->plan.reclaim);
  RC_ASSERT(again.plan.enter == decision->plan.enter);
  RC_ASSERT(again.evictions == decision->evictions);
  RC_ASSERT(again.explored_states == decision->explored_states);

  ResidencyScope scope = controller.scope(*decision);
  scope.enter();
  const ResidencySnapshot inside = manager.snapshot();
  for (const auto& requirement : request.requirements) {
    RC_ASSERT(inside.value(requirement.handle)->at(requirement.location) != nullptr);
  }
  for (const auto& reservation : reservations) {
    const bool held = std::any_of(inside.reservations.begin(), inside.reservations.end(), [&](const auto& item) {
      return item.location == reservation.location && item.nbytes == reservation.nbytes && item.label == "workspace";
    });
    RC_ASSERT(held);
  }
  for (const auto& location : inside.locations) {
    const auto peak = decision->explanation.predicted_peak(location.location);
    if (peak) RC_ASSERT(location.used_bytes + location.reserved_bytes <= *peak);
  }
  for (const auto& [value, at] : world.protected_pairs) {
    RC_ASSERT(inside.value(setup->handles[value])->at(at) != nullptr);
  }
  scope.close();
}

}  // namespace
}  // namespace fhelium::residency
