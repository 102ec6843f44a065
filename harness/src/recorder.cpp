#include "fhelium/harness/recorder.hpp"

#include <algorithm>
#include <set>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "fhelium/harness/error_kind.hpp"

namespace fhelium::harness {

using namespace residency;

namespace {

bool valid_name(const std::string& name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-' || c == '.';
  });
}

// YAML-safe scalar: plain when it is a simple name, else double-quoted.
std::string scalar(const std::string& text) {
  if (valid_name(text) && text != "true" && text != "false" && text != "null" && text != "~") return text;
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') quoted += '\\';
    if (c == '\n') {
      quoted += "\\n";
      continue;
    }
    quoted += c;
  }
  return quoted + "\"";
}

// Turns the observed calls into scenario text; one instance per yaml().
class Writer {
 public:
  Writer(const RecorderOptions& options, const LocationBudgets& budgets, std::int64_t trace_capacity, int cuda_devices,
         bool can_pin, const std::string& manager_id, const std::map<std::string, std::string>& names)
      : options_(options),
        budgets_(budgets),
        trace_capacity_(trace_capacity),
        cuda_devices_(cuda_devices),
        can_pin_(can_pin),
        manager_id_(manager_id),
        names_(names) {
    for (const auto& [id, name] : names) taken_.insert(name);
  }

  std::string write(const std::vector<ObservedOperation>& operations) {
    for (const auto& operation : operations) step(operation);
    std::ostringstream out;
    out << "name: " << scalar(options_.name) << "\n"
        << "description: " << scalar(options_.description) << "\n";
    for (const auto& note : notes_) out << "# note: " << note << "\n";
    out << "manager: {trace_capacity: " << trace_capacity_;
    if (!budgets_.empty()) {
      out << ", budgets: {";
      for (std::size_t i = 0; i < budgets_.size(); ++i) {
        out << (i == 0 ? "" : ", ") << budgets_[i].first.name() << ": " << budgets_[i].second;
      }
      out << "}";
    }
    out << "}\n"
        << "runtime: {kind: simulated, cuda_devices: " << cuda_devices_ << ", can_pin: " << (can_pin_ ? "true" : "false")
        << "}\n";
    if (!values_.empty()) {
      out << "values:\n";
      for (const auto& line : values_) out << "  " << line << "\n";
    } else {
      out << "values: {}\n";
    }
    if (!plans_.empty()) {
      out << "plans:\n";
      for (const auto& text : plans_) out << text;
    }
    out << "steps:\n";
    if (steps_.empty()) out << "  []\n";
    for (const auto& text : steps_) out << text;
    return out.str();
  }

  const std::vector<std::string>& notes() const { return notes_; }

 private:
  // --- names ---------------------------------------------------------------

  std::string fresh_value_name(const std::string& stem) {
    for (int n = 1;; ++n) {
      std::string name = stem + std::to_string(n);
      if (taken_.insert(name).second) return name;
    }
  }

  std::string value_name(const ResidencyHandle& handle) {
    const auto found = names_.find(handle.handle_id);
    if (found != names_.end()) return found->second;
    std::string name = fresh_value_name("v");
    names_[handle.handle_id] = name;
    return name;
  }

  // `value: NAME`, or the handle written out when the recording never saw it.
  std::string value_or_handle(const ResidencyHandle& handle) {
    if (handle.manager_id == manager_id_ && created_.count(handle.handle_id) != 0) {
      return "value: " + value_name(handle);
    }
    return "handle: {id: " + scalar(handle.handle_id) + ", manager: " +
           (handle.manager_id == manager_id_ ? "this" : "foreign") + ", type: " + scalar(handle.value_type) + "}";
  }

  // The value's name inside lists, which take names only; empty when unknown.
  std::string known(const ResidencyHandle& handle) {
    if (handle.manager_id != manager_id_ || created_.count(handle.handle_id) == 0) return {};
    return value_name(handle);
  }

  std::string lifetime(const char* prefix, std::uint64_t id) { return std::string(prefix) + std::to_string(id); }

  std::string stream(const c10::Stream& stream) {
    return "{device: " + std::to_string(stream.device_index()) + ", id: " + std::to_string(stream.id()) + "}";
  }

  // ", stream: {...}" for a CUDA stream; a note for another device's.
  std::string stream_arg(const std::optional<c10::Stream>& value, const char* key = "stream") {
    if (!value) return "";
    if (!value->device().is_cuda()) {
      note("a stream of " + value->device().str() + " is left out (the scenario format has CUDA streams only)");
      lossy_ = true;
      return "";
    }
    return std::string(", ") + key + ": " + stream(*value);
  }

  std::string streams_arg(const TransferStreams& streams) {
    std::vector<std::string> entries;
    for (const auto& [location, value] : streams) {
      if (!value.device().is_cuda()) {
        note("a transfer stream of " + value.device().str() + " is left out");
        lossy_ = true;
        continue;
      }
      entries.push_back(location.name() + ": " + stream(value));
    }
    if (entries.empty()) return "";
    std::string text = ", streams: {";
    for (std::size_t i = 0; i < entries.size(); ++i) text += (i == 0 ? "" : ", ") + entries[i];
    return text + "}";
  }

  std::string version_arg(const std::optional<std::uint64_t>& version) {
    return version ? ", expected_version: " + std::to_string(*version) : "";
  }

  void note(const std::string& text) {
    if (std::find(notes_.begin(), notes_.end(), text) == notes_.end()) notes_.push_back(text);
  }

  // --- actions and plans ----------------------------------------------------

  // One action as the scenario writes it; empty when it names an unknown handle.
  std::string action(const ResidencyAction& item) {
    const std::string name = known(action_handle(item));
    if (name.empty()) return {};
    if (const auto* ensure = std::get_if<EnsureResident>(&item)) {
      return "{ensure: {value: " + name + ", at: " + ensure->location.name() + "}}";
    }
    if (const auto* move = std::get_if<MoveResident>(&item)) {
      return "{move: {value: " + name + ", to: " + move->to.name() +
             (move->from_location ? ", from: " + move->from_location->name() : "") + "}}";
    }
    if (const auto* drop = std::get_if<DropResident>(&item)) {
      return "{drop: {value: " + name + ", at: " + drop->location.name() + "}}";
    }
    return "{discard: {value: " + name + "}}";
  }

  // "[...]", or nullopt when an action names a handle the recording never saw.
  std::optional<std::string> actions(const std::vector<ResidencyAction>& items) {
    std::string text = "[";
    for (std::size_t i = 0; i < items.size(); ++i) {
      const std::string written = action(items[i]);
      if (written.empty()) return std::nullopt;
      text += (i == 0 ? "" : ", ") + written;
    }
    return text + "]";
  }

  // Declares the plan (once per distinct plan) and returns its scenario name.
  std::optional<std::string> plan(const ResidencyPlan& plan) {
    const auto reclaim = actions(plan.reclaim), enter = actions(plan.enter), exit = actions(plan.exit);
    if (!reclaim || !enter || !exit) return std::nullopt;
    std::string reservations = "[";
    for (std::size_t i = 0; i < plan.reservations.size(); ++i) {
      const MemoryReservation& item = plan.reservations[i];
      reservations += std::string(i == 0 ? "" : ", ") + "{at: " + item.location.name() + ", bytes: " +
                      std::to_string(item.nbytes) + ", label: " + scalar(item.label) + "}";
    }
    reservations += "]";
    const std::string body = "    reclaim: " + *reclaim + "\n    reservations: " + reservations + "\n    enter: " +
                             *enter + "\n    exit: " + *exit + "\n";
    for (const auto& [name, declared] : plan_bodies_) {
      if (declared == body && name.rfind(plan.name, 0) == 0) return name;
    }
    std::string name = valid_name(plan.name) ? plan.name : "plan";
    for (int n = 2; plan_bodies_.count(name) != 0; ++n) name = (valid_name(plan.name) ? plan.name : "plan") + "-" + std::to_string(n);
    plan_bodies_[name] = body;
    plans_.push_back("  " + scalar(name) + ":\n" + body);
    return name;
  }

  // --- steps ----------------------------------------------------------------

  // The expectation of a step from the live outcome.
  std::string expectation(const ObservedOperation& operation, bool transition) {
    if (!options_.exact_outcomes) return "    expect: {error: maybe}\n";
    if (std::exchange(lossy_, false)) {
      return "    expect: {error: maybe}  # a stream of this call could not be recorded\n";
    }
    if (operation.error) {
      const std::string kind = error_kind(operation.error);
      if (kind == "out_of_memory" || kind == "device" || kind == "runtime") {
        return "    expect: {error: maybe}  # the live " + kind + " failure is the device's, not reproduced here\n";
      }
      if (operation.call == ObservedCall::adopt && kind == "ownership") {
        return "    expect: {error: maybe}  # the live value aliased managed storage; recorded values do not\n";
      }
      return "    expect: {error: " + kind + "}\n";
    }
    if (transition && operation.no_op) return "    expect: {no_op: true}\n";
    if (operation.call == ObservedCall::scope_close && operation.no_op) return "    expect: {no_op: true}\n";
    return "";
  }

  void emit(const std::string& text, const ObservedOperation& operation, bool transition = false) {
    steps_.push_back("  - " + text + "\n" + expectation(operation, transition));
  }

  void skip(const ObservedOperation& operation, const std::string& why) {
    const std::string text = std::string(to_string(operation.call)) + " skipped: " + why;
    steps_.push_back("  # " + text + "\n");
    note(text);
  }

  std::string handle_list(const std::vector<ResidencyHandle>& handles, bool& complete) {
    std::string text = "[";
    complete = true;
    for (std::size_t i = 0; i < handles.size(); ++i) {
      const std::string name = known(handles[i]);
      if (name.empty()) complete = false;
      text += (i == 0 ? "" : ", ") + name;
    }
    return text + "]";
  }

  void declare(const ObservedOperation& operation, const std::string& name, const ResidencyValueSpec& spec,
               const ResidencyLocation& at) {
    if (spec.logical_nbytes != spec.storage_nbytes) {
      note("value " + name + " is recorded at its charged size (" + std::to_string(spec.storage_nbytes) +
           " bytes; " + std::to_string(spec.logical_nbytes) + " logical)");
    }
    values_.push_back(scalar(name) + ": {bytes: " + std::to_string(std::max<std::int64_t>(spec.storage_nbytes, 1)) +
                      ", dtype: uint8, type: " + scalar(spec.value_type) + ", mode: " +
                      (spec.replica_mode == ReplicaMode::replicable ? "replicable" : "exclusive") +
                      (operation.call == ObservedCall::register_source ? ", source_at: " : ", adopt_at: ") + at.name() +
                      ", deferred: true}");
  }

  void create(const ObservedOperation& operation) {
    const char* verb = operation.call == ObservedCall::adopt ? "adopt" : "register_source";
    if (!operation.location) return skip(operation, "the value's location was not known");
    std::optional<ResidencyValueSpec> spec = operation.spec;
    if (!spec && operation.call == ObservedCall::adopt && operation.nbytes >= 0) {
      spec.emplace("Tensor", operation.nbytes, operation.nbytes, operation.replica_mode, Recoverability::must_preserve);
    }
    if (!spec) return skip(operation, "the value had no valid spec");
    std::string name;
    if (!operation.handles.empty()) {
      created_.insert(operation.handles.front().handle_id);
      name = value_name(operation.handles.front());
    } else {
      name = fresh_value_name("failed");  // refused: declared so the step can expect the refusal
    }
    declare(operation, name, *spec, *operation.location);
    emit(std::string(verb) + ": {value: " + scalar(name) + "}", operation);
  }

  void step(const ObservedOperation& operation) {
    const auto handle = [&] { return value_or_handle(operation.handles.front()); };
    switch (operation.call) {
      case ObservedCall::adopt:
      case ObservedCall::register_source:
        return create(operation);
      case ObservedCall::ensure:
        return emit("ensure: {" + handle() + ", at: " + operation.location->name() + stream_arg(operation.stream) + "}",
                    operation, true);
      case ObservedCall::move:
        return emit("move: {" + handle() + ", to: " + operation.location->name() +
                        (operation.from ? ", from: " + operation.from->name() : "") + stream_arg(operation.stream) + "}",
                    operation, true);
      case ObservedCall::drop:
        return emit("drop: {" + handle() + ", at: " + operation.location->name() + "}", operation, true);
      case ObservedCall::discard:
        return emit("discard: {" + handle() + "}", operation, true);
      case ObservedCall::execute_actions: {
        const auto list = actions(operation.actions);
        if (!list) return skip(operation, "an action names a handle this recording never saw");
        return emit("execute: {name: " + scalar(operation.name) + ", actions: " + *list +
                        streams_arg(operation.transfer_streams) + version_arg(operation.expected_state_version) + "}",
                    operation);
      }
      case ObservedCall::explain: {
        const auto name = plan(*operation.plan);
        if (!name) return skip(operation, "the plan names a handle this recording never saw");
        return emit("explain: {plan: " + scalar(*name) + version_arg(operation.expected_state_version) + "}", operation);
      }
      case ObservedCall::scope_enter: {
        const auto name = plan(*operation.plan);
        if (!name) return skip(operation, "the plan names a handle this recording never saw");
        entered_scopes_.insert(operation.lifetime);
        return emit("scope_enter: {plan: " + scalar(*name) + ", as: " + lifetime("s", operation.lifetime) +
                        streams_arg(operation.transfer_streams) + version_arg(operation.expected_state_version) + "}",
                    operation);
      }
      case ObservedCall::scope_close:
      case ObservedCall::scope_abandon:
        if (entered_scopes_.count(operation.lifetime) == 0) return skip(operation, "its scope was not recorded");
        if (operation.call == ObservedCall::scope_abandon) {
          return emit("abandon: {scope: " + lifetime("s", operation.lifetime) + "}", operation);
        }
        return emit("scope_close: {scope: " + lifetime("s", operation.lifetime) + "}", operation);
      case ObservedCall::acquire:
      case ObservedCall::hold: {
        bool complete = true;
        const std::string list = handle_list(operation.handles, complete);
        if (!complete || operation.handles.empty()) {
          return skip(operation, "it names a handle this recording never saw, or none");
        }
        const bool lease = operation.call == ObservedCall::acquire;
        const std::string name = operation.lifetime != 0 ? lifetime(lease ? "l" : "h", operation.lifetime)
                                                          : lifetime(lease ? "refused-l" : "refused-h", ++refused_);
        made_.insert(name);
        return emit(std::string(lease ? "acquire" : "hold") + ": {values: " + list + ", at: " +
                        operation.location->name() + (lease ? stream_arg(operation.stream) : "") + ", as: " + name + "}",
                    operation);
      }
      case ObservedCall::reserve: {
        const std::string name = operation.lifetime != 0 ? lifetime("r", operation.lifetime)
                                                          : lifetime("refused-r", ++refused_);
        made_.insert(name);
        return emit("reserve: {at: " + operation.location->name() + ", bytes: " + std::to_string(operation.nbytes) +
                        ", label: " + scalar(operation.name) + ", as: " + name + "}",
                    operation);
      }
      case ObservedCall::add_consumer_stream:
        return ended(operation, "l", "add_consumer_stream: {lease: $" + stream_arg(operation.stream) + "}");
      case ObservedCall::lease_release:
        return ended(operation, "l", std::string("release: {lease: $, wait: ") + (operation.wait ? "true" : "false") + "}");
      case ObservedCall::lease_abandon:
        return ended(operation, "l", "abandon: {lease: $}");
      case ObservedCall::hold_release:
        return ended(operation, "h", "release: {hold: $}");
      case ObservedCall::hold_abandon:
        return ended(operation, "h", "abandon: {hold: $}");
      case ObservedCall::reservation_release:
        return ended(operation, "r", "release: {reservation: $}");
      case ObservedCall::reservation_abandon:
        return ended(operation, "r", "abandon: {reservation: $}");
      case ObservedCall::close:
        return emit(std::string("close: {wait: ") + (operation.wait ? "true" : "false") +
                        ", force: " + (operation.force ? "true" : "false") + "}",
                    operation);
    }
  }

  // A step on an existing lifetime: `$` in `text` becomes its name.
  void ended(const ObservedOperation& operation, const char* prefix, std::string text) {
    const std::string name = lifetime(prefix, operation.lifetime);
    if (made_.count(name) == 0) return skip(operation, "its lifetime was not recorded");
    text.replace(text.find('$'), 1, name);
    emit(text, operation);
  }

  const RecorderOptions& options_;
  const LocationBudgets& budgets_;
  const std::int64_t trace_capacity_;
  const int cuda_devices_;
  const bool can_pin_;
  const std::string& manager_id_;
  std::map<std::string, std::string> names_;
  std::set<std::string> taken_;
  std::set<std::string> created_;   // handle ids the recording saw created
  std::set<std::string> made_;      // lifetime names a recorded step made
  std::set<std::uint64_t> entered_scopes_;
  std::uint64_t refused_ = 0;
  bool lossy_ = false;  // the step being written lost a stream
  std::vector<std::string> values_, plans_, steps_, notes_;
  std::map<std::string, std::string> plan_bodies_;
};

}  // namespace

ScenarioRecorder::ScenarioRecorder(RecorderOptions options) : options_(std::move(options)) {
  if (options_.cuda_devices && *options_.cuda_devices < 0) throw std::invalid_argument("RecorderOptions cuda_devices must be non-negative");
}

void ScenarioRecorder::attach(ManagerOptions& options) {
  std::lock_guard lock(mutex_);
  if (attached_) throw std::logic_error("ScenarioRecorder is already attached to a manager's options");
  attached_ = true;
  budgets_ = options.budgets;
  trace_capacity_ = options.trace_capacity;
  const std::shared_ptr<DeviceRuntime> runtime = options.runtime ? options.runtime : default_runtime();
  cuda_devices_ = options_.cuda_devices.value_or(runtime->cuda_device_count());
  can_pin_ = runtime->can_pin();
  options.operation_observer = [this](const ObservedOperation& operation) { record(operation); };
}

void ScenarioRecorder::record(const ObservedOperation& operation) {
  std::lock_guard lock(mutex_);
  if (manager_id_.empty()) manager_id_ = operation.manager_id;
  if (operation.manager_id != manager_id_) return;  // one recorder, one manager
  operations_.push_back(operation);
}

void ScenarioRecorder::name_value(const ResidencyHandle& handle, const std::string& name) {
  if (!valid_name(name)) {
    throw std::invalid_argument("value name '" + name + "' must be non-empty letters, digits, '_', '-' or '.'");
  }
  std::lock_guard lock(mutex_);
  for (const auto& [id, given] : names_) {
    if (given == name && id != handle.handle_id) {
      throw std::invalid_argument("value name '" + name + "' is already given to another value");
    }
  }
  names_[handle.handle_id] = name;
}

std::string ScenarioRecorder::yaml() const {
  std::lock_guard lock(mutex_);
  return Writer(options_, budgets_, trace_capacity_, cuda_devices_, can_pin_, manager_id_, names_).write(operations_);
}

std::size_t ScenarioRecorder::calls() const {
  std::lock_guard lock(mutex_);
  return operations_.size();
}

std::vector<std::string> ScenarioRecorder::notes() const {
  std::lock_guard lock(mutex_);
  Writer writer(options_, budgets_, trace_capacity_, cuda_devices_, can_pin_, manager_id_, names_);
  writer.write(operations_);
  return writer.notes();
}

}  // namespace fhelium::harness
