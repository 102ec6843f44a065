// Dry-run simulation of a plan against a copy of the accounting state. Nothing
// here mutates the manager: no version bump, no reaping, no registration.
#include <algorithm>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "detail/manager_core.hpp"
#include "fhelium/residency/errors.hpp"

namespace fhelium::residency::detail {

namespace {

struct SimulatedAccount {
  ResidencyLocation location;
  std::optional<std::int64_t> budget_bytes;
  std::int64_t used_bytes = 0;
  std::int64_t reserved_bytes = 0;
  std::int64_t peak_bytes = 0;
};

class Simulation {
 public:
  Simulation(const LocationLedger& ledger, const DeviceRuntime& runtime) : ledger_(ledger), runtime_(runtime) {
    slot_.fill(-1);
    for (const auto& account : ledger.accounts()) add_account(account.location);
  }

  // Adds `location` to the simulated state; returns a reason when it is invalid.
  std::optional<std::string> prepare(const ResidencyLocation& location) {
    try {
      runtime_.check_location(location);
    } catch (const std::invalid_argument& error) {
      return std::string(error.what());
    }
    if (slot_[static_cast<std::size_t>(location.ordinal())] < 0) add_account(location);
    return std::nullopt;
  }

  SimulatedAccount& account(const ResidencyLocation& location) {
    return accounts_[static_cast<std::size_t>(slot_[static_cast<std::size_t>(location.ordinal())])];
  }

  // Charges `bytes` at a prepared location; a temporary charge only raises the peak.
  std::optional<std::string> add(const ResidencyLocation& location, std::int64_t bytes, bool temporary) {
    if (auto reason = prepare(location)) return reason;
    SimulatedAccount& state = account(location);
    std::int64_t total = 0;
    const std::string over_budget = "transition exceeds budget at " + location.name();
    if (!charged_after(state, bytes, total)) return state.budget_bytes ? over_budget : unrepresentable(location);
    state.peak_bytes = std::max(state.peak_bytes, total);
    if (state.budget_bytes && total > *state.budget_bytes) return over_budget;
    if (!temporary) state.used_bytes += bytes;
    return std::nullopt;
  }

  // used + reserved + `bytes` into `total`; false when that exceeds INT64_MAX.
  // Every simulated charge is checked here, so the sum of the others fits.
  static bool charged_after(const SimulatedAccount& state, std::int64_t bytes, std::int64_t& total) {
    return !__builtin_add_overflow(state.used_bytes + state.reserved_bytes, bytes, &total);
  }
  static std::string unrepresentable(const ResidencyLocation& location) {
    return "charge at " + location.name() + " would exceed the largest representable byte count (INT64_MAX)";
  }

  std::vector<ResidencyLocation>& locations_of(ValueRecord& record) {
    auto found = locations_.find(&record);
    if (found == locations_.end()) {
      std::vector<ResidencyLocation> initial;
      for (const auto& item : record.materializations) initial.push_back(item.location);
      found = locations_.emplace(&record, std::move(initial)).first;
    }
    return found->second;
  }

  std::unordered_set<const ValueRecord*> discarded;

  std::vector<std::pair<ResidencyLocation, std::int64_t>> peaks() const {
    std::vector<std::pair<ResidencyLocation, std::int64_t>> result;
    for (const auto& account : accounts_) result.emplace_back(account.location, account.peak_bytes);
    return result;
  }

 private:
  void add_account(const ResidencyLocation& location) {
    SimulatedAccount state{location, std::nullopt, 0, 0, 0};
    if (const LocationAccount* real = ledger_.find(location)) {
      state.budget_bytes = real->budget_bytes;
      state.used_bytes = real->used_bytes;
      state.reserved_bytes = real->reserved_bytes;
      state.peak_bytes = real->used_bytes + real->reserved_bytes;
    }
    slot_[static_cast<std::size_t>(location.ordinal())] = static_cast<std::int32_t>(accounts_.size());
    accounts_.push_back(state);
  }

  const LocationLedger& ledger_;
  const DeviceRuntime& runtime_;
  std::vector<SimulatedAccount> accounts_;
  std::array<std::int32_t, ResidencyLocation::ordinal_count> slot_{};
  std::unordered_map<const ValueRecord*, std::vector<ResidencyLocation>> locations_;
};

bool contains(const std::vector<ResidencyLocation>& locations, const ResidencyLocation& location) {
  return std::find(locations.begin(), locations.end(), location) != locations.end();
}

void erase(std::vector<ResidencyLocation>& locations, const ResidencyLocation& location) {
  locations.erase(std::find(locations.begin(), locations.end(), location));
}

std::optional<ResidencyLocation> first_in_order(const std::vector<ResidencyLocation>& locations,
                                                const std::optional<ResidencyLocation>& exclude) {
  std::optional<ResidencyLocation> best;
  for (const auto& location : locations) {
    if (exclude && location == *exclude) continue;
    if (!best || location < *best) best = location;
  }
  return best;
}

}  // namespace

bool ManagerCore::simulated_protected_locked(const Materialization& item) {
  if (item.use_count > 0 || item.hold_count > 0) return true;
  if (item.pending_count == 0) return false;
  // Pending protection ends only when every covering lease's events are complete.
  for (const auto& [token, lease] : leases_) {
    if (lease.state != LeaseState::pending || lease.location != item.location) continue;
    for (const ValueRecord* record : lease.records) {
      if (record->at(item.location) == &item && !events_complete_locked(lease)) return true;
    }
  }
  return false;
}

ResidencyPlanExplanation ManagerCore::explain_locked(const std::string& name,
                                                     const std::vector<const ResidencyAction*>& actions,
                                                     const std::vector<MemoryReservation>& reservations,
                                                     std::size_t reservations_after) {
  Simulation simulation(ledger_, *runtime_);
  std::vector<ResidencyActionExplanation> explanations;
  std::optional<std::string> failure;

  const auto admit_reservations = [&]() -> std::optional<std::string> {
    for (const auto& reservation : reservations) {
      if (auto reason = simulation.prepare(reservation.location)) return reason;
      SimulatedAccount& state = simulation.account(reservation.location);
      std::int64_t total = 0;
      const std::string over_budget =
          "reservation '" + reservation.label + "' exceeds budget at " + reservation.location.name();
      if (!Simulation::charged_after(state, reservation.nbytes, total)) {
        return state.budget_bytes ? over_budget
                                  : "reservation '" + reservation.label + "': " +
                                        Simulation::unrepresentable(reservation.location);
      }
      state.reserved_bytes += reservation.nbytes;
      state.peak_bytes = std::max(state.peak_bytes, total);
      if (state.budget_bytes && total > *state.budget_bytes) return over_budget;
    }
    return std::nullopt;
  };

  const auto simulate = [&](const ResidencyAction& action) -> ResidencyActionExplanation {
    ValueRecord* record_pointer = nullptr;
    try {
      record_pointer = &values_.lookup(action_handle(action));
    } catch (const ResidencyHandleError& error) {
      return ResidencyActionExplanation(action, false, false, std::nullopt, std::nullopt, 0, 0, error.what());
    }
    ValueRecord& record = *record_pointer;
    const ResidencyValueSpec& spec = record.spec;
    const std::int64_t charge = spec.storage_nbytes;
    std::vector<ResidencyLocation>& locations = simulation.locations_of(record);
    std::optional<ResidencyLocation> source;
    std::optional<ResidencyLocation> destination;
    std::optional<std::string> reason;
    bool no_op = false;
    const auto protected_at = [&](const ResidencyLocation& location) {
      const Materialization* item = record.at(location);
      return item != nullptr && simulated_protected_locked(*item);
    };
    const auto add = [&](const ResidencyLocation& location, bool temporary) {
      auto result = simulation.add(location, charge, temporary);
      if (!result && !temporary) locations.push_back(location);
      return result;
    };
    const auto remove = [&](const ResidencyLocation& location) {
      simulation.account(location).used_bytes -= charge;
      erase(locations, location);
    };

    if (simulation.discarded.count(&record) != 0) {
      // Discarded earlier in this plan: reported like an unknown handle, with
      // no bytes, source or destination (the reference's failed explanation).
      return ResidencyActionExplanation(action, false, false, std::nullopt, std::nullopt, 0, 0,
                                        "value '" + record.handle.handle_id + "' is discarded");
    }
    if (const auto* ensure = std::get_if<EnsureResident>(&action)) {
      destination = ensure->location;
      reason = simulation.prepare(ensure->location);
      if (!reason && contains(locations, ensure->location)) {
        no_op = true;
        reason = "destination already resident";
      } else if (!reason && spec.replica_mode == ReplicaMode::exclusive && !locations.empty()) {
        reason = "EnsureResident would replicate an EXCLUSIVE value; use MoveResident";
      } else if (!reason) {
        source = locations.empty() ? (record.source ? record.source_location : std::nullopt)
                                   : first_in_order(locations, std::nullopt);
        if (!source) {
          reason = "value has no materialization or source";
        } else {
          if (locations.empty()) reason = add(*source, true);
          if (!reason) reason = add(ensure->location, false);
        }
      }
    } else if (const auto* move = std::get_if<MoveResident>(&action)) {
      destination = move->to;
      reason = simulation.prepare(move->to);
      if (!reason && move->from_location) {
        source = move->from_location;
        reason = simulation.prepare(*source);
        if (!reason && !contains(locations, *source)) {
          reason = "explicit source " + source->name() + " is not resident";
        }
      } else if (!reason && !locations.empty()) {
        source = first_in_order(locations, move->to);
      } else {
        // Also reached when the destination is invalid: the reference then
        // reports the registered source location (if any) as the source.
        source = record.source ? record.source_location : std::nullopt;
      }
      if (!reason && contains(locations, move->to)) {
        if (!source || *source == move->to) {
          no_op = true;  // an explicit source equal to the destination stays reported
          reason = "destination already owns the selected replica";
        } else if (protected_at(*source)) {
          reason = "source " + source->name() + " is protected";
        } else {
          remove(*source);
        }
      } else if (!reason && !source) {
        reason = "value has no materialization or source";
      } else if (!reason) {
        const bool source_was_resident = contains(locations, *source);
        if (source_was_resident && protected_at(*source)) {
          reason = "source " + source->name() + " is protected";
        } else {
          if (!source_was_resident) reason = add(*source, true);
          if (!reason) reason = add(move->to, false);
          if (!reason && source_was_resident) remove(*source);
        }
      }
    } else if (const auto* drop = std::get_if<DropResident>(&action)) {
      source = drop->location;
      reason = simulation.prepare(drop->location);
      if (!reason && !contains(locations, drop->location)) {
        no_op = true;
        reason = "materialization already absent";
      } else if (!reason && protected_at(drop->location)) {
        reason = "materialization at " + drop->location.name() + " is protected";
      } else if (!reason && locations.size() == 1 && !record.source) {
        reason = "cannot drop the final MUST_PRESERVE materialization";
      } else if (!reason) {
        remove(drop->location);
      }
    } else {
      std::string protected_names;
      for (const auto& location : locations) {
        if (protected_at(location)) protected_names += (protected_names.empty() ? "" : ", ") + location.name();
      }
      if (!protected_names.empty()) {
        reason = "discarded value has protected locations [" + protected_names + "]";
      } else {
        while (!locations.empty()) remove(locations.back());
        simulation.discarded.insert(&record);
      }
    }
    const bool executable = !reason || no_op;
    return ResidencyActionExplanation(action, executable, no_op, source, destination, spec.logical_nbytes,
                                      spec.storage_nbytes, reason);
  };

  for (std::size_t index = 0; index <= actions.size() && !failure; ++index) {
    if (index == reservations_after) failure = admit_reservations();
    if (failure || index == actions.size()) break;
    explanations.push_back(simulate(*actions[index]));
    if (!explanations.back().executable) failure = explanations.back().reason;
  }
  return ResidencyPlanExplanation(name, std::move(explanations), reservations, simulation.peaks(),
                                  !failure.has_value(), failure);
}

}  // namespace fhelium::residency::detail
