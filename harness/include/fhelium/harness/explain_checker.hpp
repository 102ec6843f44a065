// The explain-versus-execute check, from outside the manager: a plan that
// explain found feasible must run without error when no fault fires (and a
// whole plan or primitive explain refused must fail), the
// peaks it reaches must match what explain predicted, and a whole plan's
// transitions must be the ones explain described, action for action. Pure function over
// tensor-free records; safe to call from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fhelium/harness/invariant_checker.hpp"
#include "fhelium/residency/plan.hpp"
#include "fhelium/residency/snapshot.hpp"

namespace fhelium::harness {

struct ExplainedRun {
  // What explain said before the run, against the state the run started from.
  const residency::ResidencyPlanExplanation* explanation = nullptr;
  // Whether any fault fired during the run (the prediction then does not apply).
  bool faults_fired = false;
  // Whether the device refused a call during the run (allocator capacity
  // exhausted, no pinned memory, a wait on work that never completes):
  // explain judges budgets and protection, not the device's physical room
  // or its streams, so its prediction does not apply either.
  bool device_refused = false;
  // How the run failed (an error kind of error_kind.hpp), when it did.
  std::optional<std::string> error_kind;
  std::string error_message;
  // Whether the run was of every explained action (execute_actions, or a
  // primitive call explained as a plan of its one action), so the
  // prediction is exact, and binds both ways: a plan explain refused must
  // fail as well. Otherwise (a scope's entry) it is an upper bound, and only
  // a feasible verdict is checked.
  bool whole_plan = false;
  // peak_charged_bytes per location before the run.
  std::map<residency::ResidencyLocation, std::int64_t> peaks_before;
  // The state after the run.
  const residency::ResidencySnapshot* after = nullptr;
  // The run's transition reports, when it ran the whole plan
  // (execute_actions): each must have the source, destination and no-op of
  // the explained action at its index.
  const std::vector<residency::ResidencyTransitionReport>* transitions = nullptr;
};

// Violations of "explain-execute" (a feasible fault-free plan failed, or a
// whole plan or primitive explain refused succeeded without faults),
// "predicted-peak" (an observed peak differs from, or exceeds, the
// prediction) and "explained-transition" (a whole plan's transition differs
// from its explanation in source, destination or no-op, or in number). Refusals that explain does not judge (a stale version, an
// invalid argument) are not violations.
std::vector<InvariantViolation> check_explained_run(const ExplainedRun& run);

}  // namespace fhelium::harness
