// Eviction policies for automatic residency: pure, deterministic rankings of
// victims and the spill tiers a displaced value may move to.
//
// A policy sees only tensor-free candidates that already passed the manager's
// invariants (unprotected materializations); it ranks them and names fallback
// locations, and never inspects values or changes state. The controller calls
// it under its own lock; a policy must be deterministic (no clocks, random
// state or allocator readings) so that the same state yields the same
// decision. DeterministicTieredLRU is immutable and safe to share.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fhelium/residency/location.hpp"
#include "fhelium/residency/model.hpp"

namespace fhelium::residency {

// Controller-owned eviction hints for one value. Higher priority is kept
// longer; stable_key is an application-chosen tie breaker and diagnostic name.
struct ResidencyPolicyMetadata {
  std::int64_t priority = 0;
  std::optional<std::string> stable_key = std::nullopt;

  // Throws std::invalid_argument for an empty or whitespace-only stable_key.
  void validate() const;
  friend bool operator==(const ResidencyPolicyMetadata&, const ResidencyPolicyMetadata&) = default;
};

// One unprotected materialization the policy may rank. registration_index is
// the value's position in manager registration order; last_access_epoch is
// the controller's logical access counter (absent for never-used values).
struct ResidencyEvictionCandidate {
  ResidencyHandle handle;
  ResidencyLocation location;
  std::int64_t charged_nbytes;
  std::int64_t registration_index;
  std::optional<std::int64_t> last_access_epoch;
  ResidencyPolicyMetadata metadata;

  // Throws std::invalid_argument for a malformed handle, negative bytes, index
  // or epoch, or invalid metadata.
  ResidencyEvictionCandidate(ResidencyHandle handle, ResidencyLocation location, std::int64_t charged_nbytes,
                             std::int64_t registration_index, std::optional<std::int64_t> last_access_epoch,
                             ResidencyPolicyMetadata metadata = {});
  friend bool operator==(const ResidencyEvictionCandidate&, const ResidencyEvictionCandidate&) = default;
};

// Tensor-free configuration evidence, recorded in every decision: ordered
// (key, value) pairs with the value rendered as text.
using ResidencyPolicyConfig = std::vector<std::pair<std::string, std::string>>;

class ResidencyPolicy {
 public:
  virtual ~ResidencyPolicy() = default;
  // Stable diagnostic name; must be non-empty.
  virtual std::string name() const = 0;
  // Configuration identity: two policies with equal name and identity make
  // the same decisions, so a decision is valid under either.
  virtual ResidencyPolicyConfig config_identity() const = 0;
  // Ordered spill tiers for a sole must-preserve copy leaving `location`.
  virtual std::vector<ResidencyLocation> fallback_locations(const ResidencyLocation& location) const = 0;
  // Every candidate exactly once, first victim first. Returning anything but
  // a permutation of the input makes the controller fail with std::logic_error.
  virtual std::vector<ResidencyEvictionCandidate> order_candidates(
      std::vector<ResidencyEvictionCandidate> candidates) const = 0;
};

// Spill edges: for each source location, its fallback destinations in order.
using ResidencyFallbackTiers = std::vector<std::pair<ResidencyLocation, std::vector<ResidencyLocation>>>;

// Priority-aware LRU over explicitly configured tiers. Candidates are ordered
// by lower priority, then older access epoch (never accessed first), then
// values with a stable key (by key) before those without, then registration
// order. Fallback tiers are never inferred: a location without an entry has
// no spill path.
class DeterministicTieredLRU final : public ResidencyPolicy {
 public:
  // Throws std::invalid_argument when a source lists itself, lists a
  // destination twice, or appears twice.
  explicit DeterministicTieredLRU(ResidencyFallbackTiers fallback_tiers = {});

  std::string name() const override { return "deterministic-tiered-lru"; }
  // One pair: ("fallback_tiers", "pinned-host -> [pageable-host]; ...").
  ResidencyPolicyConfig config_identity() const override;
  std::vector<ResidencyLocation> fallback_locations(const ResidencyLocation& location) const override;
  std::vector<ResidencyEvictionCandidate> order_candidates(
      std::vector<ResidencyEvictionCandidate> candidates) const override;

  const ResidencyFallbackTiers& fallback_tiers() const noexcept { return fallback_tiers_; }

 private:
  ResidencyFallbackTiers fallback_tiers_;
};

}  // namespace fhelium::residency
