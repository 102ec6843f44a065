#include "fhelium/residency/policy.hpp"

#include "detail/blank_text.hpp"
#include "detail/tiered_lru_key.hpp"

#include <algorithm>
#include <stdexcept>

namespace fhelium::residency {

void ResidencyPolicyMetadata::validate() const {
  if (stable_key && detail::is_blank(*stable_key)) {
    throw std::invalid_argument("ResidencyPolicyMetadata stable_key must be non-empty when given");
  }
}

ResidencyEvictionCandidate::ResidencyEvictionCandidate(ResidencyHandle handle_, ResidencyLocation location_,
                                                       std::int64_t charged_nbytes_, std::int64_t registration_index_,
                                                       std::optional<std::int64_t> last_access_epoch_,
                                                       ResidencyPolicyMetadata metadata_)
    : handle(std::move(handle_)),
      location(location_),
      charged_nbytes(charged_nbytes_),
      registration_index(registration_index_),
      last_access_epoch(last_access_epoch_),
      metadata(std::move(metadata_)) {
  validate_handle(handle);
  if (charged_nbytes < 0) throw std::invalid_argument("ResidencyEvictionCandidate charged_nbytes must be non-negative");
  if (registration_index < 0) {
    throw std::invalid_argument("ResidencyEvictionCandidate registration_index must be non-negative");
  }
  if (last_access_epoch && *last_access_epoch < 0) {
    throw std::invalid_argument("ResidencyEvictionCandidate last_access_epoch must be non-negative");
  }
  metadata.validate();
}

DeterministicTieredLRU::DeterministicTieredLRU(ResidencyFallbackTiers fallback_tiers)
    : fallback_tiers_(std::move(fallback_tiers)) {
  for (std::size_t index = 0; index < fallback_tiers_.size(); ++index) {
    const auto& [source, destinations] = fallback_tiers_[index];
    for (std::size_t earlier = 0; earlier < index; ++earlier) {
      if (fallback_tiers_[earlier].first == source) {
        throw std::invalid_argument("DeterministicTieredLRU fallback tiers list source " + source.name() + " twice");
      }
    }
    for (std::size_t position = 0; position < destinations.size(); ++position) {
      if (destinations[position] == source) {
        throw std::invalid_argument("DeterministicTieredLRU fallback tiers of " + source.name() +
                                    " cannot contain their source location");
      }
      if (std::find(destinations.begin(), destinations.begin() + static_cast<std::ptrdiff_t>(position),
                    destinations[position]) != destinations.begin() + static_cast<std::ptrdiff_t>(position)) {
        throw std::invalid_argument("DeterministicTieredLRU fallback destinations of " + source.name() +
                                    " must be unique: " + destinations[position].name() + " is listed twice");
      }
    }
  }
}

ResidencyPolicyConfig DeterministicTieredLRU::config_identity() const {
  std::string tiers;
  for (const auto& [source, destinations] : fallback_tiers_) {
    if (!tiers.empty()) tiers += "; ";
    tiers += source.name() + " -> [";
    for (std::size_t index = 0; index < destinations.size(); ++index) {
      if (index > 0) tiers += ", ";
      tiers += destinations[index].name();
    }
    tiers += "]";
  }
  return {{"fallback_tiers", tiers}};
}

std::vector<ResidencyLocation> DeterministicTieredLRU::fallback_locations(const ResidencyLocation& location) const {
  for (const auto& [source, destinations] : fallback_tiers_) {
    if (source == location) return destinations;
  }
  return {};
}

std::vector<ResidencyEvictionCandidate> DeterministicTieredLRU::order_candidates(
    std::vector<ResidencyEvictionCandidate> candidates) const {
  // Sort positions by key, then move each candidate once: candidates are
  // heavy (a handle is three strings) and there may be one per resident value.
  struct Keyed {
    detail::TieredLruKey key;
    std::size_t position;
  };
  std::vector<Keyed> keys;
  keys.reserve(candidates.size());
  for (std::size_t position = 0; position < candidates.size(); ++position) {
    const ResidencyEvictionCandidate& candidate = candidates[position];
    keys.push_back({detail::tiered_lru_key(candidate.metadata, candidate.last_access_epoch,
                                           candidate.registration_index),
                    position});
  }
  const auto before = [](const Keyed& left, const Keyed& right) { return left.key < right.key; };
  // Often already in order (equal hints, registration order): then O(n).
  if (std::is_sorted(keys.begin(), keys.end(), before)) return candidates;
  std::stable_sort(keys.begin(), keys.end(), before);
  std::vector<ResidencyEvictionCandidate> ordered;
  ordered.reserve(candidates.size());
  for (const Keyed& keyed : keys) ordered.push_back(std::move(candidates[keyed.position]));
  return ordered;
}

}  // namespace fhelium::residency
