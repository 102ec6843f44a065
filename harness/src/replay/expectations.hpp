// Step expectations: compares what a step did (its outcome, the snapshot
// after it, the state version and trace) with what the scenario says it must
// do. Each check throws ExpectationMismatch with a message in the scenario's
// names and units on the first difference; the replayer adds the location.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "fhelium/harness/scenario.hpp"
#include "replay/declarations.hpp"
#include "replay/outcome.hpp"

namespace fhelium::harness::replay_detail {

struct ExpectationMismatch {
  std::string message;
};

// The outcome fields: error kind and message, no-op, source and destination,
// reason, committed count, decision, transition reports, explanation.
void check_outcome(const Declarations& names, const Step& step, const Outcome& outcome);

// The snapshot fields: locations, residency, discarded values, faults fired
// and the diagnostics count (`diagnostics` is asked only when expected).
// `snapshot` is null once the manager is closed.
void check_snapshot(const Declarations& names, const Step& step, const residency::ResidencySnapshot* snapshot,
                    std::int64_t faults_fired, const std::function<std::int64_t()>& diagnostics);

// The state fields: state version and its change, the trace (`transitions`,
// already in value names), value facts, unregistered locations.
void check_state(const Declarations& names, const Step& step, const residency::ResidencySnapshot* snapshot,
                 const std::optional<std::uint64_t>& version_before, const std::vector<std::string>& transitions);

}  // namespace fhelium::harness::replay_detail
