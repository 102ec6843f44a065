// Recording a live program: a ScenarioRecorder observes a manager's public
// calls (ManagerOptions::operation_observer, observer.hpp) and writes them
// out as a scenario that replays on the simulated runtime.
//
//   RecorderOptions recording;
//   recording.name = "serving-loop";
//   ScenarioRecorder recorder(recording);
//   ManagerOptions options;
//   options.budgets = {{cuda_location(0), 8 << 30}};
//   recorder.attach(options);
//   ResidencyManager manager(std::move(options));
//   ... the program ...
//   std::ofstream("serving-loop.yaml") << recorder.yaml();
//
// What is recorded: the budgets and trace capacity; every value adopted or
// registered, by its spec (type, bytes charged, replica mode, location), not
// its contents - the replay fills values with its own deterministic contents
// and checks every read against them; every transition, plan, explain, scope,
// lease with its streams, consumer stream, hold, reservation, release,
// abandonment and close, in the order the calls ended, with its outcome: the
// step expects the error kind the live call raised, or success (and no-op
// where the live transition was one). With `exact_outcomes = false` every
// step takes `error: maybe` instead, for replays under faults.
//
// What a recording cannot carry is written into the YAML as a comment (and
// listed by notes()): streams of a non-CUDA device (left out), calls that
// name handles the recording never saw inside lists (skipped), and failures
// of the live device or of a source's own load, which the simulated
// runtime does not reproduce (their steps take `error: maybe`). A value's
// logical size is recorded as its charged size (the replay charges the
// same bytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "fhelium/residency/manager.hpp"
#include "fhelium/residency/observer.hpp"

namespace fhelium::harness {

struct RecorderOptions {
  std::string name = "recorded";
  std::string description = "recorded from a live program";
  // Steps expect the live outcome; false: every step `error: maybe`.
  bool exact_outcomes = true;
  // CUDA devices of the replay's simulated runtime; default: as many as the
  // recorded manager's runtime has.
  std::optional<int> cuda_devices;
};

class ScenarioRecorder {
 public:
  explicit ScenarioRecorder(RecorderOptions options = {});
  ScenarioRecorder(const ScenarioRecorder&) = delete;
  ScenarioRecorder& operator=(const ScenarioRecorder&) = delete;

  // Sets `options.operation_observer` to this recorder (it must outlive the
  // manager's calls) and records the budgets, the trace capacity and the
  // runtime's CUDA device count and pinning support (of default_runtime()
  // when `options.runtime` is null), so the replay's simulated device
  // refuses what the live one did. Throws std::logic_error when attached twice.
  void attach(residency::ManagerOptions& options);

  // The scenario's name for the value `handle` (default v1, v2, ... in the
  // order values were created). Throws std::invalid_argument for a name that
  // is empty, not [A-Za-z0-9_.-], or already given to another value.
  void name_value(const residency::ResidencyHandle& handle, const std::string& name);

  // The scenario recorded so far (thread-safe; the program may keep running).
  std::string yaml() const;
  std::size_t calls() const;
  std::vector<std::string> notes() const;

 private:
  void record(const residency::ObservedOperation& operation);

  const RecorderOptions options_;
  mutable std::mutex mutex_;
  bool attached_ = false;
  residency::LocationBudgets budgets_;
  std::int64_t trace_capacity_ = 4096;
  int cuda_devices_ = 0;
  bool can_pin_ = true;
  std::string manager_id_;
  std::vector<residency::ObservedOperation> operations_;
  std::map<std::string, std::string> names_;  // handle id -> value name
};

}  // namespace fhelium::harness
