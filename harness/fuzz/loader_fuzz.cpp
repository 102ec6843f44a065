// libFuzzer target: arbitrary bytes into the scenario loader. The only
// acceptable outcomes are a Scenario or a located ScenarioError; any other
// exception, a crash, a hang or an unbounded allocation is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fhelium/harness/scenario_loader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const fhelium::harness::Scenario scenario = fhelium::harness::parse_scenario(text, "fuzz.yaml");
    if (scenario.name.empty()) std::abort();  // a loaded scenario always has a name
  } catch (const fhelium::harness::ScenarioError& error) {
    if (error.line() < 0 || error.column() < 0) std::abort();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "loader threw something other than ScenarioError: %s\n", error.what());
    std::abort();
  }
  return 0;
}
