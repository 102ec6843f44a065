// PlanDryRun: decides a plan's actions in order without carrying any out.
//
// Every action is decided by the same transition rules execution uses
// (transition_rules.hpp) against a shadow of the state: a copy of the
// location ledger and, per value the plan touches, where the plan has left
// it so far. Charges go to the shadow ledger with the ledger's own admission
// rule; protection is the real one (a plan cannot change it), with pending
// protection ending when its events have completed. Nothing is mutated: no
// version bump, no reaping, no location registration. Explain records an
// explanation per action; the preflight of execution records none and keeps
// only the first refusal's reason.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "detail/ledger.hpp"
#include "detail/lifetime_table.hpp"
#include "detail/transition_rules.hpp"
#include "detail/value_table.hpp"
#include "fhelium/residency/plan.hpp"
#include "fhelium/residency/runtime.hpp"
#include "fhelium/residency/snapshot.hpp"

namespace fhelium::residency::detail {

// A plan's actions in order, walked where they are: the consecutive lists
// they come in (a plan's reclaim, enter and exit actions; the one list of
// execute_actions), not gathered into another.
struct PlanActions {
  std::array<std::span<const ResidencyAction>, 3> lists{};

  std::size_t size() const { return lists[0].size() + lists[1].size() + lists[2].size(); }
};

class PlanDryRun {
 public:
  // One action as the dry run decided it: its value record and the
  // transition rules' decision against the shadow.
  struct Step {
    ValueRecord* record;
    TransitionDecision decision;
  };
  // What a dry run found: the first refusal's reason (none when the plan is
  // feasible), the predicted peak per location and, for a preflight (a run
  // without explanations), each action's step in order. The steps are
  // complete only when the plan is feasible: then no value is discarded
  // before its action runs, the shadow each decision was made against is the
  // real state the action meets once the actions before it have run, and
  // execution carries the decisions out instead of deciding again.
  struct Result {
    std::optional<std::string> failure;
    std::vector<Step> steps;
    std::vector<std::pair<ResidencyLocation, std::int64_t>> peaks;
  };

  PlanDryRun(DeviceRuntime& runtime, ValueTable& values, const LocationLedger& ledger, const LifetimeTable& lifetimes)
      : runtime_(runtime), values_(values), ledger_(ledger), lifetimes_(lifetimes) {}

  // Dry-runs `actions`, with `reservations` admitted before action
  // `reservations_after` (after the last when it is the action count). `explanations`, when given, receives one record per
  // action run (explain); a preflight passes none and builds no record.
  Result run(const PlanActions& actions, const std::vector<MemoryReservation>& reservations,
             std::size_t reservations_after, std::vector<ResidencyActionExplanation>* explanations);

 private:
  template <bool explain>
  Result run_as(const PlanActions& actions, const std::vector<MemoryReservation>& reservations,
                std::size_t reservations_after, std::vector<ResidencyActionExplanation>* explanations);

  DeviceRuntime& runtime_;
  ValueTable& values_;
  const LocationLedger& ledger_;
  const LifetimeTable& lifetimes_;
  std::uint64_t runs_ = 0;  // runs so far; numbers each run's shadow
};

}  // namespace fhelium::residency::detail
