// Swarm runs: many generated workloads, each with its own random mix of
// operations and faults.
//
// Every run draws a configuration first -- which step kinds it uses and how
// often, which fault kinds are armed and how likely each is to fire (from
// one in a thousand to one in two), whether values are small real payloads
// or large virtual ones, which locations carry budgets and allocator
// capacities -- and then a workload of values, plans, transitions, leases,
// holds, reservations, scopes, controller requests, stream work and closes
// under that mix. Most runs switch some operations and fault kinds off
// entirely, so faults that would mask each other are tried apart (swarm
// testing). A run is an ordinary scenario: the replay checks every invariant
// after every step, every read's contents and every plan against its
// explanation; a step's own outcome is free (`error: maybe`), since under
// faults any of them may legitimately fail.
//
// Deterministic: the same seed, runs and steps give the same scenarios and
// the same report. A failing run is shrunk and written out as a scenario
// that replays the failure with `residency-replay FILE`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "fhelium/harness/replay.hpp"

namespace fhelium::harness {

struct SwarmScenario {
  std::string yaml;  // a complete scenario
  std::string mix;   // one line: the operations and faults this run uses
  std::size_t steps = 0;
};

// The scenario of one swarm run: `seed` picks the mix and the workload,
// `steps` is how many workload steps it has (a few closing steps follow).
SwarmScenario generate_swarm_scenario(std::uint64_t seed, std::size_t steps);

// The seed of run `index` of a swarm seeded with `seed`.
std::uint64_t swarm_run_seed(std::uint64_t seed, std::size_t index);

struct SwarmRun {
  std::size_t index = 0;
  std::uint64_t seed = 0;
  std::string mix;
  std::size_t steps = 0;  // steps replayed
  std::int64_t invariant_checks = 0;
  std::int64_t content_checks = 0;
  std::size_t faults_fired = 0;
  std::string verdict;     // passed | failed
  std::string failure;     // the replay's failure
  std::string signature;   // failure_signature of it
  std::string reproducer;  // the shrunk scenario's path (empty when none was written)
  std::size_t shrunk_steps = 0;
  std::size_t shrink_replays = 0;
};

struct SwarmReport {
  std::uint64_t seed = 0;
  std::size_t runs = 0;
  std::size_t steps_per_run = 0;
  std::size_t steps = 0;  // replayed, all runs together
  std::int64_t invariant_checks = 0;
  std::int64_t content_checks = 0;
  std::size_t faults_fired = 0;
  std::map<std::string, std::int64_t> faults_by_kind;  // "operation/effect" -> fires
  std::map<std::string, std::int64_t> error_paths;     // error kind -> steps that ended in it
  std::vector<SwarmRun> failures;
};

struct SwarmOptions {
  std::uint64_t seed = 1;
  std::size_t runs = 100;
  std::size_t steps = 200;  // workload steps per run
  // Where failing runs' shrunk scenarios are written (swarm-SEED-RUN.yaml);
  // empty: shrink, but write nothing.
  std::string reproducer_dir;
  std::size_t shrink_replays = 600;  // at most, per failing run
  ReplayOptions replay;              // runtime adaptor for every replay (tests)
  std::function<void(const SwarmRun&)> on_run;  // after each run
};

SwarmReport run_swarm(const SwarmOptions& options);

// The report as text (one line per failure, with the command that replays
// it) and as JSON; both are identical for identical runs.
std::string swarm_text(const SwarmReport& report);
std::string swarm_json(const SwarmReport& report);

}  // namespace fhelium::harness
