// Replay reports: a readable text summary, machine-readable JSON, JUnit XML
// for CI systems, and a Chrome trace-event timeline loadable in Perfetto.
// All outputs are deterministic functions of the results.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
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
// A snapshot as JSON keyed by name, so that two of them diff by JSON pointer:
// values by value name (or handle id), materializations and locations by
// location name; the manager id is left out (it differs between runs).
nlohmann::json snapshot_json(const residency::ResidencySnapshot& snapshot,
                             const std::map<std::string, std::string>& value_names = {});
// Differences between two JSON documents as "POINTER: BEFORE -> AFTER" lines.
std::vector<std::string> json_differences(const nlohmann::json& before, const nlohmann::json& after);

}  // namespace fhelium::harness
