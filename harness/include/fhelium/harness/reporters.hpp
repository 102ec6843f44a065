// Replay reports: a readable text summary, machine-readable JSON, JUnit XML
// for CI systems, a Chrome trace-event timeline loadable in Perfetto, and an
// HTML page with a picture of every run.
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
// A Chrome Trace Event Format timeline on virtual time (microseconds since
// the start of each run), loadable in Perfetto and chrome://tracing. One
// process per scenario with: a "steps" track (one slice per step, named by
// kind and outcome); one track per location with the transitions that ended
// there; one track per stream with its copies, consumer work and recorded
// events; protection spans (reads, holds, pending completion events) per
// value and location as async slices; used, reserved, budget and peak
// counters per location; fired faults as instant events.
nlohmann::json timeline(const std::vector<ScenarioResult>& results);
// A self-contained HTML page (inline SVG and CSS, no network) with, per
// scenario, bytes over virtual time per location (used, reserved, budget
// line, peak), fault markers and the step table with verdicts.
std::string html_report(const std::vector<ScenarioResult>& results);
// A snapshot as JSON keyed by name, so that two of them diff by JSON pointer:
// values by value name (or handle id), materializations and locations by
// location name; the manager id is left out (it differs between runs).
nlohmann::json snapshot_json(const residency::ResidencySnapshot& snapshot,
                             const std::map<std::string, std::string>& value_names = {});
// Differences between two JSON documents as "POINTER: BEFORE -> AFTER" lines.
std::vector<std::string> json_differences(const nlohmann::json& before, const nlohmann::json& after);

}  // namespace fhelium::harness
