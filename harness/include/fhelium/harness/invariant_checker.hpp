// InvariantChecker: the snapshot invariants of DESIGN.md, checked from outside
// the manager. It keeps what it needs of the previous snapshot to check that
// versions, clocks and peaks never move backwards. Not thread-safe: one
// checker per replay.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fhelium/residency/snapshot.hpp"

namespace fhelium::harness {

struct InvariantViolation {
  std::string invariant;  // short stable name, e.g. "budget-arithmetic"
  std::string detail;     // the numbers that broke it; handle ids in it are quoted ('3')
};

class InvariantChecker {
 public:
  std::vector<InvariantViolation> check(const residency::ResidencySnapshot& snapshot);
  // Individual checks evaluated so far.
  std::int64_t checks() const noexcept { return checks_; }

 private:
  void expect(bool holds, const char* invariant, const std::string& detail,
              std::vector<InvariantViolation>& violations);

  std::int64_t checks_ = 0;
  std::optional<std::uint64_t> last_version_;
  std::optional<std::int64_t> last_captured_ns_;
  std::map<residency::ResidencyLocation, std::pair<std::int64_t, std::int64_t>> last_peaks_;
};

}  // namespace fhelium::harness
