// The replay engine. A Replayer owns one scenario run: the runtime stack, the
// manager, named handles and lifetimes, the invariant checker and the result.
// Each step runs in three parts: perform the operation and capture its
// outcome (result or classified error), compare the outcome with the step's
// expectations, then snapshot, check invariants and compare the snapshot
// expectations. The first mismatch ends the run with a located failure.
//
// The parts live beside it in replay/: the runtime stack, the scenario's
// values and source faults, the conversion of declarations into manager
// inputs, outcome classification and the expectation checks; the
// explain-versus-execute and controller checks sit with the invariant checker.
#include "fhelium/harness/replay.hpp"

#include <algorithm>
#include <limits>

#include "fhelium/harness/contents.hpp"
#include "fhelium/harness/decision_checker.hpp"
#include "fhelium/harness/explain_checker.hpp"
#include "fhelium/harness/invariant_checker.hpp"
#include "fhelium/harness/text_report.hpp"
#include "fhelium/harness/verdict_checker.hpp"
#include "fhelium/residency.hpp"
#include "replay/declarations.hpp"
#include "replay/expectations.hpp"
#include "replay/outcome.hpp"
#include "replay/runtime_stack.hpp"
#include "replay/values.hpp"

namespace fhelium::harness {

using namespace residency;
using namespace replay_detail;

namespace {

// Ends the run at the current step.
struct StepFailure {
  std::string message;
};

// The replay's own calls around the steps (its snapshots, the explain it
// compares a plan with, the final content check): fault rules with
// `during: step` pass them by, and those with `during: checks` see only them.
class OwnChecks {
 public:
  explicit OwnChecks(FaultInjectingRuntime& faults) : faults_(faults) { faults_.begin_checking(); }
  ~OwnChecks() { faults_.end_checking(); }
  OwnChecks(const OwnChecks&) = delete;
  OwnChecks& operator=(const OwnChecks&) = delete;

 private:
  FaultInjectingRuntime& faults_;
};

class Replayer {
 public:
  Replayer(const Scenario& scenario, const ReplayOptions& options)
      : scenario_(scenario), options_(options), names_(scenario, "") {
    result_.file = scenario.file;
    result_.name = scenario.name;
    result_.description = scenario.description;
    result_.seed = options.seed.value_or(scenario.seed);
    result_.runtime = options.runtime.value_or(scenario.runtime);
  }

  ScenarioResult run() {
    if (const auto reason = unsupported(scenario_, result_.runtime)) {
      result_.verdict = "skipped";
      result_.failure = *reason;
      return result_;
    }
    try {
      setup();
      for (std::size_t index = 0; index < scenario_.steps.size(); ++index) run_step(index, scenario_.steps[index]);
      collect_activity();  // what the steps did, not the final content check
      finish();
      result_.verdict = "passed";
    } catch (const StepFailure& failure) {
      result_.verdict = "failed";
      result_.failure = failure.message;
      collect_activity();
    }
    // Also for a failed run: the state it stopped in.
    result_.final_snapshot = last_snapshot_;
    for (const auto& [name, handle] : names_.handles()) result_.value_names[handle.handle_id] = name;
    apply_canary();
    return result_;
  }

 private:
  // --- setup -------------------------------------------------------------

  void setup() {
    RuntimeStack stack;
    try {
      stack = build_runtime(scenario_, result_.runtime, result_.seed, options_.wrap_runtime);
    } catch (const std::exception& error) {
      fail_setup(std::string("runtime: ") + error.what());
    }
    simulated_ = stack.simulated;
    faults_ = stack.faults;
    clock_origin_ns_ = stack.origin_ns;  // reports count virtual time from the start of the run
    values_ = std::make_unique<ScenarioValues>(
        scenario_, faults_->upstream(),
        [this](const std::string& rule, const std::string& operation, const std::string& effect, std::int64_t index,
               const std::string& detail) { record_fault(rule, operation, effect, index, detail); });
    ManagerOptions options;
    options.budgets = scenario_.budgets;
    options.trace_capacity = scenario_.trace_capacity;
    options.runtime = faults_;
    try {
      manager_ = std::make_unique<ResidencyManager>(std::move(options));
    } catch (const std::exception& error) {
      fail_setup(std::string("manager: ") + error.what());
    }
    names_ = Declarations(scenario_, manager_->manager_id());
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

  void create(const ValueDecl& decl) { names_.bind(decl.name, values_->create(*manager_, decl)); }

  void record_fault(const std::string& rule, const std::string& operation, const std::string& effect,
                    std::int64_t index, const std::string& detail, std::optional<std::int64_t> at_ns = std::nullopt) {
    const std::int64_t when = at_ns.value_or(faults_->upstream()->now_ns()) - clock_origin_ns_;
    result_.faults.push_back(FiredFaultRecord{rule, operation, effect, index, current_step_, detail, when});
  }

  // Virtual time since the start of the run.
  std::int64_t elapsed_ns() const { return faults_->upstream()->now_ns() - clock_origin_ns_; }

  void clear_fired_baseline() { fired_seen_ = faults_->fired().size(); }

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
    const std::int64_t started_ns = elapsed_ns();
    step_before_ = last_snapshot_;
    const std::size_t faults_before = result_.faults.size() + faults_->fired().size() - fired_seen_;
    const std::optional<std::uint64_t> version_before =
        last_snapshot_ ? std::optional(last_snapshot_->state_version) : std::nullopt;
    std::optional<ResidencyPlanExplanation> preflight;
    const auto peaks_before = last_peaks_;
    const std::int64_t refusals_before = simulated_ ? simulated_->device_refusals() : 0;
    const std::int64_t upstream_failures_before = faults_->upstream_failures();
    // The controller decides from a fresh snapshot (which reaps completed
    // work); the checks compare against the same state.
    std::optional<ResidencySnapshot> before;
    if (deciding(step) && manager_ && !manager_->closed()) {
      const OwnChecks checks(*faults_);
      before = manager_->snapshot();
    }
    Outcome outcome;
    try {
      outcome = perform(step, preflight);
    } catch (const StepFailure&) {
      throw;
    } catch (...) {
      outcome.error = classify(std::current_exception());
    }
    if (!values_->misuse().empty()) fail(index, step, "scenario error: " + values_->misuse());
    if (outcome.error) {
      result_.error_paths[outcome.error->kind] += 1;
      // Manager ids are process-wide counters; keep reports identical across replays.
      std::string& message = outcome.error->message;
      const std::string& id = manager_->manager_id();
      for (auto at = message.find(id); at != std::string::npos; at = message.find(id, at)) {
        message.replace(at, id.size(), "manager");
      }
      message = names_.quoted_names(message);
    }
    expect(index, step, [&] { check_outcome(names_, step, outcome); });
    const ResidencySnapshot* snapshot = after_operation();
    StepRecord record;
    record.index = index;
    record.line = step.line;
    record.kind = to_string(step.kind);
    record.outcome = outcome.error ? outcome.error->kind : (outcome.no_op ? "no-op" : "ok");
    record.message = outcome.error ? outcome.error->message : outcome.reason.value_or("");
    record.transitions = step_transitions_;
    record.spans = std::move(step_spans_);
    record.started_ns = started_ns;
    record.virtual_ns = elapsed_ns();
    if (snapshot != nullptr) {
      record.state_version = snapshot->state_version;
      for (const auto& location : snapshot->locations) {
        record.locations.push_back({location.location.name(), location.used_bytes, location.reserved_bytes,
                                    location.budget_bytes, location.peak_charged_bytes});
      }
      for (const auto& value : snapshot->values) {
        for (const auto& item : value.materializations) {
          if (item.use_count == 0 && item.hold_count == 0 && item.pending_event_count == 0) continue;
          record.protections.push_back({names_.value_name(value.handle.handle_id), item.location.name(),
                                        item.use_count, item.hold_count, item.pending_event_count});
        }
      }
    }
    const bool faults_fired = result_.faults.size() + faults_->fired().size() - fired_seen_ > faults_before;
    if (preflight && snapshot != nullptr) {
      ExplainedRun run;
      run.explanation = &*preflight;
      run.faults_fired = faults_fired;
      // On the torch runtime only the error tells that the device was out of
      // memory; a runtime wrapped around the replay's (ReplayOptions::
      // wrap_runtime) fails in ways of its own, seen as failed device calls.
      run.device_refused = (simulated_ && simulated_->device_refusals() > refusals_before) ||
                           faults_->upstream_failures() > upstream_failures_before ||
                           (outcome.error && outcome.error->kind == "out_of_memory");
      if (outcome.error) {
        run.error_kind = outcome.error->kind;
        run.error_message = outcome.error->message;
      }
      run.whole_plan = step.kind == StepKind::execute || primitive(step);
      if (run.whole_plan && outcome.reports) run.transitions = &*outcome.reports;
      run.peaks_before = peaks_before;
      run.after = snapshot;
      require_none(index, step, check_explained_run(run));
    }
    if (before && snapshot != nullptr) check_controller(index, step, *before, outcome, *snapshot);
    if (step_before_) {
      check_lifetime(index, step, *step_before_, outcome);
      check_refusal(index, step, *step_before_, outcome);
    }
    expect(index, step, [&] {
      check_snapshot(names_, step, snapshot, static_cast<std::int64_t>(result_.faults.size()),
                     [&] { return static_cast<std::int64_t>(manager_->diagnostics().size()); });
      check_state(names_, step, snapshot, version_before, step_transitions_);
    });
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

  // Runs expectation checks; a mismatch fails the step.
  template <class F>
  void expect(std::size_t index, const Step& step, F checks) {
    try {
      checks();
    } catch (const ExpectationMismatch& mismatch) {
      fail(index, step, mismatch.message);
    }
  }

  void require_none(std::size_t index, const Step& step, const std::vector<InvariantViolation>& violations) {
    if (!violations.empty()) {
      // Handle ids in a detail are quoted: the scenario's names replace them.
      fail(index, step,
           "invariant " + violations.front().invariant + " violated: " + names_.quoted_names(violations.front().detail));
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

  // A lifetime or decision a step refers to; it is missing at run time when
  // the step that was to make it failed (a logic error of the scenario).
  template <class Map>
  static typename Map::mapped_type& made(Map& made, const std::string& name, const char* what, const char* maker) {
    const auto found = made.find(name);
    if (found == made.end()) {
      throw std::logic_error(std::string(what) + " '" + name + "' does not exist: the " + maker +
                             " step that was to make it failed");
    }
    return found->second;
  }

  // What explain says of `action` as a plan of its own, against the state a
  // primitive step starts from: the primitive must do what that plan would
  // (check_explained_run, as a whole plan). None when explain itself fails (a
  // closed manager, a fault in the check).
  std::optional<ResidencyPlanExplanation> explain_alone(ResidencyAction action) {
    try {
      const OwnChecks checks(*faults_);
      return manager_->explain(ResidencyPlan{"primitive", {std::move(action)}});
    } catch (...) {
      return std::nullopt;
    }
  }

  static bool primitive(const Step& step) {
    return step.kind == StepKind::ensure || step.kind == StepKind::copy || step.kind == StepKind::move ||
           step.kind == StepKind::drop || step.kind == StepKind::discard;
  }

  Outcome perform(const Step& step, std::optional<ResidencyPlanExplanation>& preflight) {
    Outcome outcome;
    const auto stream_arg = [&]() -> std::optional<c10::Stream> {
      if (!step.stream) return std::nullopt;
      return Declarations::stream(*step.stream);
    };
    switch (step.kind) {
      case StepKind::adopt:
      case StepKind::register_source:
        create(*scenario_.find_value(step.value));
        return outcome;
      case StepKind::ensure:
      case StepKind::copy: {
        const ResidencyHandle handle = names_.step_handle(step);
        preflight = explain_alone(EnsureResident{handle, *step.location});
        return transition(manager_->ensure(handle, *step.location, stream_arg()));
      }
      case StepKind::move: {
        const ResidencyHandle handle = names_.step_handle(step);
        preflight = explain_alone(MoveResident{handle, *step.location, step.from});
        return transition(manager_->move(handle, *step.location, step.from, stream_arg()));
      }
      case StepKind::drop: {
        const ResidencyHandle handle = names_.step_handle(step);
        preflight = explain_alone(DropResident{handle, *step.location});
        return transition(manager_->drop(handle, *step.location));
      }
      case StepKind::discard: {
        const ResidencyHandle handle = names_.step_handle(step);
        preflight = explain_alone(DiscardValue{handle});
        return transition(manager_->discard(handle));
      }
      case StepKind::execute: {
        const auto list = names_.actions(step.actions);
        try {
          const OwnChecks checks(*faults_);
          preflight = manager_->explain(ResidencyPlan{step.plan, list});
        } catch (...) {
        }
        const ResidencyPlanReport report =
            manager_->execute_actions(list, step.plan, names_.transfer_streams(step), expected_version(step));
        outcome.committed = static_cast<std::int64_t>(report.transitions.size());
        outcome.reports = report.transitions;
        return outcome;
      }
      case StepKind::explain: {
        outcome.explanation = manager_->explain(names_.plan(step.plan), expected_version(step));
        outcome.reason = outcome.explanation->reason;
        return outcome;
      }
      case StepKind::scope_enter: {
        if (!step.decision.empty()) {
          const ResidencyDecision& decision = made(decisions_, step.decision, "decision", "decide");
          preflight = decision.explanation;
          auto [it, inserted] =
              scopes_.insert_or_assign(step.name, controller_->scope(decision, names_.transfer_streams(step)));
          it->second.enter();
          return outcome;
        }
        try {
          const OwnChecks checks(*faults_);
          preflight = manager_->explain(names_.plan(step.plan));
        } catch (...) {
        }
        auto [it, inserted] =
            scopes_.insert_or_assign(step.name, manager_->scope(names_.plan(step.plan), names_.transfer_streams(step), expected_version(step)));
        it->second.enter();
        return outcome;
      }
      case StepKind::scope_close: {
        const auto report = made(scopes_, step.name, "scope", "scope_enter").close();
        outcome.no_op = !report.has_value();
        if (report) {
          outcome.committed = static_cast<std::int64_t>(report->transitions.size());
          outcome.reports = report->transitions;
        }
        return outcome;
      }
      case StepKind::acquire: {
        std::vector<ResidencyHandle> list;
        for (const auto& value : step.values) list.push_back(names_.handle(value));
        auto lease = manager_->acquire(list, *step.location, stream_arg());
        for (const auto& value : step.values) check_content(value, lease.value(names_.handle(value)), *step.location);
        leases_.insert_or_assign(step.name, std::move(lease));
        return outcome;
      }
      case StepKind::add_consumer_stream:
        made(leases_, step.name, "lease", "acquire").add_consumer_stream(Declarations::stream(*step.stream));
        return outcome;
      case StepKind::release:
        if (step.lifetime_kind == "lease") made(leases_, step.name, "lease", "acquire").release(step.wait);
        if (step.lifetime_kind == "hold") made(holds_, step.name, "hold", "hold").release();
        if (step.lifetime_kind == "reservation") made(reservations_, step.name, "reservation", "reserve").release();
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
        for (const auto& value : step.values) list.push_back(names_.handle(value));
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
        simulated().complete(Declarations::stream(*step.stream));
        return outcome;
      case StepKind::work:
        if (step.ns != SimulatedRuntime::never) {
          // The work ends at the stream's tail (or now) plus its duration.
          const std::int64_t tail = simulated().stream_tail_ns(Declarations::stream(*step.stream));
          const std::int64_t queued = tail == SimulatedRuntime::never ? 0 : std::max<std::int64_t>(0, tail - simulated().now_ns());
          std::int64_t ends_in = 0;
          if (__builtin_add_overflow(queued, step.ns, &ends_in)) ends_in = std::numeric_limits<std::int64_t>::max();
          require_virtual_time(current_step_, step, ends_in);
        }
        simulated().enqueue(Declarations::stream(*step.stream), step.ns);
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
        ResidencyDecision decision = controller_->decide(names_.request(step));
        if (!step.decision.empty()) decisions_.insert_or_assign(step.decision, decision);
        outcome.decision = std::move(decision);
        return outcome;
      }
      case StepKind::use: {
        // Kept even when entry fails, so a later end_use sees what is left.
        auto [stored, inserted] = uses_.insert_or_assign(
            step.name, controller_->use(names_.request(step), names_.consumer_streams(step), names_.transfer_streams(step)));
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
          check_content(requirement.value, use.value(names_.handle(requirement.value), requirement.location),
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
        controller_->set_policy_metadata(names_.handle(step.value), step.priority, step.stable_key);
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
      // A decide step changes nothing but retired leases (check_unchanged
      // holds it to that), so the state after it is the state the decision
      // was made from, less any leases the checks after it retired: every
      // protection left there, pending ones included, the decision saw too.
      // A use step executes its decision, so only the state before it
      // serves; when the decision saw a later version, its own snapshot may
      // have retired pending leases there, and they prove nothing.
      const bool decide = step.kind == StepKind::decide;
      const bool pending_protect = decide || before.state_version == outcome.decision->expected_state_version;
      for (auto& violation : check_decision(decide ? after : before, *outcome.decision, pending_protect)) {
        violations.push_back(std::move(violation));
      }
    }
    require_none(index, step, violations);
  }

  // Whether an acquire, hold or reserve step was granted as the state before
  // it says it must be (check_lifetime_verdict).
  void check_lifetime(std::size_t index, const Step& step, const ResidencySnapshot& before, const Outcome& outcome) {
    LifetimeCall call;
    if (step.kind == StepKind::acquire || step.kind == StepKind::hold) {
      call.kind = step.kind == StepKind::acquire ? LifetimeCall::Kind::acquire : LifetimeCall::Kind::hold;
      for (const auto& value : step.values) call.handles.push_back(names_.handle(value));
    } else if (step.kind == StepKind::reserve) {
      call.kind = LifetimeCall::Kind::reserve;
      call.bytes = step.bytes;
    } else {
      return;
    }
    call.location = *step.location;
    if (outcome.error) call.error_kind = outcome.error->kind;
    require_none(index, step, check_lifetime_verdict(before, call));
  }

  // Whether a budget refusal of a call that charges one location at a time
  // (adopt, reserve, one ensure, copy or move) reports the state before it
  // (check_budget_refusal). Plans are left out: their refusals meet the
  // state their earlier actions left.
  void check_refusal(std::size_t index, const Step& step, const ResidencySnapshot& before, const Outcome& outcome) {
    const bool single = step.kind == StepKind::adopt || step.kind == StepKind::reserve || step.kind == StepKind::ensure ||
                        step.kind == StepKind::copy || step.kind == StepKind::move;
    if (!single || !outcome.error || outcome.error->kind != "budget" || !outcome.error->budget_location) return;
    const Classified& error = *outcome.error;
    const BudgetRefusal refusal{*error.budget_location, error.budget_bytes.value_or(0), error.used_bytes.value_or(0),
                                error.reserved_bytes.value_or(0), error.requested_bytes.value_or(0)};
    const std::optional<std::int64_t> requested =
        step.kind == StepKind::reserve ? std::optional<std::int64_t>(step.bytes) : std::nullopt;
    require_none(index, step, check_budget_refusal(before, refusal, requested));
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
      const auto found = names_.handles().find(decl.name);
      if (found == names_.handles().end()) continue;
      const ResidencyValueSnapshot* entry = snapshot.value(found->second);
      if (entry == nullptr) continue;
      for (const auto& item : entry->materializations) {
        const std::optional<c10::Stream> consumer =
            item.location.is_cuda() ? std::optional(Declarations::stream(StreamRef{item.location.cuda_index(), 1'000'000}))
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
      const OwnChecks checks(*faults_);
      changes = diff(*step_before_, manager_->snapshot());
    } catch (...) {
      return "";
    }
    if (changes.empty()) return "\n      the step changed nothing the snapshot shows";
    constexpr std::size_t shown = 12;
    std::string text = "\n      the step changed:";
    for (std::size_t i = 0; i < changes.size() && i < shown; ++i) {
      SnapshotDifference change = changes[i];
      for (const auto& [name, handle] : names_.handles()) {
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

  // Snapshot + invariants after each operation; nullptr once the manager is closed.
  const ResidencySnapshot* after_operation() {
    collect_faults();
    step_transitions_.clear();
    if (!manager_ || manager_->closed()) {
      last_snapshot_.reset();
      return nullptr;
    }
    step_spans_.clear();
    const OwnChecks checks(*faults_);
    for (const auto& report : manager_->trace()) {
      step_transitions_.push_back(std::string(report.no_op ? "no-op " : "") + names_.described(report.action));
      const auto& where = report.destination ? report.destination : report.source;
      step_spans_.push_back({step_transitions_.back(), where ? where->name() : std::string("values"),
                             report.started_at_ns - clock_origin_ns_, report.completed_at_ns - clock_origin_ns_});
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
    note_freed_alias_targets(*last_snapshot_);
    setup_done_ = true;
    return &*last_snapshot_;
  }

  // An alias target whose materialization at its adoption location is gone
  // (or that was discarded) no longer holds the storage others alias.
  void note_freed_alias_targets(const ResidencySnapshot& snapshot) {
    for (const auto& target : values_->alias_targets()) {
      const auto handle = names_.handles().find(target);
      if (handle == names_.handles().end()) continue;
      const ResidencyValueSnapshot* value = snapshot.value(handle->second);
      const ResidencyLocation at = scenario_.find_value(target)->at;
      const bool holds = value != nullptr && !value->discarded &&
                         std::any_of(value->materializations.begin(), value->materializations.end(),
                                     [&](const MaterializationSnapshot& item) { return item.location == at; });
      if (!holds) values_->storage_freed(target, current_step_);
    }
  }

  void collect_faults() {
    const auto fired = faults_->fired();
    for (std::size_t i = fired_seen_; i < fired.size(); ++i) {
      record_fault(fired[i].rule, to_string(fired[i].operation), to_string(fired[i].effect), fired[i].call_index,
                   fired[i].detail, fired[i].at_ns);
    }
    fired_seen_ = fired.size();
  }

  // The simulated runtime's copies, stream work and events, once.
  void collect_activity() {
    if (!simulated_ || !result_.stream_activity.empty()) return;
    for (const RuntimeActivity& activity : simulated_->activity()) {
      // Queued behind work that never completes: it never starts either.
      if (activity.start_ns == SimulatedRuntime::never) continue;
      StreamSlice slice;
      slice.kind = activity.kind == RuntimeActivity::Kind::copy   ? "copy"
                   : activity.kind == RuntimeActivity::Kind::work ? "work"
                                                                  : "event";
      slice.stream = activity.device < 0 ? std::string("host copies")
                                         : "cuda:" + std::to_string(activity.device) + " stream " +
                                               std::to_string(activity.stream_id);
      if (activity.kind == RuntimeActivity::Kind::copy) {
        slice.destination = activity.destination.name();
        slice.bytes = activity.bytes;
      }
      slice.start_ns = activity.start_ns - clock_origin_ns_;
      if (activity.end_ns != SimulatedRuntime::never) slice.end_ns = activity.end_ns - clock_origin_ns_;
      result_.stream_activity.push_back(std::move(slice));
    }
  }

  void finish() {
    current_step_ = scenario_.steps.size();
    if (manager_ && !manager_->closed()) {
      try {
        const OwnChecks checks(*faults_);
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
  Declarations names_;
  std::shared_ptr<SimulatedRuntime> simulated_;
  std::shared_ptr<FaultInjectingRuntime> faults_;
  std::int64_t clock_origin_ns_ = 0;
  // Sources call into values_: it outlives the manager.
  std::unique_ptr<ScenarioValues> values_;
  std::unique_ptr<ResidencyManager> manager_;
  // Lifetimes are declared after the manager so they are destroyed first.
  std::map<std::string, ResidencyLease> leases_;
  std::map<std::string, ResidencyHold> holds_;
  std::map<std::string, ResidencyReservation> reservations_;
  std::map<std::string, ResidencyScope> scopes_;
  // The controller after the manager, its uses after it.
  std::unique_ptr<ResidencyController> controller_;
  std::map<std::string, ResidencyDecision> decisions_;
  std::map<std::string, ResidencyUse> uses_;
  std::map<std::string, std::uint64_t> remembered_;
  InvariantChecker checker_;
  std::optional<ResidencySnapshot> last_snapshot_;
  std::optional<ResidencySnapshot> step_before_;  // the state the current step started from
  std::map<ResidencyLocation, std::int64_t> last_peaks_;
  std::vector<std::string> step_transitions_;
  std::vector<TransitionSpan> step_spans_;
  std::size_t fired_seen_ = 0;
  std::size_t current_step_ = 0;
  bool setup_done_ = false;
};

}  // namespace

ScenarioResult replay(const Scenario& scenario, const ReplayOptions& options) {
  return Replayer(scenario, options).run();
}

}  // namespace fhelium::harness