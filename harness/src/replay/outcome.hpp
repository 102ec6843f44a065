// A step's outcome: what the operation returned, or its error classified
// into the fields scenario expectations speak of (kind, injected or not,
// plan phase and index, budget numbers, stale versions).
#pragma once

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "fhelium/residency.hpp"

namespace fhelium::harness::replay_detail {

struct Classified {
  std::string kind;
  std::string message;
  bool injected = false;
  std::optional<std::string> phase;
  std::optional<std::int64_t> failed_index;
  std::optional<std::int64_t> committed;
  std::optional<residency::ResidencyAction> failed_action;
  std::optional<std::string> failed_reservation;  // label
  std::optional<residency::ResidencyLocation> budget_location;
  std::optional<std::int64_t> budget_bytes, used_bytes, reserved_bytes, requested_bytes;
  std::optional<std::uint64_t> stale_expected, stale_actual;
};

// Sorts `error` into the fields above; never throws.
Classified classify(const std::exception_ptr& error);

std::string name_of(const std::optional<residency::ResidencyLocation>& location);

struct Outcome {
  std::optional<Classified> error;
  bool no_op = false;
  std::optional<residency::ResidencyLocation> source, destination;
  std::optional<std::string> reason;
  std::optional<std::int64_t> committed;
  std::optional<residency::ResidencyPlanExplanation> explanation;
  std::optional<residency::ResidencyDecision> decision;
  std::optional<std::vector<residency::ResidencyTransitionReport>> reports;  // the step's transition report(s)
};

}  // namespace fhelium::harness::replay_detail
