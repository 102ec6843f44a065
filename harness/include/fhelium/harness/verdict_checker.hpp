// Verdict checks, from outside the manager, of calls whose outcome follows
// from the snapshot taken just before them: whether an acquire, a hold or a
// reservation is granted, and what a budget refusal reports. A call refused
// with room to spare, granted over a value that is not there, or refused with
// figures the state does not have is caught even where no scenario states
// what to expect (a generated swarm run). Pure functions over tensor-free
// records; safe to call from any thread.
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

// A ResidencyBudgetError's figures.
struct BudgetRefusal {
  residency::ResidencyLocation location;
  std::int64_t budget_bytes = 0;  // INT64_MAX where the location has no budget
  std::int64_t used_bytes = 0;
  std::int64_t reserved_bytes = 0;
  std::int64_t requested_bytes = 0;
};

// Violations of "budget-refusal" by `refusal`, raised by one call made
// against the state `before` that charges one location at a time (adopt,
// reserve, or a single ensure, copy or move): its used and reserved bytes and
// budget must be the location's in `before` (an unbudgeted one's budget is
// INT64_MAX), and the request must not fit them. `requested`, when the call
// states its bytes (a reservation), must be the request.
std::vector<InvariantViolation> check_budget_refusal(const residency::ResidencySnapshot& before,
                                                     const BudgetRefusal& refusal,
                                                     std::optional<std::int64_t> requested = std::nullopt);

}  // namespace fhelium::harness
