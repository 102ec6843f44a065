// Model-based properties: random command sequences run against the manager
// and the reference model side by side. After every command the outcome
// (success, no-op or error kind) must match the model's prediction, the
// snapshot must equal the model, and every invariant must hold. Commands
// cover every public operation, lifetimes, virtual time, and armed faults.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>
#include <rapidcheck/state.h>

#include <iostream>
#include <map>

#include "fhelium/harness/contents.hpp"
#include "system.hpp"

namespace fhelium::property {
namespace {

using namespace residency;
using Command = rc::state::Command<Model, System>;

constexpr std::int64_t KiB = 1024;

rc::Gen<ResidencyLocation> location_gen() { return rc::gen::elementOf(all_locations()); }
rc::Gen<std::int64_t> charge_gen() { return rc::gen::element<std::int64_t>(1 * KiB, 2 * KiB, 4 * KiB); }

std::optional<c10::Stream> consumer_stream(const ResidencyLocation& location) {
  if (!location.is_cuda()) return std::nullopt;
  return c10::Stream(c10::Stream::UNSAFE, location.device(), 1);
}

std::string stream_yaml(const ResidencyLocation& location) {
  return location.is_cuda() ? ", stream: {device: " + std::to_string(location.cuda_index()) + ", id: 1}" : "";
}

// Runs `perform` on the system, compares its outcome with `predicted`, logs the
// step for the reproducer, then checks the snapshot against `after`.
template <class F>
void verify(System& system, const std::string& step, const std::string& predicted, const Model& after, F&& perform,
            bool version_must_hold = false) {
  const std::uint64_t version = system.last_version;
  const std::string actual = outcome_of(std::forward<F>(perform));
  system.log(step, predicted);
  const std::string normalized = actual == "ok" && predicted == "no-op" ? "no-op" : actual;
  if (normalized != predicted) system.fail(step + ": manager said " + actual + ", model predicted " + predicted);
  system.check_against(after);
  if (version_must_hold && system.last_version != version) {
    system.fail(step + ": a failed or no-op call changed state_version from " + std::to_string(version) + " to " +
                std::to_string(system.last_version));
  }
}

struct Adopt : Command {
  std::int64_t charge = *charge_gen();
  ResidencyLocation at = *rc::gen::element(PAGEABLE_HOST, PINNED_HOST, cuda_location(0), cuda_location(1));
  bool exclusive = *rc::gen::arbitrary<bool>();

  std::string predict(Model& model) const { return model.adopt(charge, at, exclusive); }
  void apply(Model& model) const override {
    predict(model);
    model.reap();
  }
  void run(const Model& before, System& system) const override {
    Model after = before;
    const std::string predicted = predict(after);
    after.reap();
    const std::size_t index = before.values.size();
    system.values_yaml.push_back("  v" + std::to_string(index) + ": {bytes: " + std::to_string(charge) +
                                 ", adopt_at: " + at.name() + ", mode: " + (exclusive ? "exclusive" : "replicable") +
                                 ", deferred: true}");
    const std::string step = "adopt: {value: v" + std::to_string(index) + "}";
    verify(system, step, predicted, after, [&] {
      system.handles.push_back(system.manager->adopt(system.placed(System::contents(index, charge), at), at,
                                                     exclusive ? ReplicaMode::exclusive : ReplicaMode::replicable));
    });
  }
  void show(std::ostream& os) const override { os << "adopt " << charge << " at " << at.name(); }
};

struct RegisterSource : Command {
  std::int64_t charge = *charge_gen();
  ResidencyLocation at = *rc::gen::element(PAGEABLE_HOST, PINNED_HOST);
  bool exclusive = *rc::gen::arbitrary<bool>();
  // Its first load: succeeds, throws, or calls the manager back (refused).
  int first_load = *rc::gen::weightedElement<int>({{6, 0}, {2, 1}, {1, 2}});
  bool flaky = first_load == 1;
  bool reenters = first_load == 2;

  void apply(Model& model) const override { model.register_source(charge, at, exclusive, flaky, reenters); }
  void run(const Model& before, System& system) const override {
    Model after = before;
    after.register_source(charge, at, exclusive, flaky, reenters);
    after.reap();
    const std::size_t index = before.values.size();
    system.values_yaml.push_back("  v" + std::to_string(index) + ": {bytes: " + std::to_string(charge) +
                                 ", source_at: " + at.name() + ", mode: " + (exclusive ? "exclusive" : "replicable") +
                                 (flaky ? ", fail_on_load: 1" : "") + (reenters ? ", reenter_on_load: 1" : "") +
                                 ", deferred: true}");
    const std::string step = "register_source: {value: v" + std::to_string(index) + "}";
    verify(system, step, "ok", after, [&] {
      auto loads = std::make_shared<int>(0);
      System* owner = &system;
      const ResidencyValueSpec spec("Tensor", charge, charge,
                                    exclusive ? ReplicaMode::exclusive : ReplicaMode::replicable,
                                    Recoverability::reconstructible);
      system.handles.push_back(system.manager->register_source(
          spec,
          [owner, loads, index, bytes = charge, where = at, fails = flaky, calls_back = reenters]() -> ResidentValue {
            if (++*loads == 1 && fails) throw std::runtime_error("source load fails");
            if (*loads == 1 && calls_back) owner->manager->snapshot();  // refused: ResidencyReentrancyError
            return owner->placed(System::contents(index, bytes), where);
          },
          at));
    });
  }
  void show(std::ostream& os) const override { os << "register_source " << charge << " at " << at.name(); }
};

// Mostly a location where `value` is resident, so that protections, sources and
// replicas interact; otherwise any location.
ResidencyLocation location_for(const Model& model, std::size_t value) {
  if (value < model.values.size() && !model.values[value].at.empty() &&
      *rc::gen::weightedElement<bool>({{2, true}, {1, false}})) {
    return *rc::gen::elementOf(model.values[value].at);
  }
  return *location_gen();
}

Primitive primitive_gen(const Model& model) {
  Primitive primitive;
  primitive.kind = *rc::gen::element(PrimitiveKind::ensure, PrimitiveKind::move, PrimitiveKind::move,
                                     PrimitiveKind::drop, PrimitiveKind::drop, PrimitiveKind::discard);
  // Mostly existing values; sometimes one the manager never issued.
  primitive.value = *rc::gen::weightedElement<bool>({{12, true}, {1, false}}) && !model.values.empty()
                        ? *rc::gen::inRange<std::size_t>(0, model.values.size())
                        : model.values.size();
  const bool removal = primitive.kind == PrimitiveKind::drop;
  primitive.location = removal ? location_for(model, primitive.value) : *location_gen();
  if (primitive.kind == PrimitiveKind::move && *rc::gen::weightedElement<bool>({{2, false}, {1, true}})) {
    primitive.from = location_for(model, primitive.value);
  }
  return primitive;
}

// Every field of the transition report, exactly as the model predicts.
void check_report(System& system, const std::string& step, const ResidencyTransitionReport& report,
                         const PredictedReport& predicted, std::int64_t called_at) {
  const auto name = [](const std::optional<ResidencyLocation>& location) {
    return location ? location->name() : std::string("none");
  };
  const auto differ = [&](const char* field, const std::string& actual, const std::string& expected) {
    system.fail(step + ": report " + field + " is " + actual + ", model predicts " + expected);
  };
  if (report.no_op != predicted.no_op) differ("no_op", report.no_op ? "true" : "false", predicted.no_op ? "true" : "false");
  if (report.source != predicted.source) differ("source", name(report.source), name(predicted.source));
  if (report.destination != predicted.destination) {
    differ("destination", name(report.destination), name(predicted.destination));
  }
  if (report.logical_nbytes != predicted.logical_nbytes || report.storage_nbytes != predicted.storage_nbytes) {
    differ("bytes", std::to_string(report.logical_nbytes) + "/" + std::to_string(report.storage_nbytes),
           std::to_string(predicted.logical_nbytes) + "/" + std::to_string(predicted.storage_nbytes));
  }
  const std::optional<int> sampled =
      report.allocator_device ? std::optional<int>(report.allocator_device->index()) : std::nullopt;
  if (sampled != predicted.allocator_device) {
    differ("allocator_device", sampled ? "cuda:" + std::to_string(*sampled) : "none",
           predicted.allocator_device ? "cuda:" + std::to_string(*predicted.allocator_device) : "none");
  }
  // The simulated allocator is instrumented: samples exist exactly when a device was sampled.
  if (report.allocator_allocated_bytes_before.has_value() != sampled.has_value()) {
    differ("allocator samples", report.allocator_allocated_bytes_before ? "present" : "absent",
           sampled ? "present" : "absent");
  }
  if (report.started_at_ns < called_at || report.completed_at_ns < report.started_at_ns) {
    differ("timestamps", std::to_string(report.started_at_ns) + ".." + std::to_string(report.completed_at_ns),
           "no earlier than the call (" + std::to_string(called_at) + ")");
  }
}

struct RunPrimitive : Command {
  Primitive primitive;
  explicit RunPrimitive(const Model& model) : primitive(primitive_gen(model)) {}

  void apply(Model& model) const override {
    model.apply(primitive);
    model.reap();
  }
  void run(const Model& before, System& system) const override {
    Model after = before;
    const std::string predicted = after.apply(primitive);
    after.reap();
    std::string step = yaml_primitive(primitive);
    step = step.substr(1, step.size() - 2);  // a step, not an action list entry
    const ResidencyHandle handle = system.handle(primitive.value);
    std::optional<ResidencyTransitionReport> report;
    const std::int64_t called_at = system.simulated->now_ns();
    verify(system, step, predicted, after, [&] {
      switch (primitive.kind) {
        case PrimitiveKind::ensure: report = system.manager->ensure(handle, primitive.location); break;
        case PrimitiveKind::move: report = system.manager->move(handle, primitive.location, primitive.from); break;
        case PrimitiveKind::drop: report = system.manager->drop(handle, primitive.location); break;
        case PrimitiveKind::discard: report = system.manager->discard(handle); break;
      }
    }, predicted != "ok");
    if (report) check_report(system, step, *report, after.report, called_at);
  }

  void show(std::ostream& os) const override { os << yaml_primitive(primitive); }
};

std::vector<std::size_t> some_values(const Model& model) {
  RC_PRE(!model.values.empty());
  const auto first = *rc::gen::inRange<std::size_t>(0, model.values.size());
  if (model.values.size() == 1 || *rc::gen::arbitrary<bool>()) return {first};
  auto second = *rc::gen::inRange<std::size_t>(0, model.values.size());
  if (second == first) second = (first + 1) % model.values.size();
  return {first, second};
}

std::string values_yaml(const std::vector<std::size_t>& values) {
  std::string out = "[";
  for (const auto value : values) out += (out.size() > 1 ? ", v" : "v") + std::to_string(value);
  return out + "]";
}

struct Acquire : Command {
  std::vector<std::size_t> values;
  ResidencyLocation at;
  // A CUDA lease may add a second consumer stream; it then stays protective
  // until the work on both streams is done, whichever finishes first.
  bool second_stream;
  explicit Acquire(const Model& model)
      : values(some_values(model)),
        at(location_for(model, values.front())),
        second_stream(at.is_cuda() && *rc::gen::arbitrary<bool>()) {}

  std::vector<int> streams() const { return second_stream ? std::vector<int>{1, 2} : std::vector<int>{1}; }
  void apply(Model& model) const override {
    std::size_t id = 0;
    model.acquire(values, at, id, streams());
    model.reap();
  }
  void run(const Model& before, System& system) const override {
    Model after = before;
    std::size_t id = 0;
    const std::string predicted = after.acquire(values, at, id, streams());
    after.reap();
    const std::string name = system.name_lifetime("lease");
    std::string step = "acquire: {values: " + values_yaml(values) + ", at: " + at.name() + stream_yaml(at) +
                       ", as: " + name + "}";
    if (second_stream && predicted == "ok") {
      step += "\n  - add_consumer_stream: {lease: " + name + ", stream: {device: " + std::to_string(at.cuda_index()) +
              ", id: 2}}";
    }
    verify(system, step, predicted, after, [&] {
      std::vector<ResidencyHandle> handles;
      for (const auto value : values) handles.push_back(system.handle(value));
      auto lease = system.manager->acquire(handles, at, consumer_stream(at));
      if (second_stream) {
        lease.add_consumer_stream(c10::Stream(c10::Stream::UNSAFE, at.device(), 2));
      }
      for (const auto value : values) {
        if (!harness::same_contents(lease.value(system.handle(value)),
                                    System::contents(value, before.values[value].charge))) {
          system.fail("contents of v" + std::to_string(value) + " changed");
        }
      }
      system.leases.emplace(id, std::move(lease));
      system.lifetime_names[id] = name;
    });
  }
  void show(std::ostream& os) const override { os << "acquire " << values_yaml(values) << " at " << at.name(); }
};

std::size_t pick(const std::vector<std::size_t>& ids) {
  RC_PRE(!ids.empty());
  return *rc::gen::elementOf(ids);
}

// Releasing, or abandoning: destroying the lifetime object without a release,
// which must release it as safely (a lease waits for its consumer streams).
bool abandon_gen() { return *rc::gen::weightedElement<bool>({{4, false}, {1, true}}); }

struct ReleaseLease : Command {
  std::size_t id;
  bool abandon = abandon_gen();
  bool wait = abandon || *rc::gen::arbitrary<bool>();
  explicit ReleaseLease(const Model& model) : id(pick([&] {
    std::vector<std::size_t> active;
    for (const auto& [lease, record] : model.leases) {
      if (!record.pending) active.push_back(lease);
    }
    return active;
  }())) {}

  void checkPreconditions(const Model& model) const override {
    RC_PRE(model.leases.count(id) == 1 && !model.leases.at(id).pending);
  }
  void apply(Model& model) const override {
    model.release_lease(id, wait);
    if (abandon) model.diagnostics += 1;
    model.reap();
  }
  void run(const Model& before, System& system) const override {
    Model after = before;
    apply(after);
    const std::string step = abandon ? "abandon: {lease: " + system.lifetime_names.at(id) + "}"
                                     : "release: {lease: " + system.lifetime_names.at(id) +
                                           (wait ? ", wait: true" : "") + "}";
    verify(system, step, "ok", after, [&] {
      if (abandon) {
        system.leases.erase(id);
      } else {
        system.leases.at(id).release(wait);
      }
    });
  }
  void show(std::ostream& os) const override {
    os << (abandon ? "abandon lease" : "release lease") << id << (wait && !abandon ? " wait" : "");
  }
};

struct Hold : Command {
  std::vector<std::size_t> values;
  ResidencyLocation at;
  explicit Hold(const Model& model) : values(some_values(model)), at(location_for(model, values.front())) {}

  void apply(Model& model) const override {
    std::size_t id = 0;
    model.hold(values, at, id);
    model.reap();
  }
  void run(const Model& before, System& system) const override {
    Model after = before;
    std::size_t id = 0;
    const std::string predicted = after.hold(values, at, id);
    after.reap();
    const std::string name = system.name_lifetime("hold");
    const std::string step = "hold: {values: " + values_yaml(values) + ", at: " + at.name() + ", as: " + name + "}";
    verify(system, step, predicted, after, [&] {
      std::vector<ResidencyHandle> handles;
      for (const auto value : values) handles.push_back(system.handle(value));
      system.holds.emplace(id, system.manager->hold(handles, at));
      system.lifetime_names[id] = name;
    });
  }
  void show(std::ostream& os) const override { os << "hold " << values_yaml(values) << " at " << at.name(); }
};

struct ReleaseHold : Command {
  std::size_t id;
  bool abandon = abandon_gen();
  explicit ReleaseHold(const Model& model) : id(pick([&] {
    std::vector<std::size_t> ids;
    for (const auto& [hold, record] : model.holds) ids.push_back(hold);
    return ids;
  }())) {}
  void checkPreconditions(const Model& model) const override { RC_PRE(model.holds.count(id) == 1); }
  void apply(Model& model) const override {
    model.release_hold(id);
    if (abandon) model.diagnostics += 1;
  }
  void run(const Model& before, System& system) const override {
    Model after = before;
    apply(after);
    after.reap();
    verify(system, std::string(abandon ? "abandon" : "release") + ": {hold: " + system.lifetime_names.at(id) + "}",
           "ok", after, [&] {
             if (abandon) {
               system.holds.erase(id);
             } else {
               system.holds.at(id).release();
             }
           });
  }
  void show(std::ostream& os) const override { os << (abandon ? "abandon hold" : "release hold") << id; }
};

struct Reserve : Command {
  ResidencyLocation at = *location_gen();
  std::int64_t bytes = *rc::gen::element<std::int64_t>(0, 1 * KiB, 4 * KiB, 8 * KiB);

  void apply(Model& model) const override {
    std::size_t id = 0;
    model.reserve(at, bytes, id);
    model.reap();
  }
  void run(const Model& before, System& system) const override {
    Model after = before;
    std::size_t id = 0;
    const std::string predicted = after.reserve(at, bytes, id);
    after.reap();
    const std::string name = system.name_lifetime("reservation");
    const std::string step = "reserve: {at: " + at.name() + ", bytes: " + std::to_string(bytes) +
                             ", label: r, as: " + name + "}";
    verify(system, step, predicted, after, [&] {
      system.reservations.emplace(id, system.manager->reserve(at, bytes, "r"));
      system.lifetime_names[id] = name;
    }, predicted != "ok");
  }
  void show(std::ostream& os) const override { os << "reserve " << bytes << " at " << at.name(); }
};

struct ReleaseReservation : Command {
  std::size_t id;
  bool abandon = abandon_gen();
  explicit ReleaseReservation(const Model& model) : id(pick([&] {
    std::vector<std::size_t> ids;
    for (const auto& [reservation, record] : model.reservations) ids.push_back(reservation);
    return ids;
  }())) {}
  void checkPreconditions(const Model& model) const override { RC_PRE(model.reservations.count(id) == 1); }
  void apply(Model& model) const override {
    model.release_reservation(id);
    if (abandon) model.diagnostics += 1;
  }
  void run(const Model& before, System& system) const override {
    Model after = before;
    apply(after);
    after.reap();
    verify(system,
           std::string(abandon ? "abandon" : "release") + ": {reservation: " + system.lifetime_names.at(id) + "}",
           "ok", after, [&] {
             if (abandon) {
               system.reservations.erase(id);
             } else {
               system.reservations.at(id).release();
             }
           });
  }
  void show(std::ostream& os) const override {
    os << (abandon ? "abandon reservation" : "release reservation") << id;
  }
};

struct Work : Command {
  int device = *rc::gen::inRange(0, 2);
  int stream = *rc::gen::element(1, 2);
  std::int64_t ns = *rc::gen::element<std::int64_t>(10, 100, 1000);
  void apply(Model& model) const override { model.work(device, ns, stream); }
  void run(const Model& before, System& system) const override {
    Model after = before;
    after.work(device, ns, stream);
    after.reap();
    const std::string step = "work: {stream: {device: " + std::to_string(device) + ", id: " +
                             std::to_string(stream) + "}, ns: " + std::to_string(ns) + "}";
    verify(system, step, "ok", after,
           [&] { system.simulated->enqueue(system.simulated->stream(device, stream), ns); });
  }
  void show(std::ostream& os) const override { os << "work " << ns << " on cuda:" << device; }
};

struct Advance : Command {
  std::int64_t ns = *rc::gen::element<std::int64_t>(1, 50, 500, 2000);
  void apply(Model& model) const override {
    model.advance(ns);
    model.reap();
  }
  void run(const Model& before, System& system) const override {
    Model after = before;
    after.advance(ns);
    after.reap();
    verify(system, "advance: {ns: " + std::to_string(ns) + "}", "ok", after, [&] { system.simulated->advance(ns); });
  }
  void show(std::ostream& os) const override { os << "advance " << ns; }
};

struct ArmFault : Command {
  bool copy = *rc::gen::arbitrary<bool>();
  void checkPreconditions(const Model& model) const override {
    RC_PRE(!(copy ? model.copy_fault_armed : model.record_fault_armed));
  }
  void apply(Model& model) const override { (copy ? model.copy_fault_armed : model.record_fault_armed) = true; }
  void run(const Model& before, System& system) const override {
    Model after = before;
    apply(after);
    after.reap();
    harness::FaultRule rule;
    rule.name = (copy ? "copy-" : "record-") + std::to_string(system.fault_rules++);
    rule.operation = copy ? harness::FaultOperation::copy : harness::FaultOperation::record_event;
    rule.max_fires = 1;
    const std::string step = "arm: {name: " + rule.name + ", operation: " + harness::to_string(rule.operation) +
                             ", max_fires: 1}";
    verify(system, step, "ok", after, [&] { system.faults->add_rule(rule); });
  }
  void show(std::ostream& os) const override { os << "arm " << (copy ? "copy" : "record_event") << " fault"; }
};

// Failing event queries: armed, every query fails until disarmed, so no
// pending lease is released by observation (protection stays, explain counts
// it protected) while a release with wait still completes its lease.
struct ToggleQueryFaults : Command {
  // Disarming lets the check's own snapshot release what completed meanwhile.
  void apply(Model& model) const override {
    model.query_faults_armed = !model.query_faults_armed;
    model.reap();
  }
  void run(const Model& before, System& system) const override {
    Model after = before;
    apply(after);
    if (after.query_faults_armed) {
      harness::FaultRule rule;
      rule.name = "failing-queries";
      rule.operation = harness::FaultOperation::query_event;
      rule.every = 1;
      verify(system, "arm: {name: failing-queries, operation: query_event, every: 1}", "ok", after,
             [&] { system.faults->add_rule(rule); });
    } else {
      verify(system, "disarm: {name: failing-queries}", "ok", after,
             [&] { system.faults->remove_rule("failing-queries"); });
    }
  }
  void show(std::ostream& os) const override { os << "toggle failing event queries"; }
};

// The diagnostic sink misbehaves: it throws, or calls the manager back. The
// manager must record every diagnostic anyway, refuse the re-entrant call,
// and leave exactly the state the model predicts (the model ignores the sink).
struct SetSinkMode : Command {
  System::SinkMode mode = *rc::gen::element(System::SinkMode::quiet, System::SinkMode::throws,
                                            System::SinkMode::reenters);
  void apply(Model&) const override {}
  void run(const Model& before, System& system) const override {
    system.sink_mode = mode;
    system.log(std::string("snapshot: {}  # diagnostic sink now ") + System::to_string(mode), "ok");
    system.check_against(before);
  }
  void show(std::ostream& os) const override { os << "diagnostic sink " << System::to_string(mode); }
};

std::vector<Primitive> primitives_gen(const Model& model) {
  const auto count = *rc::gen::inRange(1, 5);
  std::vector<Primitive> result;
  for (int i = 0; i < count; ++i) result.push_back(primitive_gen(model));
  return result;
}

std::vector<ResidencyAction> actions_of(const System& system, const std::vector<Primitive>& primitives) {
  std::vector<ResidencyAction> actions;
  for (const auto& primitive : primitives) {
    const ResidencyHandle handle = system.handle(primitive.value);
    switch (primitive.kind) {
      case PrimitiveKind::ensure: actions.push_back(EnsureResident{handle, primitive.location}); break;
      case PrimitiveKind::move: actions.push_back(MoveResident{handle, primitive.location, primitive.from}); break;
      case PrimitiveKind::drop: actions.push_back(DropResident{handle, primitive.location}); break;
      case PrimitiveKind::discard: actions.push_back(DiscardValue{handle}); break;
    }
  }
  return actions;
}

std::string actions_yaml(const std::vector<Primitive>& primitives) {
  std::string out = "[";
  for (const auto& primitive : primitives) out += (out.size() > 1 ? ", " : "") + yaml_primitive(primitive);
  return out + "]";
}

// Preflight, then sequential execution with faults: the committed prefix stays.
// `reports`, when given, receives the predicted report of each committed action.
std::string execute_in(Model& model, const std::vector<Primitive>& primitives, std::size_t& committed,
                       std::vector<PredictedReport>* reports = nullptr) {
  committed = 0;
  if (!preflight(model, primitives).empty()) return "plan";
  for (const auto& primitive : primitives) {
    const std::string outcome = model.apply(primitive);
    if (outcome != "ok" && outcome != "no-op") return "plan_execution";
    if (reports != nullptr) reports->push_back(model.report);
    ++committed;
  }
  return "ok";
}

struct Execute : Command {
  std::vector<Primitive> primitives;
  explicit Execute(const Model& model) : primitives(primitives_gen(model)) {}

  void apply(Model& model) const override {
    std::size_t committed = 0;
    execute_in(model, primitives, committed);
    model.reap();
  }
  void run(const Model& before, System& system) const override {
    Model after = before;
    std::size_t committed = 0;
    std::vector<PredictedReport> predicted_reports;
    const std::string predicted = execute_in(after, primitives, committed, &predicted_reports);
    after.reap();
    const auto actions = actions_of(system, primitives);
    const std::int64_t called_at = system.simulated->now_ns();
    std::vector<ResidencyTransitionReport> transitions;
    const ResidencyPlanExplanation explanation = system.manager->explain(ResidencyPlan{"plan", actions});
    if (explanation.feasible != (predicted != "plan")) {
      system.log("execute: {actions: " + actions_yaml(primitives) + "}", predicted);
      system.fail("explain said " + std::string(explanation.feasible ? "feasible" : "infeasible: ") +
                  explanation.reason.value_or("") + "; the model's preflight disagrees");
    }
    const auto peaks_before = system.last_peaks;
    std::optional<std::size_t> actual_committed;
    verify(system, "execute: {actions: " + actions_yaml(primitives) + "}", predicted, after, [&] {
      try {
        transitions = system.manager->execute_actions(actions, "plan").transitions;
        actual_committed = transitions.size();
      } catch (const ResidencyPlanExecutionError& error) {
        transitions = error.partial_report().transitions;
        actual_committed = transitions.size();
        throw;
      }
    }, predicted == "plan");
    // Each committed transition's report, field by field.
    for (std::size_t i = 0; i < transitions.size() && i < predicted_reports.size(); ++i) {
      check_report(system, "execute action " + std::to_string(i), transitions[i], predicted_reports[i], called_at);
    }
    if (predicted != "plan" && actual_committed != committed) {
      system.fail("plan committed " + std::to_string(actual_committed.value_or(0)) + " transitions, model " +
                  std::to_string(committed));
    }
    if (predicted == "ok") {
      // Without faults the explained peak is exact: after the run, each
      // location's peak_charged is the larger of its earlier peak and the
      // prediction (not merely at most the prediction).
      for (const auto& [location, peak] : system.last_peaks) {
        const auto previous = peaks_before.find(location);
        const std::int64_t earlier = previous == peaks_before.end() ? 0 : previous->second;
        const std::int64_t expected = std::max(earlier, explanation.predicted_peak(location).value_or(0));
        if (peak != expected) {
          system.fail("observed peak " + std::to_string(peak) + " at " + location.name() + " after a fault-free plan; " +
                      "expected max(earlier " + std::to_string(earlier) + ", predicted " +
                      std::to_string(explanation.predicted_peak(location).value_or(-1)) + ")");
        }
      }
    }
  }
  void show(std::ostream& os) const override { os << "execute " << actions_yaml(primitives); }
};

struct Explain : Command {
  std::vector<Primitive> primitives;
  explicit Explain(const Model& model) : primitives(primitives_gen(model)) {}

  void apply(Model&) const override {}
  void run(const Model& before, System& system) const override {
    const std::string plan = "p" + std::to_string(system.plans_yaml.size());
    system.plans_yaml.push_back("  " + plan + ":\n    enter: " + actions_yaml(primitives));
    const ResidencySnapshot snapshot_before = system.manager->snapshot();
    ResidencyPlanExplanation explanation("unused", {}, {}, {}, true);
    verify(system, "explain: {plan: " + plan + "}", "ok", before, [&] {
      explanation = system.manager->explain(ResidencyPlan{plan, actions_of(system, primitives)});
    });
    ResidencySnapshot snapshot_after = system.manager->snapshot();
    snapshot_after.captured_at_ns = snapshot_before.captured_at_ns;
    if (!(snapshot_after == snapshot_before)) system.fail("explain changed the manager's state");
    const bool feasible = preflight(before, primitives).empty();
    if (explanation.feasible != feasible) {
      system.fail("explain said " + std::string(explanation.feasible ? "feasible" : "infeasible: ") +
                  explanation.reason.value_or("") + "; the model says " + (feasible ? "feasible" : "infeasible"));
    }
    if (!feasible) return;
    // Each action's explanation (executable, no_op, source, destination,
    // bytes) equals what the model's dry run resolves for it.
    Model dry = before;
    for (std::size_t i = 0; i < primitives.size(); ++i) {
      const std::string outcome = dry.apply(primitives[i], false);
      const ResidencyActionExplanation& action = explanation.actions.at(i);
      const PredictedReport& want = dry.report;
      const auto name = [](const std::optional<ResidencyLocation>& l) { return l ? l->name() : std::string("none"); };
      if (!action.executable || action.no_op != (outcome == "no-op") || action.source != want.source ||
          action.destination != want.destination || action.logical_nbytes != want.logical_nbytes ||
          action.storage_nbytes != want.storage_nbytes) {
        system.fail("explanation of action " + std::to_string(i) + " (" + yaml_primitive(primitives[i]) + "): " +
                    (action.no_op ? "no-op" : "change") + " from " + name(action.source) + " to " +
                    name(action.destination) + ", model: " + outcome + " from " + name(want.source) + " to " +
                    name(want.destination));
      }
    }
    // Every predicted peak equals the model's, location by location, and in
    // the manager's registration order first.
    const auto peaks = predicted_peaks(before, primitives);
    for (const auto& [location, peak] : explanation.predicted_peak_bytes) {
      const auto found = peaks.find(location);
      const std::int64_t model_peak = found == peaks.end() ? 0 : found->second;
      if (peak != model_peak) {
        system.fail("explain predicts a peak of " + std::to_string(peak) + " at " + location.name() + ", the model " +
                    std::to_string(model_peak));
      }
    }
    for (const auto& [location, peak] : peaks) {
      if (!explanation.predicted_peak(location)) system.fail("explain predicts no peak at " + location.name());
    }
    for (std::size_t i = 0; i < before.registered.size(); ++i) {
      if (i >= explanation.predicted_peak_bytes.size() ||
          explanation.predicted_peak_bytes[i].first != before.registered[i]) {
        system.fail("explain's predicted peaks do not start with the registered locations in order");
      }
    }
  }
  void show(std::ostream& os) const override { os << "explain " << actions_yaml(primitives); }
};

// reclaim -> reservation -> enter -> exit, entered and closed in one command.
struct Scope : Command {
  std::vector<Primitive> reclaim, enter, exit;
  ResidencyLocation reservation_at;
  std::int64_t reservation_bytes;
  explicit Scope(const Model& model)
      : reclaim(*rc::gen::inRange(0, 2) == 0 ? std::vector<Primitive>{} : std::vector<Primitive>{primitive_gen(model)}),
        enter(primitives_gen(model)),
        exit(*rc::gen::arbitrary<bool>() ? std::vector<Primitive>{} : std::vector<Primitive>{primitive_gen(model)}),
        reservation_at(*location_gen()),
        reservation_bytes(*rc::gen::element<std::int64_t>(0, 2 * KiB, 8 * KiB)) {}

  std::string predict(Model& model) const {
    // Preflight of the whole plan, reservations admitted after reclaim.
    Model dry = model;
    for (const auto& primitive : reclaim) {
      const std::string outcome = dry.apply(primitive, false);
      if (outcome != "ok" && outcome != "no-op") return "plan";
    }
    std::size_t id = 0;
    if (dry.reserve(reservation_at, reservation_bytes, id) != "ok") return "plan";
    for (const auto* list : {&enter, &exit}) {
      for (const auto& primitive : *list) {
        const std::string outcome = dry.apply(primitive, false);
        if (outcome != "ok" && outcome != "no-op") return "plan";
      }
    }
    for (const auto& primitive : reclaim) {
      const std::string outcome = model.apply(primitive);
      if (outcome != "ok" && outcome != "no-op") return "plan_execution";
    }
    model.reserve(reservation_at, reservation_bytes, id);
    std::string result = "ok";
    for (const auto* list : {&enter, &exit}) {
      for (const auto& primitive : *list) {
        const std::string outcome = model.apply(primitive);
        if (outcome != "ok" && outcome != "no-op") {
          result = "plan_execution";
          break;
        }
      }
      if (result != "ok") break;
    }
    model.release_reservation(id);
    model.next_lifetime -= 1;  // scopes hold no lifetime the commands can name
    return result;
  }
  void apply(Model& model) const override {
    predict(model);
    model.reap();
  }
  void run(const Model& before, System& system) const override {
    Model after = before;
    const std::string predicted = predict(after);
    after.reap();
    const std::string plan = "p" + std::to_string(system.plans_yaml.size());
    system.plans_yaml.push_back("  " + plan + ":\n    reclaim: " + actions_yaml(reclaim) +
                                "\n    reservations: [{at: " + reservation_at.name() + ", bytes: " +
                                std::to_string(reservation_bytes) + ", label: ws}]\n    enter: " + actions_yaml(enter) +
                                "\n    exit: " + actions_yaml(exit));
    const std::string name = system.name_lifetime("scope");
    verify(system, "scope_enter: {plan: " + plan + ", as: " + name + "}\n  - scope_close: {scope: " + name + "}",
           predicted, after, [&] {
             ResidencyPlan residency_plan{plan, actions_of(system, enter), actions_of(system, exit),
                                          {MemoryReservation(reservation_at, reservation_bytes, "ws")},
                                          actions_of(system, reclaim)};
             ResidencyScope scope = system.manager->scope(std::move(residency_plan));
             scope.enter();
             scope.close();
           });
  }
  void show(std::ostream& os) const override {
    os << "scope reclaim " << actions_yaml(reclaim) << " reserve " << reservation_bytes << " at "
       << reservation_at.name() << " enter " << actions_yaml(enter) << " exit " << actions_yaml(exit);
  }
};

auto commands() {
  return rc::state::gen::execOneOfWithArgs<Adopt, Adopt, RegisterSource, RunPrimitive, RunPrimitive, RunPrimitive,
                                           Acquire, ReleaseLease, ReleaseLease, Hold, ReleaseHold, Reserve,
                                           ReleaseReservation, Work, Advance, ArmFault, ToggleQueryFaults, SetSinkMode,
                                           Execute, Explain, Scope>();
}

// Totals over every generated case, printed at the end of the run (the soak
// figure): model-checked commands, faults that fired, cases.
struct Tally {
  std::int64_t cases = 0;
  std::int64_t commands = 0;
  std::int64_t faults_fired = 0;
  std::map<std::string, std::int64_t> mix;  // commands by the step they logged
};
Tally& tally() {
  static Tally totals;
  return totals;
}

class TallyReport : public ::testing::Environment {
 public:
  void TearDown() override {
    const Tally& totals = tally();
    std::cout << "model-checked: " << totals.commands << " commands in " << totals.cases << " cases, "
              << totals.faults_fired << " faults fired, "
              << (::testing::UnitTest::GetInstance()->failed_test_count() == 0 ? "0 disagreements"
                                                                                : "a disagreement (see above)")
              << std::endl;
    std::cout << "command mix:";
    for (const auto& [kind, count] : totals.mix) std::cout << " " << kind << " " << count;
    std::cout << std::endl;
  }
};
[[maybe_unused]] ::testing::Environment* const tally_report =
    ::testing::AddGlobalTestEnvironment(new TallyReport);

RC_GTEST_PROP(ManagerModel, MatchesTheReferenceModelUnderFaults, ()) {
  System system;
  system.check_against(Model());
  rc::state::check(Model(), system, commands());
  tally().cases += 1;
  tally().commands += static_cast<std::int64_t>(system.steps_yaml.size());
  tally().faults_fired += static_cast<std::int64_t>(system.faults->fired().size());
  for (const auto& step : system.steps_yaml) {
    const std::size_t start = step.find("- ") + 2;
    tally().mix[step.substr(start, step.find(':', start) - start)] += 1;
  }
}

}  // namespace
}  // namespace fhelium::property
