// VictimSearch: the controller's planner. From one tensor-free snapshot it
// finds reclaim actions (victims) that let a request's reservations and
// requirements fit, and the enter actions that then admit the request.
//
// The search is a depth-first search with backtracking over whole-request
// states; states that failed are memoized by a canonical signature (each
// value's locations and each location's used and reserved bytes), and every
// explored state counts against the state limit. It never touches a manager:
// the controller confirms its plan with ResidencyManager::explain().
#pragma once

#include <cstdint>
#include <unordered_map>
#include <optional>
#include <vector>

#include "fhelium/residency/controller.hpp"
#include "fhelium/residency/plan.hpp"
#include "fhelium/residency/policy.hpp"
#include "fhelium/residency/request.hpp"
#include "fhelium/residency/snapshot.hpp"

namespace fhelium::residency::detail {

struct VictimSearchInput {
  const ResidencySnapshot& snapshot;
  const ResidencyRequest& request;
  const ResidencyPolicy& policy;
  // Position in snapshot.values of every live (not discarded) handle.
  const std::unordered_map<ResidencyHandle, std::size_t>& index;
  // Controller-owned facts about handles (absent: defaults / never used).
  const std::unordered_map<ResidencyHandle, ResidencyPolicyMetadata>& metadata;
  const std::unordered_map<ResidencyHandle, std::int64_t>& last_access_epoch;
  std::int64_t state_limit;
};

struct VictimSearchResult {
  std::vector<ResidencyAction> reclaim;
  std::vector<ResidencyEviction> evictions;
  std::vector<ResidencyAction> enter;
  std::int64_t explored_states;
};

// The request must already be validated against the snapshot (known, live,
// own handles; replica modes). Throws ResidencySearchLimitError at the state
// limit, ResidencyPlanError when no victim sequence exists,
// ResidencyUnavailableError for a value with neither a replica nor a source,
// and std::logic_error when the policy does not return a permutation.
VictimSearchResult search_victims(const VictimSearchInput& input);

}  // namespace fhelium::residency::detail
