// Declarative residency requests: which values must be resident where, and
// how much named headroom an operation needs while it runs.
//
// A request names no source, transfer path, victim or stream; a
// ResidencyController turns it into a plan. Requests are plain immutable
// values, safe to share between threads.
#pragma once

#include <string>
#include <vector>

#include "fhelium/residency/location.hpp"
#include "fhelium/residency/model.hpp"
#include "fhelium/residency/plan.hpp"

namespace fhelium::residency {

// One managed value required at one location once the request is admitted.
struct ResidencyRequirement {
  ResidencyHandle handle;
  ResidencyLocation location;

  friend bool operator==(const ResidencyRequirement&, const ResidencyRequirement&) = default;
};

// A working set plus headroom. Each (handle, location) pair appears once; a
// handle may be required at several locations (a replicable value then gets
// one replica at each; whether its replica mode allows that is checked
// against the manager when the request is decided).
struct ResidencyRequest {
  std::string name;
  std::vector<ResidencyRequirement> requirements;
  std::vector<MemoryReservation> reservations;

  // Throws std::invalid_argument for an empty or whitespace-only name, no
  // requirements, a malformed handle, a (handle, location) pair listed twice,
  // or a reservation that breaks MemoryReservation's rules.
  ResidencyRequest(std::string name, std::vector<ResidencyRequirement> requirements,
                   std::vector<MemoryReservation> reservations = {});

  // The constructor's checks, for a request whose public fields were changed
  // afterwards; the controller calls it on every request it receives.
  void validate() const;

  // Distinct required locations in first-requirement order.
  std::vector<ResidencyLocation> locations() const;

  friend bool operator==(const ResidencyRequest&, const ResidencyRequest&) = default;
};

}  // namespace fhelium::residency
