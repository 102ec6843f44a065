// The replay engine. A Replayer owns one scenario run: the runtime stack, the
// manager, named handles and lifetimes, the invariant checker and the result.
// Each step runs in three parts: perform the operation and capture its
// outcome (result or classified error), compare the outcome with the step's
// expectations, then snapshot, check invariants and compare the snapshot
// expectations. The first mismatch ends the run with a located failure.
#include "fhelium/harness/replay.hpp"

#include <ATen/ops/arange.h>
#include <ATen/ops/full.h>

#include <algorithm>
#include <limits>
#include <sstream>

#include "fhelium/harness/contents.hpp"
#include "fhelium/harness/decision_checker.hpp"
#include "fhelium/harness/error_kind.hpp"
#include "fhelium/harness/fault_injecting_runtime.hpp"
#include "fhelium/harness/invariant_checker.hpp"
#include "fhelium/harness/simulated_runtime.hpp"
#include "fhelium/harness/text_report.hpp"
#include "fhelium/residency.hpp"

namespace fhelium::harness {

using namespace residency;

namespace {

// Ends the run at the current step.
struct StepFailure {
  std::string message;
};

class InjectedSourceFailure final : public std::runtime_error, public InjectedFault {
 public:
  InjectedSourceFailure(const std::string& rule, const std::string& message)
      : std::runtime_error(message), InjectedFault(rule) {}
};

at::ScalarType scalar_type(const std::string& dtype) {
  static const std::map<std::string, at::ScalarType> types{{"float32", at::kFloat}, {"float64", at::kDouble},
                                                           {"float16", at::kHalf},  {"int64", at::kLong},
                                                           {"int32", at::kInt},     {"uint8", at::kByte}};
  return types.at(dtype);
}

std::int64_t name_seed(const std::string& name) {
  std::int64_t seed = 17;
  for (const char c : name) seed = (seed * 31 + static_cast<unsigned char>(c)) % 1000003;
  return seed;
}

// Deterministic contents of a declared value: (i + seed) mod 251, as its dtype.
ResidentValue expected_value(const ValueDecl& decl, std::int64_t elements) {
  if (decl.virtual_payload) {
    // One element broadcast to the declared size: O(1) to create, copy and compare.
    const at::Tensor element = at::full({1}, name_seed(decl.name) % 251, at::TensorOptions().dtype(scalar_type(decl.dtype)));
    return ResidentValue(decl.type_name, {{"data", element.expand({elements})}}, {{"name", decl.name}});
  }
  const at::Tensor data = at::arange(elements, at::TensorOptions().dtype(at::kLong))
                              .add_(name_seed(decl.name))
                              .remainder_(251)
                              .to(scalar_type(decl.dtype));
  return ResidentValue(decl.type_name, {{"data", data}}, {{"name", decl.name}});
}

struct Classified {
  std::string kind;
  std::string message;
  bool injected = false;
  std::optional<std::string> phase;
  std::optional<std::int64_t> failed_index;
  std::optional<std::int64_t> committed;
  std::optional<ResidencyAction> failed_action;
  std::optional<std::string> failed_reservation;  // label
  std::optional<ResidencyLocation> budget_location;
  std::optional<std::int64_t> budget_bytes, used_bytes, reserved_bytes, requested_bytes;
  std::optional<std::uint64_t> stale_expected, stale_actual;
};

bool is_injected(const std::exception& error) {
  if (injected_rule(error)) return true;
  if (const auto* plan = dynamic_cast<const ResidencyPlanExecutionError*>(&error)) {
    try {
      plan->rethrow_cause();
    } catch (const std::exception& cause) {
      return injected_rule(cause).has_value();
    } catch (...) {
    }
  }
  return false;
}

void record_budget(Classified& result, const ResidencyBudgetError& error) {
  result.budget_location = error.location();
  result.budget_bytes = error.budget_bytes();
  result.used_bytes = error.used_bytes();
  result.reserved_bytes = error.reserved_bytes();
  result.requested_bytes = error.requested_bytes();
}

Classified classify(const std::exception_ptr& error) {
  Classified result;
  result.kind = error_kind(error);
  try {
    std::rethrow_exception(error);
  } catch (const ResidencyPlanExecutionError& e) {
    result.phase = to_string(e.phase());
    result.failed_index = e.failed_action_index() ? e.failed_action_index() : e.failed_reservation_index();
    result.committed = static_cast<std::int64_t>(e.partial_report().transitions.size());
    result.failed_action = e.failed_action();
    if (e.failed_reservation()) result.failed_reservation = e.failed_reservation()->label;
    // A budget error that made the plan fail is reported with its numbers too.
    try {
      e.rethrow_cause();
    } catch (const ResidencyBudgetError& cause) {
      record_budget(result, cause);
    } catch (...) {
    }
  } catch (const ResidencyBudgetError& e) {
    record_budget(result, e);
  } catch (const ResidencyStaleStateError& e) {
    result.stale_expected = e.expected_version();
    result.stale_actual = e.actual_version();
  } catch (...) {
  }
  try {
    std::rethrow_exception(error);
  } catch (const c10::Error& e) {
    result.message = e.what_without_backtrace();
    result.injected = injected_rule(e).has_value();
  } catch (const std::exception& e) {
    result.message = e.what();
    result.injected = is_injected(e);
  } catch (...) {
    result.message = "non-standard exception";
  }
  return result;
}

std::string name_of(const std::optional<ResidencyLocation>& location) {
  return location ? location->name() : std::string("none");
}

struct Outcome {
  std::optional<Classified> error;
  bool no_op = false;
  std::optional<ResidencyLocation> source, destination;
  std::optional<std::string> reason;
  std::optional<std::int64_t> committed;
  std::optional<ResidencyPlanExplanation> explanation;
  std::optional<ResidencyDecision> decision;
  std::optional<std::vector<ResidencyTransitionReport>> reports;  // the step's transition report(s)
};

class Replayer {
 public:
  Replayer(const Scenario& scenario, const ReplayOptions& options) : scenario_(scenario), options_(options) {
    result_.file = scenario.file;
    result_.name = scenario.name;
    result_.description = scenario.description;
    result_.seed = options.seed.value_or(scenario.seed);
    result_.runtime = options.runtime.value_or(scenario.runtime);
  }

  ScenarioResult run() {
    if (const auto reason = unsupported()) {
      result_.verdict = "skipped";
      result_.failure = *reason;
      return result_;
    }
    try {
      setup();
      for (std::size_t index = 0; index < scenario_.steps.size(); ++index) run_step(index, scenario_.steps[index]);
      finish();
      result_.verdict = "passed";
    } catch (const StepFailure& failure) {
      result_.verdict = "failed";
      result_.failure = failure.message;
    }
    // Also for a failed run: the state it stopped in.
    result_.final_snapshot = last_snapshot_;
    for (const auto& [name, handle] : handles_) result_.value_names[handle.handle_id] = name;
    apply_canary();
    return result_;
  }

 private:
  // --- setup -------------------------------------------------------------

  std::optional<std::string> unsupported() const {
    if (result_.runtime == "simulated") return std::nullopt;
    if (result_.runtime != "torch") return "unknown runtime '" + result_.runtime + "'";
    const TorchRuntime probe;
    const auto missing = [&](const ResidencyLocation& location) -> std::optional<std::string> {
      if (location.is_cuda() && location.cuda_index() >= probe.cuda_device_count()) {
        return "runtime torch has no " + location.name();
      }
      if (location == PINNED_HOST && !probe.can_pin()) return std::string("runtime torch cannot pin host memory");
      return std::nullopt;
    };
    for (const auto& location : referenced_locations()) {
      if (auto reason = missing(location)) return reason;
    }
    for (const auto& step : scenario_.steps) {
      if (step.kind == StepKind::advance || step.kind == StepKind::complete || step.kind == StepKind::work) {
        return std::string("step '") + to_string(step.kind) + "' needs the simulated runtime";
      }
      if (step.stream || !step.transfer_streams.empty() || !step.consumer_streams.empty()) {
        return std::string("streams are simulated");
      }
    }
    if (!scenario_.capacity.empty()) return std::string("capacities are simulated");
    for (const auto& value : scenario_.values) {
      if (value.virtual_payload) return "value '" + value.name + "' has a virtual payload, which is simulated";
    }
    return std::nullopt;
  }

  // Every location the scenario names anywhere.
  std::vector<ResidencyLocation> referenced_locations() const {
    std::vector<ResidencyLocation> result;
    const auto actions = [&](const std::vector<ActionDecl>& list) {
      for (const auto& action : list) {
        result.push_back(action.location);
        if (action.from) result.push_back(*action.from);
      }
    };
    for (const auto& [location, bytes] : scenario_.budgets) result.push_back(location);
    for (const auto& [source, destinations] : scenario_.fallback_tiers) {
      result.push_back(source);
      result.insert(result.end(), destinations.begin(), destinations.end());
    }
    for (const auto& value : scenario_.values) result.push_back(value.at);
    for (const auto& fault : scenario_.faults) {
      if (fault.location) result.push_back(*fault.location);
    }
    for (const auto& plan : scenario_.plans) {
      for (const auto* list : {&plan.reclaim, &plan.enter, &plan.exit}) actions(*list);
      for (const auto& reservation : plan.reservations) result.push_back(reservation.location);
    }
    for (const auto& step : scenario_.steps) {
      if (step.location) result.push_back(*step.location);
      if (step.from) result.push_back(*step.from);
      actions(step.actions);
      if (step.fault && step.fault->location) result.push_back(*step.fault->location);
      for (const auto& requirement : step.requirements) result.push_back(requirement.location);
      for (const auto& reservation : step.reservations) result.push_back(reservation.location);
    }
    return result;
  }

  void setup() {
    std::shared_ptr<DeviceRuntime> base;
    if (result_.runtime == "simulated") {
      SimulatedRuntimeOptions options;
      options.cuda_devices = scenario_.cuda_devices;
      options.capacity_bytes = scenario_.capacity;
      options.can_pin = scenario_.can_pin;
      options.copy_ns_per_mib = scenario_.copy_ns_per_mib;
      try {
        simulated_ = std::make_shared<SimulatedRuntime>(options);
      } catch (const std::exception& error) {
        fail_setup(std::string("runtime: ") + error.what());
      }
      base = simulated_;
    } else {
      base = std::make_shared<TorchRuntime>();
    }
    faults_ = std::make_shared<FaultInjectingRuntime>(base, scenario_.faults, result_.seed);
    clock_origin_ns_ = base->now_ns();  // reports count virtual time from the start of the run
    ManagerOptions options;
    options.budgets = scenario_.budgets;
    options.trace_capacity = scenario_.trace_capacity;
    options.runtime = faults_;
    try {
      manager_ = std::make_unique<ResidencyManager>(std::move(options));
    } catch (const std::exception& error) {
      fail_setup(std::string("manager: ") + error.what());
    }
    try {
      controller_ = std::make_unique<ResidencyController>(
          *manager_, std::make_shared<const DeterministicTieredLRU>(scenario_.fallback_tiers),
          scenario_.search_state_limit);
    } catch (const std::exception& error) {
      fail_setup(std::string("controller: ") + error.what());
    }
    for (const auto& value : scenario_.values) {
      if (value.deferred) continue;
      try {
        create(value);
      } catch (const std::exception& error) {
        fail_setup("value '" + value.name + "' (line " + std::to_string(value.line) + "): " + error.what());
      }
    }
    after_operation();  // establishes the invariant baseline
    clear_fired_baseline();
  }

  [[noreturn]] void fail_setup(const std::string& message) { throw StepFailure{"setup failed: " + message}; }

  ResidentValue placed(const ResidentValue& value, const ResidencyLocation& location) {
    if (location == PAGEABLE_HOST) return value;
    // Placement is the test's business, not the manager's: bypass the fault layer.
    return faults_->upstream()->copy_to(value, location, std::nullopt);
  }

  // Whether another value declares that it aliases `name`'s storage.
  bool aliased(const std::string& name) const {
    return std::any_of(scenario_.values.begin(), scenario_.values.end(),
                       [&](const ValueDecl& value) { return value.aliases && *value.aliases == name; });
  }

  void create(const ValueDecl& decl) {
    if (!decl.source) {
      if (decl.aliases) {
        // The other value's own storage: the manager must refuse to own it twice.
        record_fault("alias:" + decl.name, "adopt", 1, "adopt shares the storage of '" + *decl.aliases + "'");
        handles_[decl.name] = manager_->adopt(adopted_.at(*decl.aliases), decl.at, decl.mode);
        return;
      }
      ResidentValue value = placed(expected_value(decl, decl.elements), decl.at);
      if (aliased(decl.name)) adopted_.insert_or_assign(decl.name, value);
      handles_[decl.name] = manager_->adopt(std::move(value), decl.at, decl.mode);
      return;
    }
    const std::int64_t charge = decl.elements * c10::elementSize(scalar_type(decl.dtype));
    const ResidencyValueSpec spec(decl.type_name, charge, charge, decl.mode, Recoverability::reconstructible);
    handles_[decl.name] = manager_->register_source(spec, [this, decl] { return load(decl); }, decl.at);
  }

  ResidentValue load(const ValueDecl& decl) {
    const std::int64_t count = ++loads_[decl.name];
    const std::string rule = "source:" + decl.name;
    if (decl.fail_on_load && *decl.fail_on_load == count) {
      record_fault(rule, "load", count, "load " + std::to_string(count) + " of '" + decl.name + "' fails");
      throw InjectedSourceFailure(rule, "injected source failure: load " + std::to_string(count) + " of '" +
                                            decl.name + "'");
    }
    if (decl.reenter_on_load && *decl.reenter_on_load == count) {
      // A callback that calls back into the manager: the manager must refuse
      // (ResidencyReentrancyError), and that refusal ends the load.
      record_fault(rule, "load", count, "load " + std::to_string(count) + " of '" + decl.name + "' re-enters the manager");
      manager_->snapshot();
    }
    if (decl.aliases) {
      record_fault(rule, "load", count, "load returns the storage of '" + *decl.aliases + "'");
      return adopted_.at(*decl.aliases);
    }
    if (decl.wrong) {
      record_fault(rule, "load", count, "load returns a value of the wrong " + *decl.wrong);
      if (*decl.wrong == "size") return placed(expected_value(decl, decl.elements + 1), decl.at);
      if (*decl.wrong == "contents") {
        // Right size, type and place, another value's bytes: only a content check can tell.
        ValueDecl other = decl;
        other.name += "-swapped";
        ResidentValue swapped = expected_value(other, decl.elements);
        return placed(ResidentValue(decl.type_name, {{"data", swapped.field("data")}}, {{"name", decl.name}}), decl.at);
      }
      if (*decl.wrong == "type") {
        ValueDecl other = decl;
        other.type_name += "Mismatch";
        return placed(expected_value(other, decl.elements), decl.at);
      }
      const ResidencyLocation elsewhere = decl.at == PAGEABLE_HOST ? PINNED_HOST : PAGEABLE_HOST;
      return placed(expected_value(decl, decl.elements), elsewhere);
    }
    return placed(expected_value(decl, decl.elements), decl.at);
  }

  void record_fault(const std::string& rule, const std::string& operation, std::int64_t index,
                    const std::string& detail) {
    result_.faults.push_back(FiredFaultRecord{rule, operation, index, current_step_, detail});
  }

  void clear_fired_baseline() { fired_seen_ = faults_->fired().size(); }

  // --- conversions -----------------------------------------------------

  ResidencyHandle handle(const std::string& value) const {
    const auto found = handles_.find(value);
    if (found != handles_.end()) return found->second;
    // Not created yet: a handle the manager has never issued.
    return ResidencyHandle{manager_->manager_id(), "unregistered-" + value, scenario_.find_value(value)->type_name};
  }

  // The step's handle: its value's, or one the scenario writes out.
  ResidencyHandle step_handle(const Step& step) const {
    if (!step.handle) return handle(step.value);
    return ResidencyHandle{step.handle->foreign ? std::string("foreign-manager") : manager_->manager_id(),
                           step.handle->id, step.handle->type_name};
  }

  static c10::Stream stream(const StreamRef& ref) {
    return c10::Stream(c10::Stream::UNSAFE,
                       c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(ref.device)), ref.id);
  }

  ResidencyAction action(const ActionDecl& decl) const {
    switch (decl.kind) {
      case ActionKind::ensure: return EnsureResident{handle(decl.value), decl.location};
      case ActionKind::move: return MoveResident{handle(decl.value), decl.location, decl.from};
      case ActionKind::drop: return DropResident{handle(decl.value), decl.location};
      case ActionKind::discard: return DiscardValue{handle(decl.value)};
    }
    return DiscardValue{handle(decl.value)};
  }

  std::vector<ResidencyAction> actions(const std::vector<ActionDecl>& decls) const {
    std::vector<ResidencyAction> result;
    for (const auto& decl : decls) result.push_back(action(decl));
    return result;
  }

  ResidencyPlan plan(const std::string& name) const {
    const PlanDecl& decl = *scenario_.find_plan(name);
    ResidencyPlan result{decl.name, actions(decl.enter), actions(decl.exit), {}, actions(decl.reclaim)};
    for (const auto& reservation : decl.reservations) {
      result.reservations.emplace_back(reservation.location, reservation.bytes, reservation.label);
    }
    return result;
  }

  ResidencyRequest request(const Step& step) const {
    std::vector<ResidencyRequirement> requirements;
    for (const auto& requirement : step.requirements) {
      requirements.push_back({handle(requirement.value), requirement.location});
    }
    std::vector<MemoryReservation> reservations;
    for (const auto& reservation : step.reservations) {
      reservations.emplace_back(reservation.location, reservation.bytes, reservation.label);
    }
    return ResidencyRequest(step.plan, std::move(requirements), std::move(reservations));
  }

  ConsumerStreams consumer_streams(const Step& step) const {
    ConsumerStreams result;
    for (const auto& [location, ref] : step.consumer_streams) result.emplace(location, stream(ref));
    return result;
  }

  TransferStreams transfer_streams(const Step& step) const {
    TransferStreams result;
    for (const auto& [location, ref] : step.transfer_streams) result.emplace(location, stream(ref));
    return result;
  }

  std::optional<std::uint64_t> expected_version(const Step& step) const {
    if (step.expected_version) return step.expected_version;
    if (!step.expected_version_ref.empty()) return remembered_.at(step.expected_version_ref);
    return std::nullopt;
  }

  SimulatedRuntime& simulated() {
    if (!simulated_) throw std::invalid_argument("this step needs the simulated runtime");
    return *simulated_;
  }

  // --- steps -------------------------------------------------------------

  void run_step(std::size_t index, const Step& step) {
    current_step_ = index;
    step_before_ = last_snapshot_;
    const std::size_t faults_before = result_.faults.size() + faults_->fired().size() - fired_seen_;
    const std::optional<std::uint64_t> version_before =
        last_snapshot_ ? std::optional(last_snapshot_->state_version) : std::nullopt;
    std::optional<ResidencyPlanExplanation> preflight;
    const auto peaks_before = last_peaks_;
    // The controller decides from a fresh snapshot (which reaps completed
    // work); the checks compare against the same state.
    std::optional<ResidencySnapshot> before;
    if (deciding(step) && manager_ && !manager_->closed()) before = manager_->snapshot();
    Outcome outcome;
    try {
      outcome = perform(step, preflight);
    } catch (const StepFailure&) {
      throw;
    } catch (...) {
      outcome.error = classify(std::current_exception());
    }
    if (outcome.error) {
      result_.error_paths[outcome.error->kind] += 1;
      // Manager ids are process-wide counters; keep reports identical across replays.
      std::string& message = outcome.error->message;
      const std::string& id = manager_->manager_id();
      for (auto at = message.find(id); at != std::string::npos; at = message.find(id, at)) {
        message.replace(at, id.size(), "manager");
      }
      message = quoted_names(message);
    }
    check_outcome(index, step, outcome);
    const ResidencySnapshot* snapshot = after_operation();
    StepRecord record;
    record.index = index;
    record.line = step.line;
    record.kind = to_string(step.kind);
    record.outcome = outcome.error ? outcome.error->kind : (outcome.no_op ? "no-op" : "ok");
    record.message = outcome.error ? outcome.error->message : outcome.reason.value_or("");
    record.transitions = step_transitions_;
    if (snapshot != nullptr) {
      record.virtual_ns = snapshot->captured_at_ns - clock_origin_ns_;
      record.state_version = snapshot->state_version;
      for (const auto& location : snapshot->locations) {
        record.locations.push_back({location.location.name(), location.used_bytes, location.reserved_bytes});
      }
    }
    const bool faults_fired = result_.faults.size() + faults_->fired().size() - fired_seen_ > faults_before;
    if (preflight && snapshot != nullptr) check_preflight(index, step, *preflight, outcome, faults_fired, peaks_before, *snapshot);
    if (before && snapshot != nullptr) check_controller(index, step, *before, outcome, *snapshot);
    check_snapshot_expectations(index, step, snapshot);
    check_state_expectations(index, step, snapshot, version_before);
    if (!step.remember_version.empty()) {
      if (snapshot == nullptr) fail(index, step, "remember_version needs an open manager");
      remembered_[step.remember_version] = snapshot->state_version;
    }
    result_.steps.push_back(std::move(record));
    result_.steps_run = index + 1;
    if (options_.progress) options_.progress(index + 1, scenario_.steps.size());
    if (options_.log) {
      const StepRecord& last = result_.steps.back();
      options_.log("  step " + std::to_string(index) + " (line " + std::to_string(step.line) + ") " + last.kind +
                   ": " + last.outcome + (last.message.empty() ? "" : " - " + last.message));
    }
  }

  Outcome transition(const ResidencyTransitionReport& report) {
    Outcome outcome;
    outcome.reports = std::vector<ResidencyTransitionReport>{report};
    outcome.no_op = report.no_op;
    outcome.source = report.source;
    outcome.destination = report.destination;
    outcome.reason = report.reason;
    return outcome;
  }

  Outcome perform(const Step& step, std::optional<ResidencyPlanExplanation>& preflight) {
    Outcome outcome;
    const auto stream_arg = [&]() -> std::optional<c10::Stream> {
      if (!step.stream) return std::nullopt;
      return stream(*step.stream);
    };
    switch (step.kind) {
      case StepKind::adopt:
      case StepKind::register_source:
        create(*scenario_.find_value(step.value));
        return outcome;
      case StepKind::ensure:
      case StepKind::copy:
        return transition(manager_->ensure(step_handle(step), *step.location, stream_arg()));
      case StepKind::move:
        return transition(manager_->move(step_handle(step), *step.location, step.from, stream_arg()));
      case StepKind::drop:
        return transition(manager_->drop(step_handle(step), *step.location));
      case StepKind::discard:
        return transition(manager_->discard(step_handle(step)));
      case StepKind::execute: {
        const auto list = actions(step.actions);
        try {
          preflight = manager_->explain(ResidencyPlan{step.plan, list});
        } catch (...) {
        }
        const ResidencyPlanReport report =
            manager_->execute_actions(list, step.plan, transfer_streams(step), expected_version(step));
        outcome.committed = static_cast<std::int64_t>(report.transitions.size());
        outcome.reports = report.transitions;
        return outcome;
      }
      case StepKind::explain: {
        outcome.explanation = manager_->explain(plan(step.plan), expected_version(step));
        outcome.reason = outcome.explanation->reason;
        return outcome;
      }
      case StepKind::scope_enter: {
        if (!step.decision.empty()) {
          const ResidencyDecision& decision = decisions_.at(step.decision);
          preflight = decision.explanation;
          auto [it, inserted] =
              scopes_.insert_or_assign(step.name, controller_->scope(decision, transfer_streams(step)));
          it->second.enter();
          return outcome;
        }
        try {
          preflight = manager_->explain(plan(step.plan));
        } catch (...) {
        }
        auto [it, inserted] =
            scopes_.insert_or_assign(step.name, manager_->scope(plan(step.plan), transfer_streams(step), expected_version(step)));
        it->second.enter();
        return outcome;
      }
      case StepKind::scope_close: {
        const auto report = scopes_.at(step.name).close();
        outcome.no_op = !report.has_value();
        if (report) {
          outcome.committed = static_cast<std::int64_t>(report->transitions.size());
          outcome.reports = report->transitions;
        }
        return outcome;
      }
      case StepKind::acquire: {
        std::vector<ResidencyHandle> list;
        for (const auto& value : step.values) list.push_back(handle(value));
        auto lease = manager_->acquire(list, *step.location, stream_arg());
        for (const auto& value : step.values) check_content(value, lease.value(handle(value)), *step.location);
        leases_.insert_or_assign(step.name, std::move(lease));
        return outcome;
      }
      case StepKind::add_consumer_stream:
        leases_.at(step.name).add_consumer_stream(stream(*step.stream));
        return outcome;
      case StepKind::release:
        if (step.lifetime_kind == "lease") leases_.at(step.name).release(step.wait);
        if (step.lifetime_kind == "hold") holds_.at(step.name).release();
        if (step.lifetime_kind == "reservation") reservations_.at(step.name).release();
        return outcome;
      case StepKind::abandon:
        // Destroying an active lifetime releases it safely and reports it.
        if (step.lifetime_kind == "lease") leases_.erase(step.name);
        if (step.lifetime_kind == "hold") holds_.erase(step.name);
        if (step.lifetime_kind == "reservation") reservations_.erase(step.name);
        if (step.lifetime_kind == "scope") scopes_.erase(step.name);
        if (step.lifetime_kind == "use") uses_.erase(step.name);
        return outcome;
      case StepKind::hold: {
        std::vector<ResidencyHandle> list;
        for (const auto& value : step.values) list.push_back(handle(value));
        holds_.insert_or_assign(step.name, manager_->hold(list, *step.location));
        return outcome;
      }
      case StepKind::reserve:
        reservations_.insert_or_assign(step.name, manager_->reserve(*step.location, step.bytes, step.label));
        return outcome;
      case StepKind::snapshot:
        manager_->snapshot();  // after close this is the manager's closed error
        return outcome;
      case StepKind::close:
        manager_->close(step.wait, step.force);
        return outcome;
      case StepKind::advance:
        require_virtual_time(current_step_, step, step.ns);
        simulated().advance(step.ns);
        return outcome;
      case StepKind::complete:
        simulated().complete(stream(*step.stream));
        return outcome;
      case StepKind::work:
        if (step.ns != SimulatedRuntime::never) {
          // The work ends at the stream's tail (or now) plus its duration.
          const std::int64_t tail = simulated().stream_tail_ns(stream(*step.stream));
          const std::int64_t queued = tail == SimulatedRuntime::never ? 0 : std::max<std::int64_t>(0, tail - simulated().now_ns());
          std::int64_t ends_in = 0;
          if (__builtin_add_overflow(queued, step.ns, &ends_in)) ends_in = std::numeric_limits<std::int64_t>::max();
          require_virtual_time(current_step_, step, ends_in);
        }
        simulated().enqueue(stream(*step.stream), step.ns);
        return outcome;
      case StepKind::verify:
        verify(step.values);
        return outcome;
      case StepKind::arm:
        faults_->add_rule(*step.fault);
        return outcome;
      case StepKind::disarm:
        faults_->remove_rule(step.name);
        return outcome;
      case StepKind::decide: {
        ResidencyDecision decision = controller_->decide(request(step));
        if (!step.decision.empty()) decisions_.insert_or_assign(step.decision, decision);
        outcome.decision = std::move(decision);
        return outcome;
      }
      case StepKind::use: {
        // Kept even when entry fails, so a later end_use sees what is left.
        auto [stored, inserted] = uses_.insert_or_assign(
            step.name, controller_->use(request(step), consumer_streams(step), transfer_streams(step)));
        ResidencyUse& use = stored->second;
        try {
          use.enter();
        } catch (...) {
          // A plan the controller decided must run: the preflight check sees it.
          try {
            preflight = use.decision().explanation;
          } catch (const std::logic_error&) {
          }
          throw;
        }
        preflight = use.decision().explanation;
        outcome.decision = use.decision();
        for (const auto& requirement : step.requirements) {
          check_content(requirement.value, use.value(handle(requirement.value), requirement.location),
                        requirement.location);
        }
        return outcome;
      }
      case StepKind::end_use: {
        const auto found = uses_.find(step.name);
        if (found == uses_.end()) {
          throw std::logic_error("use '" + step.name + "' was refused before it existed (bad request or streams)");
        }
        const auto report = found->second.close();
        outcome.no_op = !report.has_value();
        if (report) {
          outcome.committed = static_cast<std::int64_t>(report->transitions.size());
          outcome.reports = report->transitions;
        }
        return outcome;
      }
      case StepKind::set_policy_metadata:
        controller_->set_policy_metadata(handle(step.value), step.priority, step.stable_key);
        return outcome;
    }
    return outcome;
  }

  static bool deciding(const Step& step) {
    return step.kind == StepKind::decide || step.kind == StepKind::use ||
           (step.kind == StepKind::scope_enter && !step.decision.empty());
  }

  // The controller invariants: deciding changes nothing, and a decision's
  // evictions are legal against the state it was made from.
  void check_controller(std::size_t index, const Step& step, const ResidencySnapshot& before, const Outcome& outcome,
                        const ResidencySnapshot& after) {
    std::vector<InvariantViolation> violations;
    if (step.kind == StepKind::decide) violations = check_unchanged(before, after);
    if (outcome.decision) {
      for (auto& violation : check_decision(before, *outcome.decision)) violations.push_back(std::move(violation));
    }
    if (!violations.empty()) {
      fail(index, step, "invariant " + violations.front().invariant + " violated: " + violations.front().detail);
    }
  }

  // --- contents ----------------------------------------------------------

  void check_content(const std::string& value, const ResidentValue& actual, const ResidencyLocation& location) {
    result_.content_checks += 1;
    const ValueDecl& decl = *scenario_.find_value(value);
    if (!same_contents(actual, expected_value(decl, decl.elements))) {
      throw StepFailure{"content of value '" + value + "' at " + location.name() + " differs from what was stored"};
    }
  }

  // Reads every materialization of `values` (all values when empty) and compares it.
  void verify(const std::vector<std::string>& values) {
    const ResidencySnapshot snapshot = manager_->snapshot();
    for (const auto& decl : scenario_.values) {
      if (!values.empty() && std::find(values.begin(), values.end(), decl.name) == values.end()) continue;
      const auto found = handles_.find(decl.name);
      if (found == handles_.end()) continue;
      const ResidencyValueSnapshot* entry = snapshot.value(found->second);
      if (entry == nullptr) continue;
      for (const auto& item : entry->materializations) {
        const std::optional<c10::Stream> consumer =
            item.location.is_cuda() ? std::optional(stream(StreamRef{item.location.cuda_index(), 1'000'000}))
                                    : std::nullopt;
        auto lease = manager_->acquire({found->second}, item.location, consumer);
        check_content(decl.name, lease.value(found->second), item.location);
        lease.release(true);
      }
    }
  }

  // --- checks ------------------------------------------------------------

  // Virtual time may move `ns` further only within the scenario's limit, so
  // no clock arithmetic can overflow and no run can stand for forever.
  void require_virtual_time(std::size_t index, const Step& step, std::int64_t ns) {
    const std::int64_t elapsed = simulated().now_ns() - clock_origin_ns_;
    if (ns > scenario_.limits.virtual_ns - elapsed) {
      fail(index, step, "virtual time would pass the limit of " + std::to_string(scenario_.limits.virtual_ns) +
                            " ns from the start (now at " + std::to_string(elapsed) +
                            " ns; raise it with limits: {virtual_ns: N})");
    }
  }

  [[noreturn]] void fail(std::size_t index, const Step& step, const std::string& message) {
    result_.failed_step = index;
    result_.failed_line = step.line;
    throw StepFailure{scenario_.file + ":" + std::to_string(step.line) + ": step " + std::to_string(index) + " (" +
                      to_string(step.kind) + "): " + message + step_changes()};
  }

  // What the failing step changed, from the snapshot before it, in value names.
  std::string step_changes() {
    if (!step_before_ || !manager_ || manager_->closed()) return "";
    std::vector<SnapshotDifference> changes;
    try {
      changes = diff(*step_before_, manager_->snapshot());
    } catch (...) {
      return "";
    }
    if (changes.empty()) return "\n      the step changed nothing the snapshot shows";
    constexpr std::size_t shown = 12;
    std::string text = "\n      the step changed:";
    for (std::size_t i = 0; i < changes.size() && i < shown; ++i) {
      SnapshotDifference change = changes[i];
      for (const auto& [name, handle] : handles_) {
        const std::string id = "/values/" + handle.handle_id;
        if (change.path.rfind(id, 0) == 0 && (change.path.size() == id.size() || change.path[id.size()] == '/')) {
          change.path = "/values/" + name + change.path.substr(id.size());
        }
      }
      text += "\n        " + describe(change);
    }
    if (changes.size() > shown) text += "\n        and " + std::to_string(changes.size() - shown) + " more";
    return text;
  }

  void check_outcome(std::size_t index, const Step& step, const Outcome& outcome) {
    const Expectation& expect = step.expect;
    const std::string expected_error = expect.error.value_or("none");
    if (outcome.error) {
      if (expected_error == "none") {
        fail(index, step, "unexpected " + outcome.error->kind + " error: " + outcome.error->message);
      }
      if (expected_error != "any" && expected_error != "maybe" && expected_error != outcome.error->kind) {
        fail(index, step, "expected error " + expected_error + ", got " + outcome.error->kind + ": " +
                              outcome.error->message);
      }
      if (expect.message && outcome.error->message.find(*expect.message) == std::string::npos) {
        fail(index, step, "expected the error message to contain '" + *expect.message + "', got: " +
                              outcome.error->message);
      }
      if (expect.injected && *expect.injected != outcome.error->injected) {
        fail(index, step, std::string("expected an ") + (*expect.injected ? "injected" : "organic") +
                              " error, got: " + outcome.error->message);
      }
      compare(index, step, "phase", expect.phase, outcome.error->phase);
      compare(index, step, "failed_index", expect.failed_index, outcome.error->failed_index);
      compare(index, step, "committed transitions", expect.committed, outcome.error->committed);
      check_error_fields(index, step, *outcome.error);
      return;
    }
    if (expect.budget_error || expect.stale_expected || expect.stale_actual || expect.failed_action ||
        expect.failed_reservation) {
      fail(index, step, "budget_error, stale, failed_action and failed_reservation apply only to failing steps");
    }
    if (expected_error != "none" && expected_error != "maybe") {
      fail(index, step, "expected error " + expected_error + ", but the step succeeded");
    }
    if (expect.no_op && *expect.no_op != outcome.no_op) {
      fail(index, step, std::string("expected no_op ") + (*expect.no_op ? "true" : "false") + ", got " +
                            (outcome.no_op ? "true" : "false"));
    }
    if (expect.source && *expect.source != outcome.source) {
      fail(index, step, "expected source " + name_of(*expect.source) + ", got " + name_of(outcome.source));
    }
    if (expect.destination && *expect.destination != outcome.destination) {
      fail(index, step, "expected destination " + name_of(*expect.destination) + ", got " + name_of(outcome.destination));
    }
    if (expect.reason && outcome.reason.value_or("").find(*expect.reason) == std::string::npos) {
      fail(index, step, "expected the reason to contain '" + *expect.reason + "', got '" + outcome.reason.value_or("") + "'");
    }
    compare(index, step, "committed transitions", expect.committed, outcome.committed);
    check_decision_expectations(index, step, outcome);
    check_report_expectations(index, step, outcome);
    if (outcome.explanation) {
      if (expect.feasible && *expect.feasible != outcome.explanation->feasible) {
        fail(index, step, std::string("expected the plan to be ") + (*expect.feasible ? "feasible" : "infeasible") +
                              ", explain said " + (outcome.explanation->feasible ? "feasible" : "infeasible: ") +
                              outcome.explanation->reason.value_or(""));
      }
      for (const auto& [location, bytes] : expect.predicted_peak) {
        compare_bytes(index, step, "predicted peak at " + location.name(), std::optional(bytes),
                outcome.explanation->predicted_peak(location));
      }
    } else if (expect.feasible || !expect.predicted_peak.empty()) {
      fail(index, step, "feasible and predicted_peak apply only to explain steps");
    }
  }

  void check_decision_expectations(std::size_t index, const Step& step, const Outcome& outcome) {
    const Expectation& expect = step.expect;
    const bool wanted = expect.reclaim || expect.enter || expect.evictions || expect.explored_states;
    if (!outcome.decision) {
      if (wanted) fail(index, step, "reclaim, enter, evictions and explored_states apply only to decide and use steps");
      return;
    }
    const ResidencyDecision& decision = *outcome.decision;
    const auto listed = [](const std::vector<ResidencyAction>& list) {
      std::string out = "[";
      for (const auto& action : list) out += (out.size() > 1 ? ", " : "") + describe(action);
      return out + "]";
    };
    const auto same = [&](const char* what, const std::optional<std::vector<ActionDecl>>& expected,
                          const std::vector<ResidencyAction>& actual) {
      if (!expected) return;
      const std::vector<ResidencyAction> wanted_actions = actions(*expected);
      if (wanted_actions != actual) {
        fail(index, step, std::string("expected the decision's ") + what + " actions " + named(listed(wanted_actions)) +
                              ", got " + named(listed(actual)));
      }
    };
    same("reclaim", expect.reclaim, decision.plan.reclaim);
    same("enter", expect.enter, decision.plan.enter);
    compare(index, step, "evictions", expect.evictions,
            std::optional(static_cast<std::int64_t>(decision.evictions.size())));
    compare(index, step, "explored states", expect.explored_states, std::optional(decision.explored_states));
  }

  // Handle ids in a description replaced by the scenario's value names,
  // word by word ("move 3 auto -> cuda:0" -> "move w auto -> cuda:0").
  std::string named(const std::string& text) const {
    std::map<std::string, std::string> names;
    for (const auto& [name, handle] : handles_) names[handle.handle_id] = name;
    std::string result, word;
    const auto flush = [&] {
      std::string tail;
      while (!word.empty() && (word.back() == ',' || word.back() == ']')) {
        tail.insert(tail.begin(), word.back());
        word.pop_back();
      }
      const auto found = names.find(word);
      result += (found == names.end() ? word : found->second) + tail;
      word.clear();
    };
    for (const char c : text) {
      if (c == ' ' || c == '[') {
        flush();
        result += c;
      } else {
        word += c;
      }
    }
    flush();
    return result;
  }

  std::string described(const ResidencyAction& action) const { return named(describe(action)); }

  // The manager quotes handle ids in its messages ("value '3' (Tensor) ...");
  // a scenario speaks of its values by name.
  std::string quoted_names(std::string message) const {
    for (const auto& [name, handle] : handles_) {
      const std::string id = "'" + handle.handle_id + "'";
      const std::string replacement = "'" + name + "'";
      for (auto at = message.find(id); at != std::string::npos; at = message.find(id, at + replacement.size())) {
        message.replace(at, id.size(), replacement);
      }
    }
    return message;
  }

  void check_error_fields(std::size_t index, const Step& step, const Classified& error) {
    const Expectation& expect = step.expect;
    if (expect.budget_error) {
      const BudgetErrorExpect& want = *expect.budget_error;
      if (!error.budget_location) fail(index, step, "expected a budget error's numbers, got a " + error.kind + " error");
      if (want.location && *want.location != *error.budget_location) {
        fail(index, step, "expected the budget error at " + want.location->name() + ", got " +
                              error.budget_location->name());
      }
      compare_bytes(index, step, "budget error budget", want.budget, error.budget_bytes);
      compare_bytes(index, step, "budget error used bytes", want.used, error.used_bytes);
      compare_bytes(index, step, "budget error reserved bytes", want.reserved, error.reserved_bytes);
      compare_bytes(index, step, "budget error requested bytes", want.requested, error.requested_bytes);
    }
    const auto version = [&](const char* what, const std::optional<std::uint64_t>& want,
                             const std::optional<std::uint64_t>& got) {
      if (!want) return;
      if (!got) fail(index, step, std::string("expected a stale error's ") + what + " version, got a " + error.kind + " error");
      if (*want != *got) {
        fail(index, step, std::string("expected the stale error's ") + what + " version " + std::to_string(*want) +
                              ", got " + std::to_string(*got));
      }
    };
    version("expected", expect.stale_expected, error.stale_expected);
    version("actual", expect.stale_actual, error.stale_actual);
    if (expect.failed_action) {
      if (!error.failed_action) fail(index, step, "expected a failed action, the error names none");
      if (described(*error.failed_action) != *expect.failed_action) {
        fail(index, step, "expected failed action '" + *expect.failed_action + "', got '" +
                              described(*error.failed_action) + "'");
      }
    }
    if (expect.failed_reservation) {
      if (!error.failed_reservation) fail(index, step, "expected a failed reservation, the error names none");
      if (*error.failed_reservation != *expect.failed_reservation) {
        fail(index, step, "expected failed reservation '" + *expect.failed_reservation + "', got '" +
                              *error.failed_reservation + "'");
      }
    }
  }

  static bool reason_matches(const std::optional<std::string>& want, const std::optional<std::string>& got) {
    if (!want) return true;
    if (*want == "none") return !got;
    return got && got->find(*want) != std::string::npos;
  }

  // The fields transition reports and action explanations share.
  template <class Want, class Got>
  void check_report_fields(std::size_t index, const Step& step, const std::string& at, const Want& want,
                           const Got& got) {
    if (want.action && *want.action != described(got.action)) {
      fail(index, step, "expected " + at + " to be '" + *want.action + "'");
    }
    if (want.no_op && *want.no_op != got.no_op) {
      fail(index, step, "expected " + at + " no_op " + (*want.no_op ? "true" : "false"));
    }
    if (want.source && *want.source != got.source) {
      fail(index, step, "expected " + at + " source " + name_of(*want.source) + ", got " + name_of(got.source));
    }
    if (want.destination && *want.destination != got.destination) {
      fail(index, step, "expected " + at + " destination " + name_of(*want.destination) + ", got " +
                            name_of(got.destination));
    }
    compare_bytes(index, step, at + " logical bytes", want.logical_bytes, std::optional(got.logical_nbytes));
    compare_bytes(index, step, at + " storage bytes", want.storage_bytes, std::optional(got.storage_nbytes));
    if (!reason_matches(want.reason, got.reason)) {
      fail(index, step, "expected " + at + " reason '" + *want.reason + "', got '" + got.reason.value_or("none") + "'");
    }
  }

  void check_report_expectations(std::size_t index, const Step& step, const Outcome& outcome) {
    const Expectation& expect = step.expect;
    if (expect.transitions) {
      if (!outcome.reports) {
        fail(index, step, "transitions apply to steps that return transition reports (primitives, execute, "
                          "scope_close, end_use)");
      }
      const auto& reports = *outcome.reports;
      std::string listed;
      for (const auto& report : reports) listed += (listed.empty() ? "" : ", ") + described(report.action);
      if (reports.size() != expect.transitions->size()) {
        fail(index, step, "expected " + std::to_string(expect.transitions->size()) + " transition(s), got " +
                              std::to_string(reports.size()) + ": [" + listed + "]");
      }
      for (std::size_t i = 0; i < reports.size(); ++i) {
        const TransitionExpect& want = (*expect.transitions)[i];
        const ResidencyTransitionReport& got = reports[i];
        const std::string at = "transition " + std::to_string(i) + " (" + described(got.action) + ")";
        check_report_fields(index, step, at, want, got);
        if (want.allocator_device) {
          const std::optional<ResidencyLocation>& device = *want.allocator_device;
          const bool same = device ? got.allocator_device && *got.allocator_device == device->device()
                                   : !got.allocator_device.has_value();
          if (!same) {
            fail(index, step, "expected " + at + " to sample the allocator of " + name_of(device) + ", got " +
                                  (got.allocator_device ? got.allocator_device->str() : std::string("none")));
          }
        }
      }
    }
    if (expect.explanation) {
      if (!outcome.explanation) fail(index, step, "explanation applies only to explain steps");
      const auto& actions = outcome.explanation->actions;
      if (actions.size() != expect.explanation->size()) {
        fail(index, step, "expected " + std::to_string(expect.explanation->size()) + " explained action(s), got " +
                              std::to_string(actions.size()));
      }
      for (std::size_t i = 0; i < actions.size(); ++i) {
        const ExplanationExpect& want = (*expect.explanation)[i];
        const ResidencyActionExplanation& got = actions[i];
        const std::string at = "explained action " + std::to_string(i) + " (" + described(got.action) + ")";
        check_report_fields(index, step, at, want, got);
        if (want.executable && *want.executable != got.executable) {
          fail(index, step, "expected " + at + " executable " + (*want.executable ? "true" : "false"));
        }
      }
    }
  }

  void check_state_expectations(std::size_t index, const Step& step, const ResidencySnapshot* snapshot,
                                const std::optional<std::uint64_t>& version_before) {
    const Expectation& expect = step.expect;
    const bool wanted = expect.state_version || expect.version_delta || expect.trace || !expect.facts.empty() ||
                        !expect.unregistered.empty();
    if (!wanted) return;
    if (snapshot == nullptr) fail(index, step, "state expectations need an open manager");
    if (expect.state_version && *expect.state_version != snapshot->state_version) {
      fail(index, step, "expected state_version " + std::to_string(*expect.state_version) + ", got " +
                            std::to_string(snapshot->state_version));
    }
    if (expect.version_delta) {
      if (!version_before) fail(index, step, "version_delta needs a state before the step");
      const auto delta = static_cast<std::int64_t>(snapshot->state_version - *version_before);
      if (delta != *expect.version_delta) {
        fail(index, step, "expected the step to change state_version by " + std::to_string(*expect.version_delta) +
                              ", it changed by " + std::to_string(delta) + " (" + std::to_string(*version_before) +
                              " -> " + std::to_string(snapshot->state_version) + ")");
      }
    }
    if (expect.trace) {
      const std::vector<std::string>& got = step_transitions_;  // already in value names
      if (got != *expect.trace) {
        std::string listed;
        for (const auto& entry : got) listed += (listed.empty() ? "" : ", ") + entry;
        fail(index, step, "expected the trace [" + [&] {
          std::string want;
          for (const auto& entry : *expect.trace) want += (want.empty() ? "" : ", ") + entry;
          return want;
        }() + "], got [" + listed + "]");
      }
    }
    for (const auto& [value, want] : expect.facts) {
      const ResidencyValueSnapshot* entry = snapshot->value(handle(value));
      if (entry == nullptr) fail(index, step, "expected value '" + value + "' in the snapshot");
      const std::string of = " of value '" + value + "'";
      if (want.has_source && *want.has_source != entry->has_source) {
        fail(index, step, "expected has_source " + std::string(*want.has_source ? "true" : "false") + of);
      }
      if (want.source_at && *want.source_at != entry->source_location) {
        fail(index, step, "expected source location " + name_of(*want.source_at) + of + ", got " +
                              name_of(entry->source_location));
      }
      if (want.type && *want.type != entry->spec.value_type) {
        fail(index, step, "expected type " + *want.type + of + ", got " + entry->spec.value_type);
      }
      if (want.mode && *want.mode != to_string(entry->spec.replica_mode)) {
        fail(index, step, "expected mode " + *want.mode + of + ", got " + std::string(to_string(entry->spec.replica_mode)));
      }
      if (want.recoverability && *want.recoverability != to_string(entry->spec.recoverability)) {
        fail(index, step, "expected recoverability " + *want.recoverability + of + ", got " +
                              std::string(to_string(entry->spec.recoverability)));
      }
      compare_bytes(index, step, "logical bytes" + of, want.logical_bytes, std::optional(entry->spec.logical_nbytes));
      compare_bytes(index, step, "storage bytes" + of, want.storage_bytes, std::optional(entry->spec.storage_nbytes));
      for (const auto& [location, facts] : want.at) {
        const MaterializationSnapshot* item = entry->at(location);
        if (item == nullptr) fail(index, step, "expected value '" + value + "' materialized at " + location.name());
        const std::string here = of + " at " + location.name();
        compare_bytes(index, step, "charged bytes" + here, facts.charged, std::optional(item->charged_nbytes));
        compare_bytes(index, step, "logical bytes" + here, facts.logical, std::optional(item->logical_nbytes));
        compare_bytes(index, step, "storage bytes" + here, facts.storage, std::optional(item->storage_nbytes));
        compare(index, step, "use count" + here, facts.uses, std::optional(item->use_count));
        compare(index, step, "hold count" + here, facts.holds, std::optional(item->hold_count));
        compare(index, step, "pending event count" + here, facts.pending, std::optional(item->pending_event_count));
      }
    }
    for (const auto& location : expect.unregistered) {
      if (snapshot->location(location) != nullptr) {
        fail(index, step, "expected location " + location.name() + " not to be registered");
      }
    }
  }

  template <class T>
  void compare(std::size_t index, const Step& step, const std::string& what, const std::optional<T>& expected,
               const std::optional<T>& actual) {
    if (!expected) return;
    if (!actual) fail(index, step, "expected " + what + " " + text(*expected) + ", got none");
    if (*expected != *actual) fail(index, step, "expected " + what + " " + text(*expected) + ", got " + text(*actual));
  }

  static std::string text(const std::string& value) { return value; }
  static std::string text(std::int64_t value) { return std::to_string(value); }

  // Byte counts in the units people write them in, exact count alongside:
  // "48.0 MiB (50331648 B)".
  static std::string bytes_text(std::int64_t bytes) {
    const std::string human = format_bytes(bytes);
    return bytes > -1024 && bytes < 1024 ? human : human + " (" + std::to_string(bytes) + " B)";
  }
  void compare_bytes(std::size_t index, const Step& step, const std::string& what,
                     const std::optional<std::int64_t>& expected, const std::optional<std::int64_t>& actual) {
    if (!expected) return;
    if (!actual) fail(index, step, "expected " + what + " " + bytes_text(*expected) + ", got none");
    if (*expected != *actual) {
      fail(index, step, "expected " + what + " " + bytes_text(*expected) + ", got " + bytes_text(*actual));
    }
  }

  void check_snapshot_expectations(std::size_t index, const Step& step, const ResidencySnapshot* snapshot) {
    const Expectation& expect = step.expect;
    const bool needs_snapshot = !expect.locations.empty() || !expect.resident.empty() || !expect.discarded.empty();
    if (expect.faults_fired) {
      const auto fired = static_cast<std::int64_t>(result_.faults.size());
      compare(index, step, "faults fired", expect.faults_fired, std::optional(fired));
    }
    if (!needs_snapshot && !expect.diagnostics) return;
    if (snapshot == nullptr) fail(index, step, "snapshot expectations need an open manager");
    if (expect.diagnostics) {
      compare(index, step, "diagnostics", expect.diagnostics,
              std::optional(static_cast<std::int64_t>(manager_->diagnostics().size())));
    }
    for (const auto& [location, want] : expect.locations) {
      const ResidencyLocationSnapshot* got = snapshot->location(location);
      if (got == nullptr) fail(index, step, "expected location " + location.name() + " to be registered");
      const std::string at = " at " + location.name();
      if (want.budget) compare_bytes(index, step, "budget" + at, want.budget, got->budget_bytes);
      compare_bytes(index, step, "used bytes" + at, want.used, std::optional(got->used_bytes));
      compare_bytes(index, step, "reserved bytes" + at, want.reserved, std::optional(got->reserved_bytes));
      if (want.remaining && *want.remaining != got->remaining_budget_bytes) {
        fail(index, step, "expected remaining bytes" + at + " " +
                              (*want.remaining ? bytes_text(**want.remaining) : "none") + ", got " +
                              (got->remaining_budget_bytes ? bytes_text(*got->remaining_budget_bytes) : "none"));
      }
      compare_bytes(index, step, "peak used bytes" + at, want.peak_used, std::optional(got->peak_used_bytes));
      compare_bytes(index, step, "peak charged bytes" + at, want.peak_charged,
                    std::optional(got->peak_charged_bytes));
      compare(index, step, "value count" + at, want.values, std::optional(got->value_count));
      compare(index, step, "reservation count" + at, want.reservations, std::optional(got->reservation_count));
      compare(index, step, "use count" + at, want.uses, std::optional(got->use_count));
      compare(index, step, "hold count" + at, want.holds, std::optional(got->hold_count));
      compare(index, step, "pending event count" + at, want.pending, std::optional(got->pending_event_count));
    }
    for (const auto& [value, places] : expect.resident) {
      const ResidencyValueSnapshot* entry = snapshot->value(handle(value));
      std::vector<ResidencyLocation> actual;
      if (entry != nullptr) {
        for (const auto& item : entry->materializations) actual.push_back(item.location);
      }
      if (actual != places) {
        const auto list = [](const std::vector<ResidencyLocation>& locations) {
          std::string out = "[";
          for (const auto& location : locations) out += (out.size() > 1 ? ", " : "") + location.name();
          return out + "]";
        };
        fail(index, step, "expected value '" + value + "' resident at " + list(places) + ", got " + list(actual));
      }
    }
    for (const auto& [value, discarded] : expect.discarded) {
      const ResidencyValueSnapshot* entry = snapshot->value(handle(value));
      const bool actual = entry != nullptr && entry->discarded;
      if (actual != discarded) {
        fail(index, step, "expected value '" + value + "' " + (discarded ? "" : "not ") + "discarded");
      }
    }
  }

  // A feasible explanation of a fault-free run must execute, within its predicted peaks.
  void check_preflight(std::size_t index, const Step& step, const ResidencyPlanExplanation& preflight,
                       const Outcome& outcome, bool faults_fired,
                       const std::map<ResidencyLocation, std::int64_t>& peaks_before,
                       const ResidencySnapshot& snapshot) {
    if (!preflight.feasible || faults_fired) return;
    if (outcome.error && outcome.error->kind != "stale" && outcome.error->kind != "invalid_argument") {
      fail(index, step, "invariant explain-execute violated: explain found plan '" + preflight.plan_name +
                            "' feasible, but running it without faults failed: " + outcome.error->message);
    }
    if (outcome.error) return;
    // An executed plan ran every action it explained, so its prediction is
    // exact: each peak becomes max(earlier peak, predicted). A scope's entry
    // runs only part of what was explained (not the exit), so there the
    // prediction is a bound.
    const bool exact = step.kind == StepKind::execute;
    for (const auto& location : snapshot.locations) {
      const auto before = peaks_before.find(location.location);
      const std::int64_t previous = before == peaks_before.end() ? 0 : before->second;
      const auto predicted = preflight.predicted_peak(location.location);
      if (exact) {
        const std::int64_t expected = std::max(previous, predicted.value_or(0));
        if (location.peak_charged_bytes != expected) {
          fail(index, step, "invariant predicted-peak violated at " + location.location.name() + ": observed peak " +
                                std::to_string(location.peak_charged_bytes) + ", expected max(earlier " +
                                std::to_string(previous) + ", predicted " +
                                (predicted ? std::to_string(*predicted) : "none") + ")");
        }
        continue;
      }
      if (location.peak_charged_bytes <= previous) continue;
      if (!predicted || location.peak_charged_bytes > *predicted) {
        fail(index, step, "invariant predicted-peak violated at " + location.location.name() + ": observed peak " +
                              std::to_string(location.peak_charged_bytes) + " > predicted " +
                              (predicted ? std::to_string(*predicted) : "none"));
      }
    }
  }

  // Snapshot + invariants after each operation; nullptr once the manager is closed.
  const ResidencySnapshot* after_operation() {
    collect_faults();
    step_transitions_.clear();
    if (!manager_ || manager_->closed()) {
      last_snapshot_.reset();
      return nullptr;
    }
    for (const auto& report : manager_->trace()) {
      step_transitions_.push_back(std::string(report.no_op ? "no-op " : "") + described(report.action));
    }
    manager_->clear_trace();
    last_snapshot_ = manager_->snapshot();
    const auto violations = checker_.check(*last_snapshot_);
    result_.invariant_checks = checker_.checks();
    if (!violations.empty()) {
      std::string message = "invariant " + violations.front().invariant + " violated: " + violations.front().detail;
      if (current_step_ < scenario_.steps.size() && setup_done_) fail(current_step_, scenario_.steps[current_step_], message);
      throw StepFailure{"after setup: " + message};
    }
    last_peaks_.clear();
    for (const auto& location : last_snapshot_->locations) last_peaks_[location.location] = location.peak_charged_bytes;
    setup_done_ = true;
    return &*last_snapshot_;
  }

  void collect_faults() {
    const auto fired = faults_->fired();
    for (std::size_t i = fired_seen_; i < fired.size(); ++i) {
      record_fault(fired[i].rule, to_string(fired[i].operation), fired[i].call_index, fired[i].detail);
    }
    fired_seen_ = fired.size();
  }

  void finish() {
    current_step_ = scenario_.steps.size();
    if (manager_ && !manager_->closed()) {
      try {
        verify({});
      } catch (const StepFailure& failure) {
        throw StepFailure{"final content check: " + failure.message};
      } catch (const std::exception& error) {
        // Values still protected or unreadable at the end are not a content failure.
        (void)error;
      }
    }
    if (last_snapshot_) {
      for (const auto& location : last_snapshot_->locations) {
        result_.peak_charged.emplace_back(location.location.name(), location.peak_charged_bytes);
      }
    }
  }

  void apply_canary() {
    if (!scenario_.must_fail) return;
    if (result_.verdict == "failed" && result_.failure.find(*scenario_.must_fail) != std::string::npos) {
      result_.verdict = "passed";
      result_.failure = "canary failed as required: " + result_.failure;
    } else if (result_.verdict == "failed") {
      result_.failure = "canary failed for the wrong reason (wanted '" + *scenario_.must_fail + "'): " + result_.failure;
    } else {
      result_.verdict = "failed";
      result_.failure = "canary scenario passed, but it must fail with '" + *scenario_.must_fail +
                        "': the harness no longer detects this breakage";
    }
  }

  const Scenario& scenario_;
  const ReplayOptions& options_;
  ScenarioResult result_;
  std::shared_ptr<SimulatedRuntime> simulated_;
  std::shared_ptr<FaultInjectingRuntime> faults_;
  std::int64_t clock_origin_ns_ = 0;
  std::unique_ptr<ResidencyManager> manager_;
  // Lifetimes are declared after the manager so they are destroyed first.
  std::map<std::string, ResidencyHandle> handles_;
  std::map<std::string, ResidencyLease> leases_;
  std::map<std::string, ResidencyHold> holds_;
  std::map<std::string, ResidencyReservation> reservations_;
  std::map<std::string, ResidencyScope> scopes_;
  // The controller after the manager, its uses after it.
  std::unique_ptr<ResidencyController> controller_;
  std::map<std::string, ResidencyDecision> decisions_;
  std::map<std::string, ResidencyUse> uses_;
  std::map<std::string, std::uint64_t> remembered_;
  std::map<std::string, std::int64_t> loads_;
  // Adopted values whose storage another value aliases (kept to hand out).
  std::map<std::string, ResidentValue> adopted_;
  InvariantChecker checker_;
  std::optional<ResidencySnapshot> last_snapshot_;
  std::optional<ResidencySnapshot> step_before_;  // the state the current step started from
  std::map<ResidencyLocation, std::int64_t> last_peaks_;
  std::vector<std::string> step_transitions_;
  std::size_t fired_seen_ = 0;
  std::size_t current_step_ = 0;
  bool setup_done_ = false;
};

}  // namespace

ScenarioResult replay(const Scenario& scenario, const ReplayOptions& options) {
  return Replayer(scenario, options).run();
}

}  // namespace fhelium::harness
