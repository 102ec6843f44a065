#include "fhelium/harness/fault_coverage.hpp"

#include <stdexcept>

#include "fhelium/harness/error_kind.hpp"
#include "fhelium/harness/fault_injecting_runtime.hpp"
#include "fhelium/harness/scenario.hpp"

namespace fhelium::harness {

std::vector<FaultPair> fault_model_pairs() {
  std::vector<FaultPair> pairs;
  constexpr FaultOperation operations[] = {FaultOperation::copy,
                                           FaultOperation::record_event,
                                           FaultOperation::query_event,
                                           FaultOperation::synchronize_event,
                                           FaultOperation::synchronize_stream,
                                           FaultOperation::allocator_stats};
  constexpr FaultEffect effects[] = {FaultEffect::fail, FaultEffect::delay, FaultEffect::never_complete,
                                     FaultEffect::alias};
  for (const FaultOperation operation : operations) {
    for (const FaultEffect effect : effects) {
      FaultRule rule;
      rule.name = "model";
      rule.operation = operation;
      rule.effect = effect;
      rule.delay_ns = 1;
      try {
        rule.validate();
      } catch (const std::invalid_argument&) {
        continue;  // a combination no rule may have
      }
      pairs.emplace_back(to_string(operation), to_string(effect));
    }
  }
  for (const char* effect : {"fail", "reenter", "alias"}) pairs.emplace_back("load", effect);
  for (const char* kind : wrong_load_kinds) pairs.emplace_back("load", std::string("wrong_") + kind);
  pairs.emplace_back("adopt", "alias");
  return pairs;
}

std::vector<FaultPair> FaultCoverage::never_fired() const {
  std::vector<FaultPair> result;
  for (const auto& [pair, count] : fired) {
    if (count == 0) result.push_back(pair);
  }
  return result;
}

std::vector<std::string> FaultCoverage::never_reached() const {
  std::vector<std::string> result;
  for (const auto& [kind, count] : error_paths) {
    if (count == 0) result.push_back(kind);
  }
  return result;
}

FaultCoverage fault_coverage(const std::vector<ScenarioResult>& results) {
  FaultCoverage coverage;
  for (const auto& pair : fault_model_pairs()) coverage.fired[pair] = 0;
  for (const auto& kind : error_kinds()) coverage.error_paths[kind] = 0;
  for (const auto& result : results) {
    for (const auto& fault : result.faults) coverage.fired[{fault.operation, fault.effect}] += 1;
    for (const auto& [kind, count] : result.error_paths) coverage.error_paths[kind] += count;
  }
  return coverage;
}

nlohmann::json to_json(const FaultCoverage& coverage) {
  nlohmann::json pairs = nlohmann::json::array();
  for (const auto& [pair, count] : coverage.fired) {
    pairs.push_back({{"operation", pair.first}, {"effect", pair.second}, {"fired", count}});
  }
  nlohmann::json never_fired = nlohmann::json::array();
  for (const auto& [operation, effect] : coverage.never_fired()) never_fired.push_back(operation + "/" + effect);
  return {{"pairs", pairs},
          {"error_paths", coverage.error_paths},
          {"never_fired", never_fired},
          {"never_reached", coverage.never_reached()}};
}

}  // namespace fhelium::harness
