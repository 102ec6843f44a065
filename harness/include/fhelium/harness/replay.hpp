// The replay engine: runs one scenario against a fresh manager on a simulated
// (or real) runtime stacked under a fault-injecting runtime, checks every
// step's expectations, the invariants after every step, and the contents of
// every value read, and returns a deterministic result record.
//
// Same scenario, same seed, same runtime: the same ScenarioResult, field for
// field (the result holds no wall-clock time and no process-specific ids).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fhelium/harness/scenario.hpp"
#include "fhelium/residency/runtime.hpp"
#include "fhelium/residency/snapshot.hpp"

namespace fhelium::harness {

struct ReplayOptions {
  std::optional<std::uint64_t> seed;     // overrides the scenario's seed
  std::optional<std::string> runtime;    // "simulated" or "torch"; overrides the scenario's
  // Receives one line per step when set (verbose mode).
  std::function<void(const std::string&)> log;
  // Called after each step with (steps done, steps in the scenario), for
  // progress displays.
  std::function<void(std::size_t, std::size_t)> progress;
  // Wraps the base runtime (simulated or torch) before the fault layer:
  // tests put a deliberately broken runtime here.
  std::function<std::shared_ptr<residency::DeviceRuntime>(std::shared_ptr<residency::DeviceRuntime>)> wrap_runtime;
};

// Times below are virtual nanoseconds since the start of the run.

struct FiredFaultRecord {
  std::string rule;
  std::string operation;  // a runtime operation, or "load" / "adopt" for source faults
  std::string effect;     // fail, delay, never_complete, alias; for loads also reenter, wrong_size, ...
  std::int64_t call_index = 0;
  std::size_t step = 0;
  std::string detail;
  std::int64_t virtual_ns = 0;
};

struct LocationSample {
  std::string location;
  std::int64_t used_bytes = 0;
  std::int64_t reserved_bytes = 0;
  std::optional<std::int64_t> budget_bytes;
  std::int64_t peak_charged_bytes = 0;
};

// One transition a step completed, as the manager's trace timed it.
struct TransitionSpan {
  std::string description;  // in value names, as in StepRecord::transitions
  std::string location;     // its destination, else its source; "values" for a discard
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
};

// A materialization protected after a step: read by leases, held, or
// waiting for completion events.
struct ProtectionSample {
  std::string value;
  std::string location;
  std::int64_t uses = 0;
  std::int64_t holds = 0;
  std::int64_t pending_events = 0;
};

// A copy, a piece of stream work or a completion event on the simulated
// runtime (none on the torch runtime).
struct StreamSlice {
  std::string kind;         // "copy", "work" or "event"
  std::string stream;       // "cuda:N stream K", or "host copies"
  std::string destination;  // copies only
  std::int64_t bytes = 0;   // copies only
  std::int64_t start_ns = 0;
  std::optional<std::int64_t> end_ns;  // absent while it never ends
};

struct StepRecord {
  std::size_t index = 0;
  int line = 0;
  std::string kind;
  std::string outcome;  // "ok", "no-op" or the error kind
  std::string message;  // error message or report reason
  std::int64_t started_ns = 0;  // virtual time when the step began
  std::int64_t virtual_ns = 0;  // and when it ended
  std::uint64_t state_version = 0;
  std::vector<std::string> transitions;  // described actions completed by this step
  std::vector<TransitionSpan> spans;     // the same transitions, timed
  std::vector<LocationSample> locations;  // accounting after the step
  std::vector<ProtectionSample> protections;  // protected materializations after the step
};

struct ScenarioResult {
  std::string file;
  std::string name;
  std::string description;
  std::uint64_t seed = 0;
  std::string runtime;
  std::string verdict;  // passed | failed | skipped
  std::string failure;  // why it failed or was skipped
  std::optional<std::size_t> failed_step;
  int failed_line = 0;
  std::size_t steps_run = 0;
  std::int64_t invariant_checks = 0;
  std::int64_t content_checks = 0;
  std::vector<FiredFaultRecord> faults;
  std::map<std::string, std::int64_t> error_paths;  // error kind reached -> times
  std::vector<std::pair<std::string, std::int64_t>> peak_charged;  // final peak per location
  std::vector<StepRecord> steps;
  std::vector<StreamSlice> stream_activity;
  // The last snapshot the run took (absent when the manager was closed or
  // never built), with value handles named by the scenario's value names.
  std::optional<residency::ResidencySnapshot> final_snapshot;
  std::map<std::string, std::string> value_names;  // handle id -> value name

  bool passed() const { return verdict != "failed"; }
};

ScenarioResult replay(const Scenario& scenario, const ReplayOptions& options = {});

}  // namespace fhelium::harness
