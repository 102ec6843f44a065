// The runtime a scenario runs on: the simulated runtime (or the real torch
// one) under the fault-injecting runtime that carries the scenario's faults.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "fhelium/harness/fault_injecting_runtime.hpp"
#include "fhelium/harness/scenario.hpp"
#include "fhelium/harness/simulated_runtime.hpp"

namespace fhelium::harness::replay_detail {

// Why `scenario` cannot run on `runtime` ("simulated" or "torch"): an unknown
// runtime, a location the real machine lacks, or a simulated-only feature.
// Nothing when it can.
std::optional<std::string> unsupported(const Scenario& scenario, const std::string& runtime);

struct RuntimeStack {
  std::shared_ptr<SimulatedRuntime> simulated;  // null on the torch runtime
  std::shared_ptr<FaultInjectingRuntime> faults;  // what the manager talks to
  std::int64_t origin_ns = 0;  // the base clock at construction: reports count from here
};

// Builds the stack for `runtime`; throws what the runtimes throw for bad options.
// `wrap`, when set, wraps the base runtime under the fault layer.
RuntimeStack build_runtime(const Scenario& scenario, const std::string& runtime, std::uint64_t seed,
                           const std::function<std::shared_ptr<residency::DeviceRuntime>(
                               std::shared_ptr<residency::DeviceRuntime>)>& wrap = {});

}  // namespace fhelium::harness::replay_detail
