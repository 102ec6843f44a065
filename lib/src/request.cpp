#include "fhelium/residency/request.hpp"

#include <algorithm>
#include <stdexcept>
#include <unordered_set>
#include <utility>

#include "detail/blank_text.hpp"

namespace fhelium::residency {

namespace {

struct RequirementHash {
  std::size_t operator()(const ResidencyRequirement& requirement) const noexcept {
    return std::hash<ResidencyHandle>()(requirement.handle) * 131 +
           static_cast<std::size_t>(requirement.location.ordinal());
  }
};

}  // namespace

ResidencyRequest::ResidencyRequest(std::string name, std::vector<ResidencyRequirement> requirements,
                                   std::vector<MemoryReservation> reservations)
    : name(std::move(name)), requirements(std::move(requirements)), reservations(std::move(reservations)) {
  validate();
}

void ResidencyRequest::validate() const {
  if (detail::is_blank(name)) throw std::invalid_argument("ResidencyRequest name must be non-empty");
  if (requirements.empty()) {
    throw std::invalid_argument("ResidencyRequest '" + name + "' needs at least one ResidencyRequirement");
  }
  std::unordered_set<ResidencyRequirement, RequirementHash> seen;
  for (std::size_t index = 0; index < requirements.size(); ++index) {
    const ResidencyRequirement& requirement = requirements[index];
    try {
      validate_handle(requirement.handle);
    } catch (const std::invalid_argument& error) {
      throw std::invalid_argument("ResidencyRequest '" + name + "' requirement " + std::to_string(index) + ": " +
                                  error.what());
    }
    if (!seen.insert(requirement).second) {
      throw std::invalid_argument("ResidencyRequest '" + name +
                                  "' requirements must use unique (handle, location) pairs: value '" +
                                  requirement.handle.handle_id + "' at " + requirement.location.name() +
                                  " is listed twice");
    }
  }
  for (std::size_t index = 0; index < reservations.size(); ++index) {
    const MemoryReservation& reservation = reservations[index];
    try {
      // The constructor holds the rules; a copy re-runs them.
      MemoryReservation(reservation.location, reservation.nbytes, reservation.label);
    } catch (const std::invalid_argument& error) {
      throw std::invalid_argument("ResidencyRequest '" + name + "' reservation " + std::to_string(index) + ": " +
                                  error.what());
    }
  }
}

std::vector<ResidencyLocation> ResidencyRequest::locations() const {
  std::vector<ResidencyLocation> result;
  for (const auto& requirement : requirements) {
    if (std::find(result.begin(), result.end(), requirement.location) == result.end()) {
      result.push_back(requirement.location);
    }
  }
  return result;
}

}  // namespace fhelium::residency
