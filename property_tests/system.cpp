#include "system.hpp"

#include <stdexcept>

#include "fhelium/harness/error_kind.hpp"

#include <ATen/ops/arange.h>
#include <rapidcheck.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace fhelium::property {

using namespace residency;

System::System()
    : simulated(std::make_shared<harness::SimulatedRuntime>()),
      faults(std::make_shared<harness::FaultInjectingRuntime>(simulated, std::vector<harness::FaultRule>{}, 1)) {
  ManagerOptions options;
  options.budgets = budgets();
  options.runtime = faults;
  options.diagnostic_sink = [this](const std::string&) {
    ++sink_calls;
    if (sink_mode == SinkMode::throws) throw std::runtime_error("diagnostic sink failed");
    if (sink_mode == SinkMode::reenters) {
      try {
        manager->snapshot();
        ++sink_reentries_accepted;
      } catch (const ResidencyReentrancyError&) {
        ++sink_reentries_refused;
        throw;  // the manager must absorb this too
      }
    }
  };
  manager = std::make_unique<ResidencyManager>(std::move(options));
}

const char* System::to_string(SinkMode mode) {
  switch (mode) {
    case SinkMode::quiet: return "records quietly";
    case SinkMode::throws: return "throws";
    case SinkMode::reenters: return "re-enters the manager";
  }
  return "?";
}

ResidencyHandle System::handle(std::size_t value) const {
  if (value < handles.size()) return handles[value];
  return ResidencyHandle{manager->manager_id(), "never-issued-" + std::to_string(value), "Tensor"};
}

ResidentValue System::contents(std::size_t value, std::int64_t charge) {
  const at::Tensor data = at::arange(charge / 4, at::TensorOptions().dtype(at::kInt)).add_(static_cast<int>(value) * 7919);
  return ResidentValue("Tensor", {{"data", data}}, {{"name", "v" + std::to_string(value)}});
}

ResidentValue System::placed(const ResidentValue& value, const ResidencyLocation& location) {
  if (location == PAGEABLE_HOST) return value;
  return simulated->copy_to(value, location, std::nullopt);
}

std::string yaml_location(const ResidencyLocation& location) { return location.name(); }

std::string yaml_primitive(const Primitive& primitive) {
  const std::string value = "v" + std::to_string(primitive.value);
  switch (primitive.kind) {
    case PrimitiveKind::ensure: return "{ensure: {value: " + value + ", at: " + primitive.location.name() + "}}";
    case PrimitiveKind::move:
      return "{move: {value: " + value + ", to: " + primitive.location.name() +
             (primitive.from ? ", from: " + primitive.from->name() : "") + "}}";
    case PrimitiveKind::drop: return "{drop: {value: " + value + ", at: " + primitive.location.name() + "}}";
    case PrimitiveKind::discard: return "{discard: {value: " + value + "}}";
  }
  return "";
}

void System::log(const std::string& step, const std::string& outcome) {
  std::string line = "  - " + step;
  if (outcome == "no-op") line += "\n    expect: {no_op: true}";
  else if (outcome != "ok") line += "\n    expect: {error: " + outcome + "}";
  steps_yaml.push_back(line);
}

std::string System::reproducer() const {
  std::ostringstream out;
  out << "name: property-counterexample\n"
         "description: >\n"
         "  Shrunk counterexample found by the model-based property tests. Each step's\n"
         "  expectation is the reference model's prediction.\n"
         "manager:\n  budgets: {";
  bool first = true;
  for (const auto& [location, bytes] : budgets()) {
    out << (first ? "" : ", ") << location.name() << ": " << bytes;
    first = false;
  }
  out << "}\nruntime: {cuda_devices: 2}\n";
  if (!values_yaml.empty()) {
    out << "values:\n";
    for (const auto& value : values_yaml) out << value << "\n";
  }
  if (!plans_yaml.empty()) {
    out << "plans:\n";
    for (const auto& plan : plans_yaml) out << plan << "\n";
  }
  out << "steps:\n";
  if (steps_yaml.empty()) out << "  - snapshot: {}\n";
  for (const auto& step : steps_yaml) out << step << "\n";
  return out.str();
}

std::string System::write_reproducer() const {
  const std::string text = reproducer();
  if (const char* path = std::getenv("RESIDENCY_REPRO_FILE")) {
    std::ofstream(path) << text;
  }
  return text;
}

void System::fail(const std::string& message) const {
  const std::string text = write_reproducer();
  RC_FAIL(message + "\n--- reproducer scenario ---\n" + text);
}

namespace {

std::string join(const std::vector<ResidencyLocation>& locations) {
  std::string out = "[";
  for (const auto& location : locations) out += (out.size() > 1 ? ", " : "") + location.name();
  return out + "]";
}

}  // namespace

void System::check_against(const Model& model) {
  const ResidencySnapshot snapshot = manager->snapshot();
  // Every diagnostic is recorded and reaches the sink once, whatever the sink does.
  const auto recorded = static_cast<std::int64_t>(manager->diagnostics().size());
  if (recorded != std::min<std::int64_t>(model.diagnostics, 256) || sink_calls != model.diagnostics) {
    fail("diagnostics: manager recorded " + std::to_string(recorded) + " and called the sink " +
         std::to_string(sink_calls) + " times, model predicts " + std::to_string(model.diagnostics));
  }
  if (sink_reentries_accepted != 0) fail("a diagnostic sink's call back into the manager was accepted");
  if (snapshot.state_version != model.version) {
    fail("state_version " + std::to_string(snapshot.state_version) + ", model predicts exactly " +
         std::to_string(model.version));
  }
  for (const auto& violation : checker.check(snapshot)) {
    fail("invariant " + violation.invariant + " violated: " + violation.detail);
  }
  if (snapshot.values.size() != model.values.size()) {
    fail("snapshot has " + std::to_string(snapshot.values.size()) + " values, model " +
         std::to_string(model.values.size()));
  }
  for (std::size_t i = 0; i < model.values.size(); ++i) {
    const ModelValue& want = model.values[i];
    const ResidencyValueSnapshot& got = snapshot.values[i];
    const std::string who = "value v" + std::to_string(i);
    std::vector<ResidencyLocation> places;
    for (const auto& item : got.materializations) places.push_back(item.location);
    if (places != want.at) fail(who + " is at " + join(places) + ", model says " + join(want.at));
    if (got.discarded != want.discarded) fail(who + " discarded flag differs from the model");
    if (got.has_source != want.source) fail(who + " has_source differs from the model");
    for (const auto& item : got.materializations) {
      const auto expect = [&](const char* what, std::int64_t actual, std::int64_t predicted) {
        if (actual != predicted) {
          fail(who + " at " + item.location.name() + ": " + what + " " + std::to_string(actual) + ", model " +
               std::to_string(predicted));
        }
      };
      expect("use_count", item.use_count, model.counted(i, &ModelValue::uses, item.location));
      expect("hold_count", item.hold_count, model.counted(i, &ModelValue::holds, item.location));
      expect("pending_event_count", item.pending_event_count, model.counted(i, &ModelValue::pending, item.location));
      expect("charged_nbytes", item.charged_nbytes, want.charge);
    }
  }
  std::vector<ResidencyLocation> registered;
  for (const auto& location : snapshot.locations) registered.push_back(location.location);
  if (registered != model.registered) {
    fail("registered locations " + join(registered) + ", model " + join(model.registered));
  }
  for (const auto& location : snapshot.locations) {
    const ModelLocation& want = model.locations.at(location.location);
    const auto expect = [&](const char* what, std::int64_t actual, std::int64_t predicted) {
      if (actual != predicted) {
        fail(location.location.name() + ": " + what + " " + std::to_string(actual) + ", model " +
             std::to_string(predicted));
      }
    };
    expect("used_bytes", location.used_bytes, want.used);
    expect("reserved_bytes", location.reserved_bytes, want.reserved);
    expect("peak_used_bytes", location.peak_used_bytes, want.peak_used);
    expect("peak_charged_bytes", location.peak_charged_bytes, want.peak_charged);
    if (location.budget_bytes != want.budget) fail(location.location.name() + ": budget differs from the model");
  }
  if (snapshot.reservations.size() != model.reservations.size()) fail("reservation count differs from the model");
  last_version = snapshot.state_version;
  last_peaks.clear();
  for (const auto& location : snapshot.locations) last_peaks[location.location] = location.peak_charged_bytes;
}

std::string classify_current_exception() { return harness::error_kind(std::current_exception()); }

}  // namespace fhelium::property
