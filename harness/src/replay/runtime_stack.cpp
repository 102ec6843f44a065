#include "replay/runtime_stack.hpp"

#include "fhelium/residency.hpp"

namespace fhelium::harness::replay_detail {

using namespace residency;

namespace {

// Every location the scenario names anywhere.
std::vector<ResidencyLocation> referenced_locations(const Scenario& scenario) {
  std::vector<ResidencyLocation> result;
  const auto actions = [&](const std::vector<ActionDecl>& list) {
    for (const auto& action : list) {
      result.push_back(action.location);
      if (action.from) result.push_back(*action.from);
    }
  };
  for (const auto& [location, bytes] : scenario.budgets) result.push_back(location);
  for (const auto& [source, destinations] : scenario.fallback_tiers) {
    result.push_back(source);
    result.insert(result.end(), destinations.begin(), destinations.end());
  }
  for (const auto& value : scenario.values) result.push_back(value.at);
  for (const auto& fault : scenario.faults) {
    if (fault.location) result.push_back(*fault.location);
  }
  for (const auto& plan : scenario.plans) {
    for (const auto* list : {&plan.reclaim, &plan.enter, &plan.exit}) actions(*list);
    for (const auto& reservation : plan.reservations) result.push_back(reservation.location);
  }
  for (const auto& step : scenario.steps) {
    if (step.location) result.push_back(*step.location);
    if (step.from) result.push_back(*step.from);
    actions(step.actions);
    if (step.fault && step.fault->location) result.push_back(*step.fault->location);
    for (const auto& requirement : step.requirements) result.push_back(requirement.location);
    for (const auto& reservation : step.reservations) result.push_back(reservation.location);
  }
  return result;
}

}  // namespace

std::optional<std::string> unsupported(const Scenario& scenario, const std::string& runtime) {
  if (runtime == "simulated") return std::nullopt;
  if (runtime != "torch") return "unknown runtime '" + runtime + "'";
  const TorchRuntime probe;
  const auto missing = [&](const ResidencyLocation& location) -> std::optional<std::string> {
    if (location.is_cuda() && location.cuda_index() >= probe.cuda_device_count()) {
      return "runtime torch has no " + location.name();
    }
    if (location == PINNED_HOST && !probe.can_pin()) return std::string("runtime torch cannot pin host memory");
    return std::nullopt;
  };
  for (const auto& location : referenced_locations(scenario)) {
    if (auto reason = missing(location)) return reason;
  }
  for (const auto& step : scenario.steps) {
    if (step.kind == StepKind::advance || step.kind == StepKind::complete || step.kind == StepKind::work) {
      return std::string("step '") + to_string(step.kind) + "' needs the simulated runtime";
    }
    if (step.stream || !step.transfer_streams.empty() || !step.consumer_streams.empty()) {
      return std::string("streams are simulated");
    }
  }
  if (!scenario.capacity.empty()) return std::string("capacities are simulated");
  for (const auto& value : scenario.values) {
    if (value.virtual_payload) return "value '" + value.name + "' has a virtual payload, which is simulated";
  }
  return std::nullopt;
}

RuntimeStack build_runtime(const Scenario& scenario, const std::string& runtime, std::uint64_t seed,
                           const std::function<std::shared_ptr<DeviceRuntime>(std::shared_ptr<DeviceRuntime>)>& wrap) {
  RuntimeStack stack;
  std::shared_ptr<DeviceRuntime> base;
  if (runtime == "simulated") {
    SimulatedRuntimeOptions options;
    options.cuda_devices = scenario.cuda_devices;
    options.capacity_bytes = scenario.capacity;
    options.can_pin = scenario.can_pin;
    options.copy_ns_per_mib = scenario.copy_ns_per_mib;
    options.record_activity = true;  // for the timeline and the HTML report
    stack.simulated = std::make_shared<SimulatedRuntime>(options);
    base = stack.simulated;
  } else {
    base = std::make_shared<TorchRuntime>();
  }
  stack.origin_ns = base->now_ns();
  if (wrap) base = wrap(std::move(base));
  stack.faults = std::make_shared<FaultInjectingRuntime>(base, scenario.faults, seed);
  return stack;
}

}  // namespace fhelium::harness::replay_detail
