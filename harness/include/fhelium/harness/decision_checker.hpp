// Checks of controller decisions, from outside the controller: a decision's
// evictions replayed against the snapshot it was made from must never touch a
// protected materialization, never lose a must-preserve value, never discard;
// and deciding must leave the manager exactly as it was. Pure functions over
// tensor-free records; safe to call from any thread.
#pragma once

#include <vector>

#include "fhelium/harness/invariant_checker.hpp"
#include "fhelium/residency/controller.hpp"
#include "fhelium/residency/snapshot.hpp"

namespace fhelium::harness {

// Violations of "decision-evictions" in `decision`, replayed over `state`.
// With `pending_events_protect`, a pending event protects a materialization
// as uses and holds do; without it only uses and holds do, for a `state`
// older than the decision's, whose pending leases the decision's own
// snapshot may have retired.
std::vector<InvariantViolation> check_decision(const residency::ResidencySnapshot& state,
                                               const residency::ResidencyDecision& decision,
                                               bool pending_events_protect = true);

// Violations of "decide-read-only": `after` must equal `before` in every
// field but captured_at_ns and the allocator telemetry, except for the
// leases an observation retires: pending event counts may go down, and
// state_version then moves by at least the largest drop of one count and
// at most the sum of the drops.
std::vector<InvariantViolation> check_unchanged(const residency::ResidencySnapshot& before,
                                                const residency::ResidencySnapshot& after);

}  // namespace fhelium::harness
