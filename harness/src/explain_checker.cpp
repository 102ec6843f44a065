#include "fhelium/harness/explain_checker.hpp"

#include <algorithm>
#include <stdexcept>

namespace fhelium::harness {

using namespace residency;

std::vector<InvariantViolation> check_explained_run(const ExplainedRun& run) {
  if (run.explanation == nullptr || run.after == nullptr) {
    throw std::invalid_argument("check_explained_run needs an explanation and the state after the run");
  }
  const ResidencyPlanExplanation& explanation = *run.explanation;
  std::vector<InvariantViolation> violations;
  if (run.faults_fired || run.device_refused) return violations;
  if (!explanation.feasible) {
    if (run.whole_plan && !run.error_kind) {
      violations.push_back({"explain-execute", "explain found plan '" + explanation.plan_name + "' infeasible (" +
                                                   explanation.reason.value_or("no reason") +
                                                   "), but running it succeeded without faults"});
    }
    return violations;
  }
  if (run.error_kind) {
    if (*run.error_kind != "stale" && *run.error_kind != "invalid_argument") {
      violations.push_back(
          {"explain-execute", "explain found plan '" + explanation.plan_name +
                                  "' feasible, but running it without faults failed: " + run.error_message});
    }
    return violations;
  }
  if (run.whole_plan && run.transitions != nullptr) {
    const auto& explained = explanation.actions;
    const auto& ran = *run.transitions;
    if (explained.size() != ran.size()) {
      violations.push_back({"explained-transition", "explain described " + std::to_string(explained.size()) +
                                                        " actions, the run reported " + std::to_string(ran.size())});
    }
    const auto text = [](const std::optional<ResidencyLocation>& location) {
      return location ? location->name() : std::string("none");
    };
    for (std::size_t index = 0; index < std::min(explained.size(), ran.size()); ++index) {
      const ResidencyActionExplanation& said = explained[index];
      const ResidencyTransitionReport& did = ran[index];
      if (said.source == did.source && said.destination == did.destination && said.no_op == did.no_op) continue;
      violations.push_back({"explained-transition",
                            "action " + std::to_string(index) + ": explained " + text(said.source) + " -> " +
                                text(said.destination) + (said.no_op ? " (no-op)" : "") + ", ran " +
                                text(did.source) + " -> " + text(did.destination) + (did.no_op ? " (no-op)" : "")});
    }
  }
  for (const auto& location : run.after->locations) {
    const auto before = run.peaks_before.find(location.location);
    const std::int64_t previous = before == run.peaks_before.end() ? 0 : before->second;
    const auto predicted = explanation.predicted_peak(location.location);
    const std::string predicted_text = predicted ? std::to_string(*predicted) : "none";
    if (run.whole_plan) {
      // Every explained action ran: each peak becomes max(earlier, predicted).
      const std::int64_t expected = std::max(previous, predicted.value_or(0));
      if (location.peak_charged_bytes != expected) {
        violations.push_back({"predicted-peak", "at " + location.location.name() + ": observed peak " +
                                                    std::to_string(location.peak_charged_bytes) +
                                                    ", expected max(earlier " + std::to_string(previous) +
                                                    ", predicted " + predicted_text + ")"});
      }
      continue;
    }
    if (location.peak_charged_bytes <= previous) continue;
    if (!predicted || location.peak_charged_bytes > *predicted) {
      violations.push_back({"predicted-peak", "at " + location.location.name() + ": observed peak " +
                                                  std::to_string(location.peak_charged_bytes) + " > predicted " +
                                                  predicted_text});
    }
  }
  return violations;
}

}  // namespace fhelium::harness
