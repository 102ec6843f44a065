// libFuzzer target: whatever loads is replayed on the simulated runtime,
// bounded in steps, payload bytes and virtual time. The replay must end in a
// verdict (passed, failed, skipped) without crashing, hanging or throwing.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fhelium/harness/replay.hpp"
#include "fhelium/harness/scenario_loader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace fhelium::harness;
  Scenario scenario;
  try {
    scenario = parse_scenario(std::string(reinterpret_cast<const char*>(data), size), "fuzz.yaml");
  } catch (const ScenarioError&) {
    return 0;
  }
  // Tighter bounds than a scenario file may ask for, so each input runs fast.
  std::int64_t payload = 0;
  for (const auto& value : scenario.values) payload += value.elements;
  if (scenario.steps.size() > 64 || scenario.values.size() > 32 || payload > (1 << 18) || scenario.cuda_devices > 4) {
    return 0;
  }
  scenario.limits.virtual_ns = 1'000'000'000;
  scenario.runtime = "simulated";
  try {
    const ScenarioResult result = replay(scenario);
    if (result.verdict != "passed" && result.verdict != "failed" && result.verdict != "skipped") std::abort();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "replay threw instead of giving a verdict: %s\n", error.what());
    std::abort();
  }
  return 0;
}
