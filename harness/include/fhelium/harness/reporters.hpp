// Replay reports: a readable text summary, machine-readable JSON, JUnit XML
// for CI systems, and a Chrome trace-event timeline loadable in Perfetto.
// All outputs are deterministic functions of the results.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "fhelium/harness/replay.hpp"

namespace fhelium::harness {

// Multi-line per-scenario summary: verdict, steps, checks, faults, error paths, peaks.
std::string text_summary(const ScenarioResult& result);
nlohmann::json to_json(const ScenarioResult& result);
nlohmann::json to_json(const std::vector<ScenarioResult>& results);
std::string junit_xml(const std::vector<ScenarioResult>& results);
// One process per scenario; a "steps" track of step slices, one track per
// location with its transitions, and used/reserved counters per location.
// Each step occupies one millisecond of trace time; virtual time is in args.
nlohmann::json timeline(const std::vector<ScenarioResult>& results);

}  // namespace fhelium::harness
