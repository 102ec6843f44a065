// Fault coverage of a set of replayed scenarios: which (operation, effect)
// pairs of the fault model fired and how often, and which manager error paths
// (error kinds) were reached. The fault model's pairs are derived from the
// fault rules' own validation (every runtime operation with every effect a
// rule may have) plus the scenario source faults (a load that fails,
// re-enters, aliases or returns something wrong; an adopt that aliases).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "fhelium/harness/replay.hpp"

namespace fhelium::harness {

using FaultPair = std::pair<std::string, std::string>;  // (operation, effect)

// Every pair the fault model defines, in a fixed order.
std::vector<FaultPair> fault_model_pairs();

struct FaultCoverage {
  std::map<FaultPair, std::int64_t> fired;        // every model pair, with how often it fired
  std::map<std::string, std::int64_t> error_paths;  // every error kind, with how often it was reached
  std::vector<FaultPair> never_fired() const;
  std::vector<std::string> never_reached() const;
};

FaultCoverage fault_coverage(const std::vector<ScenarioResult>& results);

// {"pairs": [{"operation", "effect", "fired"}...], "error_paths": {kind: count},
//  "never_fired": [...], "never_reached": [...]}
nlohmann::json to_json(const FaultCoverage& coverage);

}  // namespace fhelium::harness
