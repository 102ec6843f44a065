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

// Violations of "decision-evictions" in `decision`, made from `before` or
// from a later snapshot that retired some of before's pending leases (then
// only uses and holds count as protection: pending events may be over).
std::vector<InvariantViolation> check_decision(const residency::ResidencySnapshot& before,
                                               const residency::ResidencyDecision& decision);

// Violations of "decide-read-only": `after` must equal `before` in every
// field but captured_at_ns and the allocator telemetry, except for the
// leases an observation retires: pending event counts may go down, and
// state_version then moves by at least one and at most the number of
// pending events retired.
std::vector<InvariantViolation> check_unchanged(const residency::ResidencySnapshot& before,
                                                const residency::ResidencySnapshot& after);

}  // namespace fhelium::harness
