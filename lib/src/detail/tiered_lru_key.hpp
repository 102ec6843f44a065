// DeterministicTieredLRU's eviction order as a key: lower goes first. The
// policy sorts candidates by it, and the victim search sorts values by it
// once per decision instead of asking the policy in every state, so both
// must use this one definition.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <tuple>

#include "fhelium/residency/policy.hpp"

namespace fhelium::residency::detail {

// Priority, then last access epoch (never used: first), then values with a
// stable key (by key) before those without, then registration order.
using TieredLruKey = std::tuple<std::int64_t, std::int64_t, int, std::string_view, std::int64_t>;

inline TieredLruKey tiered_lru_key(const ResidencyPolicyMetadata& metadata,
                                   const std::optional<std::int64_t>& last_access_epoch,
                                   std::int64_t registration_index) {
  const auto& stable = metadata.stable_key;
  return {metadata.priority, last_access_epoch.value_or(-1), stable ? 0 : 1,
          stable ? std::string_view(*stable) : std::string_view(), registration_index};
}

}  // namespace fhelium::residency::detail
