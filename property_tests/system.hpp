// The system under test for the model-based properties: a manager over a
// fault-injecting simulated runtime, the handles and lifetimes commands
// created, an invariant checker, and a running reproducer. Every command
// appends the scenario steps it performed (with the model's predicted
// outcome as the expectation), so a failing sequence can be written out as a
// ready-to-run scenario YAML file.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fhelium/harness/fault_injecting_runtime.hpp"
#include "fhelium/harness/invariant_checker.hpp"
#include "fhelium/harness/simulated_runtime.hpp"
#include "fhelium/residency.hpp"
#include "model.hpp"

namespace fhelium::property {

struct System {
  System();
  System(const System&) = delete;
  System& operator=(const System&) = delete;

  // How the manager's diagnostic sink behaves: records quietly, throws, or
  // calls the manager back (which the manager must refuse).
  enum class SinkMode { quiet, throws, reenters };
  static const char* to_string(SinkMode mode);
  SinkMode sink_mode = SinkMode::quiet;
  std::int64_t sink_calls = 0;
  std::int64_t sink_reentries_refused = 0;
  std::int64_t sink_reentries_accepted = 0;

  std::shared_ptr<harness::SimulatedRuntime> simulated;
  std::shared_ptr<harness::FaultInjectingRuntime> faults;
  std::unique_ptr<residency::ResidencyManager> manager;
  std::vector<residency::ResidencyHandle> handles;
  std::map<std::size_t, residency::ResidencyLease> leases;
  std::map<std::size_t, residency::ResidencyHold> holds;
  std::map<std::size_t, residency::ResidencyReservation> reservations;
  harness::InvariantChecker checker;
  std::uint64_t last_version = 0;
  std::map<ResidencyLocation, std::int64_t> last_peaks;
  int fault_rules = 0;
  std::map<std::size_t, std::string> lifetime_names;  // model lifetime id -> reproducer name
  std::size_t names_issued = 0;
  std::vector<std::string> values_yaml;
  std::vector<std::string> plans_yaml;
  std::vector<std::string> steps_yaml;

  // A handle for value index `value`, or one the manager never issued.
  residency::ResidencyHandle handle(std::size_t value) const;
  // Contents every value of index `value` must have.
  static residency::ResidentValue contents(std::size_t value, std::int64_t charge);
  // Places `value` at `location` outside the manager (not through the fault layer).
  residency::ResidentValue placed(const residency::ResidentValue& value, const ResidencyLocation& location);

  // A fresh lifetime name for the reproducer (ids of failed calls are reused by the model).
  std::string name_lifetime(const std::string& kind) { return kind + std::to_string(names_issued++); }
  // Appends a step; `outcome` becomes its expectation.
  void log(const std::string& step, const std::string& outcome);
  // The scenario YAML reproducing the commands run so far.
  std::string reproducer() const;
  // Writes the reproducer to $RESIDENCY_REPRO_FILE when set; returns the text.
  std::string write_reproducer() const;

  // Fails the property (with the reproducer) unless the manager's snapshot
  // equals the model and every invariant holds.
  void check_against(const Model& model);
  [[noreturn]] void fail(const std::string& message) const;
};

// Runs `operation`, returning "ok" or the kind of the exception it threw
// (the replay engine's names: budget, handle, in_use, out_of_memory, ...).
template <class F>
std::string outcome_of(F&& operation);
std::string classify_current_exception();

template <class F>
std::string outcome_of(F&& operation) {
  try {
    operation();
    return "ok";
  } catch (...) {
    return classify_current_exception();
  }
}

std::string yaml_location(const ResidencyLocation& location);
std::string yaml_primitive(const Primitive& primitive);

}  // namespace fhelium::property
