// The verdict check of lifetime calls, from outside the manager: whether an
// acquire, a hold or a reservation is granted follows from the snapshot taken
// just before it, so a call refused with room to spare, or granted over a
// value that is not there, is caught even where no scenario states what to
// expect (a generated swarm run). Pure function over tensor-free records; safe
// to call from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fhelium/harness/invariant_checker.hpp"
#include "fhelium/residency/location.hpp"
#include "fhelium/residency/model.hpp"
#include "fhelium/residency/snapshot.hpp"

namespace fhelium::harness {

struct LifetimeCall {
  enum class Kind { acquire, hold, reserve };
  Kind kind = Kind::acquire;
  // The handles an acquire or a hold names, in the order it names them.
  std::vector<residency::ResidencyHandle> handles;
  residency::ResidencyLocation location;
  std::int64_t bytes = 0;  // a reservation's
  // How the call ended: nullopt when it was granted, else its error kind
  // (error_kind.hpp).
  std::optional<std::string> error_kind;
};

// Violations of "lifetime-verdict" by `call`, made against the state
// `before`:
//  - an acquire or hold is granted exactly when every handle names a live
//    value of this manager resident at the location; when one does not, the
//    first such handle decides the error: `handle` for a value unknown,
//    foreign or discarded, `unavailable` for one not resident there;
//  - a reservation is granted exactly when the location admits its bytes: at
//    most the remaining budget, and never past INT64_MAX in total; `budget`
//    otherwise.
// Only those verdicts are judged: a call failing with any other kind (an
// invalid argument or stream, a closed manager) is not a violation.
std::vector<InvariantViolation> check_lifetime_verdict(const residency::ResidencySnapshot& before,
                                                       const LifetimeCall& call);

}  // namespace fhelium::harness
