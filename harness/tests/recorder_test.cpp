// Recording a live program: a program run against the real TorchRuntime (and
// one with CUDA streams on the simulated runtime) is recorded, and the
// recording replays on the simulated runtime with the same outcomes, step
// for step, and with the same accounting at the end; loosened, it replays
// under faults with every invariant held. A live run that behaved
// differently from the simulated device is caught by the replay.
#include <gtest/gtest.h>

#include <ATen/ops/arange.h>

#include <iostream>

#include "fhelium/harness/forwarding_runtime.hpp"
#include "fhelium/harness/recorder.hpp"
#include "fhelium/harness/replay.hpp"
#include "fhelium/harness/scenario_loader.hpp"
#include "fhelium/harness/simulated_runtime.hpp"
#include "fhelium/residency.hpp"

namespace fhelium::harness {
namespace {

using namespace residency;

ResidentValue tensor_value(std::int64_t elements, std::int64_t start = 0) {
  return ResidentValue("Tensor", {{"data", at::arange(start, start + elements, at::TensorOptions().dtype(at::kLong))}});
}

void expect_same_accounting(const ResidencySnapshot& live, const ResidencySnapshot& replayed) {
  EXPECT_EQ(live.state_version, replayed.state_version);
  ASSERT_EQ(live.locations.size(), replayed.locations.size());
  for (std::size_t i = 0; i < live.locations.size(); ++i) {
    const auto& a = live.locations[i];
    const auto& b = replayed.locations[i];
    EXPECT_EQ(a.location, b.location);
    EXPECT_EQ(a.used_bytes, b.used_bytes) << a.location.name();
    EXPECT_EQ(a.reserved_bytes, b.reserved_bytes) << a.location.name();
    EXPECT_EQ(a.peak_charged_bytes, b.peak_charged_bytes) << a.location.name();
    EXPECT_EQ(a.value_count, b.value_count) << a.location.name();
    EXPECT_EQ(a.hold_count, b.hold_count) << a.location.name();
  }
  ASSERT_EQ(live.values.size(), replayed.values.size());
  for (std::size_t i = 0; i < live.values.size(); ++i) {
    EXPECT_EQ(live.values[i].discarded, replayed.values[i].discarded);
    EXPECT_EQ(live.values[i].materializations.size(), replayed.values[i].materializations.size());
  }
}

RecorderOptions named(const std::string& name, bool exact_outcomes = true) {
  RecorderOptions options;
  options.name = name;
  options.exact_outcomes = exact_outcomes;
  return options;
}

ScenarioResult replay_text(const std::string& yaml, ReplayOptions options = {}) {
  return replay(parse_scenario(yaml, "recorded.yaml"), options);
}

// A program on the default TorchRuntime (pageable host here): values,
// sources, refusals, lifetimes, plans and scopes.
ResidencySnapshot torch_program(ScenarioRecorder& recorder) {
  ManagerOptions options;
  options.budgets = {{PAGEABLE_HOST, 64 * 1024}};
  recorder.attach(options);
  ResidencyManager manager(std::move(options));
  ResidencyManager other;
  const ResidencyHandle foreign = other.adopt(tensor_value(8));

  const ResidencyHandle w = manager.adopt(tensor_value(512));  // 4 KiB
  recorder.name_value(w, "weights");
  const ResidencyHandle b = manager.adopt(tensor_value(128, 7), std::nullopt, ReplicaMode::replicable);
  const at::Tensor kv_template = at::arange(512, at::TensorOptions().dtype(at::kLong));
  const ResidencyHandle kv = manager.register_source(
      ResidencyValueSpec("Tensor", 4096, 4096, ReplicaMode::exclusive, Recoverability::reconstructible),
      [&] { return ResidentValue("Tensor", {{"data", kv_template.clone()}}); });
  manager.ensure(kv, PAGEABLE_HOST);
  manager.ensure(kv, PAGEABLE_HOST);  // no-op
  {
    ResidencyHold hold = manager.hold({w}, PAGEABLE_HOST);
    EXPECT_THROW(manager.drop(w, PAGEABLE_HOST), ResidencyError);
    hold.release();
  }
  ResidencyReservation scratch = manager.reserve(PAGEABLE_HOST, 8192, "scratch");
  EXPECT_THROW(manager.adopt(tensor_value(8000)), ResidencyBudgetError);  // 64000 bytes do not fit
  scratch.release();
  {
    ResidencyLease lease = manager.acquire({w, kv}, PAGEABLE_HOST);
    EXPECT_EQ(lease.value(w).fields().front().second.numel(), 512);
    lease.release(true);
  }
  manager.execute_actions({DropResident{kv, PAGEABLE_HOST}, EnsureResident{kv, PAGEABLE_HOST}}, "refresh");
  const ResidencyPlan plan{"step", {EnsureResident{kv, PAGEABLE_HOST}}, {DropResident{kv, PAGEABLE_HOST}},
                           {MemoryReservation(PAGEABLE_HOST, 1024, "activations")}};
  EXPECT_TRUE(manager.explain(plan, manager.state_version()).feasible);
  {
    ResidencyScope scope = manager.scope(plan);
    scope.enter();
    scope.close();
  }
  EXPECT_THROW(manager.ensure(foreign, PAGEABLE_HOST), ResidencyHandleError);
  manager.discard(b);
  EXPECT_THROW(manager.ensure(b, PAGEABLE_HOST), ResidencyHandleError);
  if (!manager.runtime()->can_pin()) {  // a CPU-only libtorch: the refusal is recorded, and replayed
    EXPECT_THROW(manager.move(w, PINNED_HOST), ResidencyError);
  }
  { ResidencyHold forgotten = manager.hold({w}, PAGEABLE_HOST); }  // abandoned
  return manager.snapshot();
}

TEST(Recorder, ATorchProgramReplaysOnTheSimulatedRuntimeWithTheSameOutcomes) {
  ScenarioRecorder recorder(named("torch-program"));
  const ResidencySnapshot live = torch_program(recorder);
  const std::string yaml = recorder.yaml();
  std::cout << yaml;
  const std::size_t calls = recorder.calls();
  EXPECT_EQ(calls, default_runtime()->can_pin() ? 22u : 23u);
  EXPECT_TRUE(recorder.notes().empty()) << recorder.notes().front();
  EXPECT_NE(yaml.find("adopt: {value: weights}"), std::string::npos);
  EXPECT_NE(yaml.find("expect: {error: budget}"), std::string::npos);
  EXPECT_NE(yaml.find("manager: foreign"), std::string::npos);
  const ScenarioResult result = replay_text(yaml);
  ASSERT_EQ(result.verdict, "passed") << result.failure;
  EXPECT_EQ(result.steps_run, calls);
  ASSERT_TRUE(result.final_snapshot);
  expect_same_accounting(live, *result.final_snapshot);
  EXPECT_GT(result.content_checks, 0);

  // Loosened, with the source failing its loads now and then: every
  // invariant and content check holds through the failures.
  ScenarioRecorder loose(named("torch-program-faulted", false));
  torch_program(loose);
  Scenario scenario = parse_scenario(loose.yaml(), "loose.yaml");
  for (auto& value : scenario.values) {
    if (value.source) value.fail_on_load = 2;
  }
  const ScenarioResult faulted = replay(scenario);
  EXPECT_EQ(faulted.verdict, "passed") << faulted.failure;
  EXPECT_EQ(faulted.faults.size(), 1u);
  EXPECT_GT(faulted.error_paths.size(), result.error_paths.size());
}

// A program with CUDA locations and streams, on the simulated runtime.
ResidencySnapshot streaming_program(ScenarioRecorder& recorder) {
  ManagerOptions options;
  options.runtime = std::make_shared<SimulatedRuntime>();
  options.budgets = {{cuda_location(0), 10240}};
  recorder.attach(options);
  ResidencyManager manager(std::move(options));
  const c10::Stream copy_stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::CUDA, 0), 2);
  const c10::Stream compute(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::CUDA, 0), 1);
  std::vector<ResidencyHandle> layers;
  for (int i = 0; i < 4; ++i) layers.push_back(manager.adopt(tensor_value(512, i * 1000)));
  for (int i = 0; i < 4; ++i) {
    if (i >= 2) manager.move(layers[static_cast<std::size_t>(i - 2)], PINNED_HOST);
    manager.move(layers[static_cast<std::size_t>(i)], cuda_location(0), std::nullopt, copy_stream);
    ResidencyLease lease = manager.acquire({layers[static_cast<std::size_t>(i)]}, cuda_location(0), compute);
    lease.add_consumer_stream(copy_stream);
    lease.release(false);
  }
  // Over budget: refused, state unchanged.
  EXPECT_THROW(manager.move(layers[0], cuda_location(0)), ResidencyBudgetError);
  manager.execute_actions({MoveResident{layers[2], PINNED_HOST, std::nullopt}, MoveResident{layers[0], cuda_location(0), PINNED_HOST}},
                          "swap", {{cuda_location(0), copy_stream}});
  ResidencyScope scope = manager.scope(ResidencyPlan{"tail", {MoveResident{layers[1], cuda_location(1), std::nullopt}},
                                                     {MoveResident{layers[1], PAGEABLE_HOST, std::nullopt}}});
  scope.enter();
  scope.close();
  return manager.snapshot();
}

TEST(Recorder, StreamsLeasesAndPlansReplayExactlyAndUnderFaults) {
  ScenarioRecorder recorder(named("streaming"));
  const ResidencySnapshot live = streaming_program(recorder);
  const std::string yaml = recorder.yaml();
  EXPECT_NE(yaml.find("stream: {device: 0, id: 2}"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("add_consumer_stream"), std::string::npos);
  EXPECT_NE(yaml.find("streams: {cuda:0: {device: 0, id: 2}}"), std::string::npos);
  const ScenarioResult result = replay_text(yaml);
  ASSERT_EQ(result.verdict, "passed") << result.failure << "\n" << yaml;
  ASSERT_TRUE(result.final_snapshot);
  expect_same_accounting(live, *result.final_snapshot);

  // The same program recorded loosely replays under faults: outcomes free,
  // every invariant and content check still applies.
  ScenarioRecorder loose(named("streaming-under-faults", false));
  streaming_program(loose);
  Scenario scenario = parse_scenario(loose.yaml(), "loose.yaml");
  FaultRule coin;
  coin.name = "coin";
  coin.operation = FaultOperation::copy;
  coin.probability = 0.4;
  scenario.faults.push_back(coin);
  FaultRule late;
  late.name = "late";
  late.operation = FaultOperation::record_event;
  late.effect = FaultEffect::delay;
  late.delay_ns = 5000;
  scenario.faults.push_back(late);
  const ScenarioResult faulted = replay(scenario);
  EXPECT_EQ(faulted.verdict, "passed") << faulted.failure;
  EXPECT_GT(faulted.faults.size(), 2u);
  EXPECT_GT(faulted.invariant_checks, result.invariant_checks / 2);
}

// A device that fails every copy to cuda:1 (a broken GPU): the live program
// sees refusals the simulated device would not give.
class BrokenSecondGpu final : public ForwardingRuntime {
 public:
  using ForwardingRuntime::ForwardingRuntime;

 private:
  ResidentValue do_copy_to(const ResidentValue& value, const ResidencyLocation& destination,
                           const std::optional<c10::Stream>& stream) override {
    if (destination == cuda_location(1)) throw ResidencyUnavailableError("cuda:1 is not responding");
    return ForwardingRuntime::do_copy_to(value, destination, stream);
  }
};

TEST(Recorder, AReplayFailsWhereTheLiveRunBehavedDifferently) {
  ScenarioRecorder recorder(named("broken-gpu"));
  ManagerOptions options;
  options.runtime = std::make_shared<BrokenSecondGpu>(std::make_shared<SimulatedRuntime>());
  recorder.attach(options);
  ResidencyManager manager(std::move(options));
  const ResidencyHandle w = manager.adopt(tensor_value(64));
  manager.move(w, cuda_location(0));
  EXPECT_THROW(manager.move(w, cuda_location(1)), ResidencyUnavailableError);
  const std::string yaml = recorder.yaml();
  EXPECT_NE(yaml.find("expect: {error: unavailable}"), std::string::npos) << yaml;
  const ScenarioResult result = replay_text(yaml);
  EXPECT_EQ(result.verdict, "failed");
  EXPECT_EQ(result.failed_step, std::optional<std::size_t>(2));
  EXPECT_NE(result.failure.find("unavailable"), std::string::npos) << result.failure;
  // With the same broken device under the replay, it passes.
  ReplayOptions same_device;
  same_device.wrap_runtime = [](std::shared_ptr<DeviceRuntime> base) {
    return std::make_shared<BrokenSecondGpu>(std::move(base));
  };
  EXPECT_EQ(replay_text(yaml, same_device).verdict, "passed");
}

TEST(Recorder, NamesNotesAndMisuse) {
  ScenarioRecorder recorder;
  ManagerOptions options;
  options.runtime = std::make_shared<SimulatedRuntime>();
  recorder.attach(options);
  EXPECT_THROW(recorder.attach(options), std::logic_error);
  ResidencyManager manager(std::move(options));
  const ResidencyHandle a = manager.adopt(tensor_value(8));
  const ResidencyHandle b = manager.adopt(tensor_value(8));
  EXPECT_THROW(recorder.name_value(a, ""), std::invalid_argument);
  EXPECT_THROW(recorder.name_value(a, "two words"), std::invalid_argument);
  recorder.name_value(a, "first");
  EXPECT_THROW(recorder.name_value(b, "first"), std::invalid_argument);
  recorder.name_value(b, "v1");  // a default-looking name: defaults skip it
  const ResidencyHandle c = manager.adopt(tensor_value(8));
  // A CPU stream cannot be written: left out, and noted; the refusal it
  // caused is not expected of the replay.
  EXPECT_THROW(manager.ensure(c, PAGEABLE_HOST, c10::Stream(c10::Stream::DEFAULT, c10::Device(c10::DeviceType::CPU))),
               std::invalid_argument);
  const std::string yaml = recorder.yaml();
  EXPECT_NE(yaml.find("first: {bytes: 64"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("v1: {bytes: 64"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("v2: {bytes: 64"), std::string::npos) << yaml;
  ASSERT_EQ(recorder.notes().size(), 1u);
  EXPECT_NE(recorder.notes().front().find("stream of cpu"), std::string::npos) << recorder.notes().front();
  EXPECT_NE(yaml.find("# note: a stream of cpu"), std::string::npos);
  EXPECT_NE(yaml.find("expect: {error: maybe}  # a stream"), std::string::npos) << yaml;
  EXPECT_EQ(replay_text(yaml).verdict, "passed") << replay_text(yaml).failure;
}

}  // namespace
}  // namespace fhelium::harness
