// PlanDryRun: a plan decided against a shadow of the state (dry_run.hpp).
#include "detail/dry_run.hpp"

#include <algorithm>
#include <stdexcept>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "detail/record_assembly.hpp"
#include "detail/transition_rules.hpp"
#include "fhelium/residency/errors.hpp"

namespace fhelium::residency::detail {

namespace {

using Charge = LocationLedger::ChargeKind;

// One action's dry-run result; `reason` explains a refusal, or a no-op when
// explanations are recorded.
struct Outcome {
  bool executable = false;
  bool no_op = false;
  std::optional<ResidencyLocation> source, destination;
  std::int64_t logical_nbytes = 0, storage_nbytes = 0;
  std::optional<std::string> reason;
};

using ShadowLocations = decltype(ValueRecord::shadow_locations);

// The plan's view of the state so far: a shadow ledger and, per value
// touched, where it is resident.
class Shadow {
 public:
  // `run` is a number no earlier dry run of this manager used.
  Shadow(const LocationLedger& ledger, const DeviceRuntime& runtime, std::uint64_t run)
      : ledger_(ledger.shadow()), runtime_(runtime), run_(run) {}

  // Adds `location` to the shadow ledger; returns a reason when it is invalid.
  std::optional<std::string> prepare(const ResidencyLocation& location) {
    try {
      runtime_.check_location(location);
    } catch (const std::invalid_argument& error) {
      return std::string(error.what());
    }
    ledger_.register_location(location);
    return std::nullopt;
  }

  // Prepares `location`, then admits the charge there.
  std::optional<std::string> charge(const ResidencyLocation& location, std::int64_t bytes, Charge kind,
                                    std::string_view what) {
    if (auto reason = prepare(location)) return reason;
    if (admitted(location, bytes, kind)) return std::nullopt;
    return refusal(location, bytes, kind, what);
  }

  // Charges `bytes` at the prepared `location` with the ledger's own
  // admission rule (a temporary charge only raises the peak); false, charging
  // nothing, when the ledger refuses, and then refusal() says why. Inline:
  // every admitted action takes this path, and only refusals build text.
  bool admitted(const ResidencyLocation& location, std::int64_t bytes, Charge kind) {
    return ledger_.admit_charge(location, bytes, kind);
  }
  // The reason a charge admitted() refused is refused, its peak noted. `what`
  // names the charge ("transition", "reservation 'kv'").
  [[gnu::noinline]] std::string refusal(const ResidencyLocation& location, std::int64_t bytes, Charge kind,
                                        std::string_view what) {
    if (!ledger_.find(location)->budget_bytes) {
      // A reservation is named; a transition's charge speaks for itself.
      return (kind == Charge::reserved ? std::string(what) + ": " : std::string()) + "charge at " + location.name() +
             " would exceed the largest representable byte count (INT64_MAX)";
    }
    ledger_.note_transient_charge(location, bytes);
    return std::string(what) + " exceeds budget at " + location.name();
  }

  void uncharge(const ResidencyLocation& location, std::int64_t bytes) { ledger_.remove_used(location, bytes); }

  ShadowLocations& locations_of(const ValueRecord& record) {
    if (record.shadow_run != run_) {
      record.shadow_locations.clear();
      for (const auto& item : record.materializations) record.shadow_locations.push_back(item.location);
      record.shadow_run = run_;
    }
    return record.shadow_locations;
  }

  std::unordered_set<const ValueRecord*> discarded;

  std::vector<std::pair<ResidencyLocation, std::int64_t>> peaks() const {
    std::vector<std::pair<ResidencyLocation, std::int64_t>> result;
    result.reserve(ledger_.accounts().size());
    for (const auto& account : ledger_.accounts()) result.emplace_back(account.location, account.peak_charged_bytes);
    return result;
  }

 private:
  LocationLedger ledger_;
  const DeviceRuntime& runtime_;
  const std::uint64_t run_;
};

// A value as the plan has left it so far, as the transition rules see it.
// Protection is the real materialization's (the plan cannot change it),
// pending protection ending when its events have completed.
class ShadowView {
  static const ResidencyLocation& same(const ResidencyLocation& location) { return location; }

 public:
  ShadowView(const ValueRecord& record, const ShadowLocations& locations, const LifetimeTable& lifetimes,
             DeviceRuntime& runtime)
      : record_(record), locations_(locations), lifetimes_(lifetimes), runtime_(runtime) {}

  const ValueRecord& record() const { return record_; }
  // A plain loop: a value has one or two locations, where std::find's
  // unrolled search costs more than the search.
  bool resident(const ResidencyLocation& location) const {
    for (const ResidencyLocation& at : locations_) {
      if (at == location) return true;
    }
    return false;
  }
  std::size_t count() const { return locations_.size(); }
  std::optional<ResidencyLocation> first(const std::optional<ResidencyLocation>& exclude) const {
    return smallest_location(locations_, exclude, same);
  }
  bool protected_at(const ResidencyLocation& location) const {
    const Materialization* item = record_.at(location);
    return item != nullptr && lifetimes_.still_protects(*item, runtime_);
  }
  std::vector<ResidencyLocation> protected_locations() const {
    return protected_locations_of(locations_, same, [this](const ResidencyLocation& at) { return protected_at(at); });
  }

 private:
  const ValueRecord& record_;
  const ShadowLocations& locations_;
  const LifetimeTable& lifetimes_;
  DeviceRuntime& runtime_;
};

// Removes `location`, which is there (a plain loop, as in ShadowView::resident).
void erase(ShadowLocations& locations, const ResidencyLocation& location) {
  auto at = locations.begin();
  while (*at != location) ++at;
  locations.erase(at);
}

}  // namespace

PlanDryRun::Result PlanDryRun::run(const PlanActions& actions,
                                   const std::vector<MemoryReservation>& reservations, std::size_t reservations_after,
                                   std::vector<ResidencyActionExplanation>* explanations) {
  if (explanations != nullptr) return run_as<true>(actions, reservations, reservations_after, explanations);
  return run_as<false>(actions, reservations, reservations_after, nullptr);
}

// One body for both kinds of run, compiled for each: a preflight keeps no
// reason for a no-op and reads nothing of an action's outcome but whether it
// was refused and why.
template <bool explain>
[[gnu::hot]]
PlanDryRun::Result PlanDryRun::run_as(const PlanActions& actions,
                                      const std::vector<MemoryReservation>& reservations,
                                      std::size_t reservations_after,
                                      std::vector<ResidencyActionExplanation>* explanations) {
  Result result;
  // Steps are for execution: an explanation carries what it needs itself.
  constexpr bool keep_steps = !explain;
  const std::size_t action_count = actions.size();
  if constexpr (keep_steps) result.steps.reserve(action_count);
  Shadow shadow(ledger_, runtime_, ++runs_);

  const auto admit_reservations = [&]() -> std::optional<std::string> {
    for (const auto& reservation : reservations) {
      const std::string what = "reservation '" + reservation.label + "'";
      if (auto reason = shadow.charge(reservation.location, reservation.nbytes, Charge::reserved, what)) {
        return reason;
      }
    }
    return std::nullopt;
  };

  // One action against the shadow. Reasons are built for refusals always, for
  // no-ops only when the explanation is recorded. Inline in the loop: called,
  // it returned its outcome through memory, about 30 instructions an action
  // more (tools/instruction-counts.sh, execute_actions and explain).
  const auto simulate = [&](const ResidencyAction& action) __attribute__((always_inline)) -> Outcome {
    ValueRecord* record_pointer = nullptr;
    try {
      record_pointer = &values_.lookup(action_handle(action));
    } catch (const ResidencyHandleError& error) {
      return {false, false, std::nullopt, std::nullopt, 0, 0, error.what()};
    }
    const ValueRecord& record = *record_pointer;
    if (!shadow.discarded.empty() && shadow.discarded.count(&record) != 0) {
      // Discarded earlier in this plan: reported like an unknown handle, with
      // no bytes, source or destination (the reference's failed explanation).
      return {false, false, std::nullopt, std::nullopt, 0, 0,
              "value '" + ValueTable::id_of(record) + "' is discarded"};
    }
    const std::int64_t charge = record.spec.storage_nbytes;
    const auto failed = [&](std::optional<ResidencyLocation> source, std::optional<ResidencyLocation> destination,
                            std::string reason) -> Outcome {
      return {false, false, source, destination, record.spec.logical_nbytes, charge, std::move(reason)};
    };
    // The runtime's location checks come first, as in execution.
    if (const auto* ensure = std::get_if<EnsureResident>(&action)) {
      if (auto reason = shadow.prepare(ensure->location)) return failed(std::nullopt, ensure->location, *reason);
    } else if (const auto* move = std::get_if<MoveResident>(&action)) {
      if (auto reason = shadow.prepare(move->to)) {
        // As in the reference, the registered source (if any) is reported.
        return failed(registered_source(record), move->to, *reason);
      }
      if (move->from_location) {
        if (auto reason = shadow.prepare(*move->from_location)) return failed(move->from_location, move->to, *reason);
      }
    } else if (const auto* drop = std::get_if<DropResident>(&action)) {
      if (auto reason = shadow.prepare(drop->location)) return failed(drop->location, std::nullopt, *reason);
    }

    ShadowLocations& locations = shadow.locations_of(record);
    const ShadowView view(record, locations, lifetimes_, runtime_);
    const TransitionDecision decision = decide_transition(action, view);
    if constexpr (keep_steps) result.steps.push_back(Step{record_pointer, decision});
    std::optional<std::string> reason;
    if (decision.refused()) {
      reason = refusal_reason(decision, decision.refusal == Refusal::discard_protected
                                            ? view.protected_locations()
                                            : std::vector<ResidencyLocation>{});
    } else if (decision.changes_nothing()) {
      if constexpr (explain) reason = decision.no_op;
    } else if (decision.discard) {
      while (!locations.empty()) {
        shadow.uncharge(locations.back(), charge);
        locations.pop_back();
      }
      shadow.discarded.insert(&record);
    } else {
      // The destination is the action's own location, prepared above; a
      // load's source is the registered one, which register_source checked
      // and entered in the ledger (execution charges it without a check too).
      if (decision.load && !shadow.admitted(*decision.source, charge, Charge::transient)) [[unlikely]] {
        reason = shadow.refusal(*decision.source, charge, Charge::transient, "transition");
      } else if (decision.install) {
        if (shadow.admitted(*decision.destination, charge, Charge::used)) [[likely]] {
          locations.push_back(*decision.destination);
        } else {
          reason = shadow.refusal(*decision.destination, charge, Charge::used, "transition");
        }
      }
      if (!reason && decision.remove) {
        shadow.uncharge(*decision.remove, charge);
        erase(locations, *decision.remove);
      }
    }
    const bool no_op = decision.changes_nothing();
    return {!reason || no_op, no_op, decision.source, decision.destination, record.spec.logical_nbytes, charge,
            std::move(reason)};
  };

  // The actions in order, the reservations admitted before action
  // `reservations_after` (after the last when it is the count), up to the
  // first refusal, which is explained too.
  std::optional<std::string>& failure = result.failure;
  if constexpr (explain) explanations->reserve(action_count);
  std::size_t index = 0;
  for (const auto& list : actions.lists) {
    for (const ResidencyAction& action : list) {
      if (index++ == reservations_after) {
        failure = admit_reservations();
        if (failure) break;
      }
      Outcome outcome = simulate(action);
      if (!outcome.executable) failure = outcome.reason;
      if constexpr (explain) {
        explanations->emplace_back(RecordAssembly::key(), action, outcome.executable, outcome.no_op, outcome.source,
                                   outcome.destination, outcome.logical_nbytes, outcome.storage_nbytes,
                                   std::move(outcome.reason));
      }
      if (failure) break;
    }
    if (failure) break;
  }
  if (!failure && reservations_after == action_count) failure = admit_reservations();
  result.peaks = shadow.peaks();
  return result;
}

}  // namespace fhelium::residency::detail
