#include "detail/transition_rules.hpp"

#include "detail/check.hpp"

namespace fhelium::residency::detail {

std::string refusal_reason(const TransitionDecision& decision, const std::vector<ResidencyLocation>& protected_places) {
  const auto at = [&] { return decision.refused_at ? decision.refused_at->name() : std::string("?"); };
  switch (decision.refusal) {
    case Refusal::none: break;
    case Refusal::exclusive_replica: return "EnsureResident would replicate an EXCLUSIVE value; use MoveResident";
    case Refusal::no_source: return "value has no materialization or source";
    case Refusal::explicit_source_absent: return "explicit source " + at() + " is not resident";
    case Refusal::source_protected: return "source " + at() + " is protected";
    case Refusal::target_protected: return "materialization at " + at() + " is protected";
    case Refusal::final_must_preserve: return "cannot drop the final MUST_PRESERVE materialization";
    case Refusal::discard_protected: {
      std::string names;
      for (const auto& location : protected_places) names += (names.empty() ? "" : ", ") + location.name();
      return "discarded value has protected locations [" + names + "]";
    }
  }
  FHELIUM_CHECK(false, "reason asked for a decision that was not refused");
  return {};
}

}  // namespace fhelium::residency::detail
