// End-to-end bookkeeping on the default TorchRuntime at pageable host: values
// of one 4 KiB int64 tensor, sources whose load() clones a 4 KiB template.
// Each benchmark reports items_per_second for one operation (residency-gate
// turns that into ns per operation and compares it with the absolute targets
// in bench/thresholds.json). BM_TorchSourceLoad and BM_TorchTensorRelease
// measure what the manager calls, so overhead above them is visible.
//
// Ensure, drop and execute_actions are judged by how much they cost above
// what they call (a source load, a tensor release), and the 64 MiB ensure by
// its ratio to the raw clone: by the difference from the baseline benchmark,
// and again by a *Paired twin that times its baseline in the same
// iterations, on the same heap, in alternating order, and reports counters:
// per item `load_ns` / `release_ns` / `clone_ns`, the operation above it
// (`above_load_ns`, ...), and the ratio of the two (`ratio_to_load`, ...).
// The gate holds both to the same limits. A difference of two benchmarks run
// seconds apart carries whatever the host did in between (page faults alone
// move a load by hundreds of ns here); a paired one does not.
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <benchmark/benchmark.h>

#include <memory>
#include <string>

#include "fhelium/residency.hpp"
#include "torch_workload.hpp"

namespace fhelium::bench {
namespace {

using namespace residency;

using namespace torch_workload;

// An operation and its baseline timed in the same iteration, the operation
// as the benchmark's (manual) time. The order alternates from one iteration
// to the next, so neither always finds the heap and caches the other left.
class Paired {
 public:
  Paired(benchmark::State& state, std::string baseline) : state_(state), baseline_(std::move(baseline)) {}
  ~Paired() {
    using benchmark::Counter;
    state_.counters[baseline_ + "_ns"] = Counter(baseline_ns_, Counter::kAvgIterations);
    state_.counters["above_" + baseline_ + "_ns"] = Counter(operation_ns_ - baseline_ns_, Counter::kAvgIterations);
    if (baseline_ns_ > 0) state_.counters["ratio_to_" + baseline_] = operation_ns_ / baseline_ns_;
    state_.SetItemsProcessed(state_.iterations());
  }

  template <class Operation, class Baseline>
  void run(Operation&& operation, Baseline&& baseline) {
    double operation_ns = 0, baseline_ns = 0;
    if (operation_first_) {
      operation_ns = elapsed_ns(operation);
      baseline_ns = elapsed_ns(baseline);
    } else {
      baseline_ns = elapsed_ns(baseline);
      operation_ns = elapsed_ns(operation);
    }
    operation_first_ = !operation_first_;
    state_.SetIterationTime(operation_ns * 1e-9);
    operation_ns_ += operation_ns;
    baseline_ns_ += baseline_ns;
  }

 private:
  benchmark::State& state_;
  std::string baseline_;
  bool operation_first_ = true;
  double operation_ns_ = 0, baseline_ns_ = 0;
};

std::vector<ResidencyHandle> adopt_values(ResidencyManager& manager, std::int64_t count) {
  const at::Tensor original = template_tensor();
  std::vector<ResidencyHandle> handles;
  handles.reserve(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) handles.push_back(manager.adopt(tensor_value(original.clone())));
  return handles;
}

// The loads of a batch are kept, as ensure keeps them, and released with the
// timer paused: the baseline neither pays for releases nor reuses one
// allocation over and over, which an ensure never does.
void BM_TorchSourceLoad(benchmark::State& state) {
  auto source = clone_source(template_tensor());
  std::vector<ResidentValue> loaded;
  loaded.reserve(static_cast<std::size_t>(batch));
  while (state.KeepRunningBatch(batch)) {
    for (std::int64_t i = 0; i < batch; ++i) loaded.push_back(source->load());
    state.PauseTiming();
    loaded.clear();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TorchSourceLoad);

void BM_TorchTensorRelease(benchmark::State& state) {
  const at::Tensor original = template_tensor();
  std::vector<ResidentValue> values;
  while (state.KeepRunningBatch(batch)) {
    state.PauseTiming();
    values.clear();
    for (std::int64_t i = 0; i < batch; ++i) values.push_back(tensor_value(original.clone()));
    state.ResumeTiming();
    for (auto& value : values) ResidentValue released = std::move(value);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TorchTensorRelease);

void BM_TorchAdopt(benchmark::State& state) {
  const at::Tensor original = template_tensor();
  std::unique_ptr<ResidencyManager> manager;
  std::vector<ResidentValue> values;
  while (state.KeepRunningBatch(batch)) {
    state.PauseTiming();
    manager = fresh_manager();
    values.clear();
    for (std::int64_t i = 0; i < batch; ++i) values.push_back(tensor_value(original.clone()));
    state.ResumeTiming();
    for (auto& value : values) benchmark::DoNotOptimize(manager->adopt(std::move(value), PAGEABLE_HOST));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TorchAdopt);

// register_source, then ensure each, then drop each: one phase timed per benchmark.
enum class Phase { register_source, ensure, drop };

void source_phase(benchmark::State& state, Phase timed) {
  const ResidencyValueSpec spec = source_spec();
  const auto source = clone_source(template_tensor());
  std::unique_ptr<ResidencyManager> manager;
  std::vector<ResidencyHandle> handles;
  while (state.KeepRunningBatch(batch)) {
    state.PauseTiming();
    manager = fresh_manager();
    handles.clear();
    if (timed == Phase::register_source) state.ResumeTiming();
    for (std::int64_t i = 0; i < batch; ++i) handles.push_back(manager->register_source(spec, source, PAGEABLE_HOST));
    if (timed == Phase::register_source) state.PauseTiming();
    if (timed == Phase::ensure) state.ResumeTiming();
    for (const auto& handle : handles) benchmark::DoNotOptimize(manager->ensure(handle, PAGEABLE_HOST));
    if (timed == Phase::ensure) state.PauseTiming();
    if (timed == Phase::drop) state.ResumeTiming();
    for (const auto& handle : handles) benchmark::DoNotOptimize(manager->drop(handle, PAGEABLE_HOST));
    if (timed != Phase::drop) state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations());
}
void BM_TorchRegisterSource(benchmark::State& state) { source_phase(state, Phase::register_source); }
BENCHMARK(BM_TorchRegisterSource);
void BM_TorchEnsureFromSource(benchmark::State& state) { source_phase(state, Phase::ensure); }
BENCHMARK(BM_TorchEnsureFromSource);
void BM_TorchDrop(benchmark::State& state) { source_phase(state, Phase::drop); }
BENCHMARK(BM_TorchDrop);

// The ensure and drop phases again, each paired with its baseline: ensures
// of 1000 registered sources with as many loads of the same source, kept as
// the ensures keep theirs; drops of 1000 ensured values with releasing as
// many bare values made the same way. For drop the two sets are made in
// turn, one value of each, so that neither lies next to the heap's top:
// whichever phase freed the memory there would pay for returning it to the
// system.
void paired_source_phase(benchmark::State& state, Phase timed) {
  const ResidencyValueSpec spec = source_spec();
  const auto source = clone_source(template_tensor());
  std::vector<ResidencyHandle> handles;
  std::vector<ResidentValue> baseline_values;
  baseline_values.reserve(static_cast<std::size_t>(batch));
  Paired paired(state, timed == Phase::ensure ? "load" : "release");
  while (state.KeepRunningBatch(batch)) {
    auto manager = fresh_manager();
    handles.clear();
    for (std::int64_t i = 0; i < batch; ++i) {
      handles.push_back(manager->register_source(spec, source, PAGEABLE_HOST));
      if (timed == Phase::drop) {
        manager->ensure(handles.back(), PAGEABLE_HOST);
        baseline_values.push_back(source->load());
      }
    }
    if (timed == Phase::ensure) {
      paired.run(
          [&] {
            for (const auto& handle : handles) benchmark::DoNotOptimize(manager->ensure(handle, PAGEABLE_HOST));
          },
          [&] {
            for (std::int64_t i = 0; i < batch; ++i) baseline_values.push_back(source->load());
          });
    } else {
      paired.run(
          [&] {
            for (const auto& handle : handles) benchmark::DoNotOptimize(manager->drop(handle, PAGEABLE_HOST));
          },
          [&] {
            for (auto& value : baseline_values) ResidentValue released = std::move(value);
          });
    }
    baseline_values.clear();
  }
}
void BM_TorchEnsureFromSourcePaired(benchmark::State& state) { paired_source_phase(state, Phase::ensure); }
BENCHMARK(BM_TorchEnsureFromSourcePaired)->UseManualTime();
void BM_TorchDropPaired(benchmark::State& state) { paired_source_phase(state, Phase::drop); }
BENCHMARK(BM_TorchDropPaired)->UseManualTime();

void BM_TorchAcquireRelease(benchmark::State& state) {
  auto manager = fresh_manager();
  const std::vector<ResidencyHandle> handles = adopt_values(*manager, 1);
  for (auto _ : state) manager->acquire(handles, PAGEABLE_HOST).release();
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TorchAcquireRelease);

void BM_TorchSnapshot(benchmark::State& state) {
  auto manager = fresh_manager();
  adopt_values(*manager, state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(manager->snapshot());
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.SetComplexityN(state.range(0));
}
BENCHMARK(BM_TorchSnapshot)->Arg(100)->Arg(1000)->Arg(10000)->Arg(100000)->Complexity(benchmark::oN);

void BM_TorchExplain(benchmark::State& state) {
  MixedPlan plan;
  const ResidencyPlan whole{"mixed", plan.actions};
  for (auto _ : state) benchmark::DoNotOptimize(plan.manager->explain(whole));
  state.SetItemsProcessed(state.iterations() * batch);
}
BENCHMARK(BM_TorchExplain);

void BM_TorchExecuteActions(benchmark::State& state) {
  while (state.KeepRunningBatch(batch)) {
    state.PauseTiming();
    auto plan = std::make_unique<MixedPlan>();
    state.ResumeTiming();
    benchmark::DoNotOptimize(plan->manager->execute_actions(plan->actions, "mixed"));
    state.PauseTiming();
    plan.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TorchExecuteActions);

// The plan's 1000 actions paired with the 500 loads its ensures make.
void BM_TorchExecuteActionsPaired(benchmark::State& state) {
  const auto source = clone_source(template_tensor());
  std::vector<ResidentValue> loaded;
  loaded.reserve(static_cast<std::size_t>(batch / 2));
  Paired paired(state, "load");
  while (state.KeepRunningBatch(batch)) {
    MixedPlan plan;
    paired.run([&] { benchmark::DoNotOptimize(plan.manager->execute_actions(plan.actions, "mixed")); },
               [&] {
                 for (std::int64_t i = 0; i < batch / 2; ++i) loaded.push_back(source->load());
               });
    loaded.clear();
  }
}
BENCHMARK(BM_TorchExecuteActionsPaired)->UseManualTime();

// Rounds of ensuring and then dropping the same 1000 source-backed values in
// one long-lived manager, as a program that streams its values through host
// memory does.
struct SourceRounds {
  std::unique_ptr<ResidencyManager> manager;
  std::vector<ResidencyHandle> handles;

  explicit SourceRounds(std::unique_ptr<ResidencyManager> rounds_manager) : manager(std::move(rounds_manager)) {
    const auto source = clone_source(template_tensor());
    for (std::int64_t i = 0; i < batch; ++i) {
      handles.push_back(manager->register_source(source_spec(), source, PAGEABLE_HOST));
    }
  }

  void run() {
    for (const auto& handle : handles) benchmark::DoNotOptimize(manager->ensure(handle, PAGEABLE_HOST));
    for (const auto& handle : handles) benchmark::DoNotOptimize(manager->drop(handle, PAGEABLE_HOST));
  }
};

// The rounds in a manager with the default options, whose trace ring keeps
// every transition, paired with the same rounds in an untraced manager:
// `above_untraced_ns` is what the default trace adds per transition once its
// ring is full and every record overwrites the oldest (the steady state of a
// long-lived manager; the BM_Torch benchmarks above run untraced).
void BM_TorchDefaultTracePaired(benchmark::State& state) {
  SourceRounds traced{std::make_unique<ResidencyManager>()};
  SourceRounds untraced{fresh_manager()};
  // Two transitions a value a round: fill the ring, and then some.
  const std::int64_t ring = ManagerOptions().trace_capacity;
  for (std::int64_t kept = 0; kept <= ring; kept += 2 * batch) traced.run();
  untraced.run();
  if (static_cast<std::int64_t>(traced.manager->trace().size()) != ring || !untraced.manager->trace().empty()) {
    state.SkipWithError("the default manager's trace ring is not full, or the untraced manager keeps a trace");
    return;
  }
  Paired paired(state, "untraced");
  while (state.KeepRunningBatch(2 * batch)) paired.run([&] { traced.run(); }, [&] { untraced.run(); });
}
BENCHMARK(BM_TorchDefaultTracePaired)->UseManualTime();

// A 64 MiB source-backed ensure against the raw clone of the same bytes.
constexpr std::int64_t large_elements = (64 << 20) / 8;

// A manager with one registered 64 MiB source that clones `original`.
struct LargeValue {
  const at::Tensor original = at::arange(large_elements, at::TensorOptions().dtype(at::kLong));
  std::unique_ptr<ResidencyManager> manager = fresh_manager();
  const ResidencyHandle handle =
      manager->register_source(ResidencyValueSpec("Blob", large_elements * 8, large_elements * 8,
                                                  ReplicaMode::replicable, Recoverability::reconstructible),
                               clone_source(original), PAGEABLE_HOST);

  void ensure_and_drop() {
    manager->ensure(handle, PAGEABLE_HOST);
    manager->drop(handle, PAGEABLE_HOST);
  }
};

void BM_TorchLargeEnsure(benchmark::State& state) {
  LargeValue large;
  for (auto _ : state) large.ensure_and_drop();
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * large_elements * 8);
}
BENCHMARK(BM_TorchLargeEnsure)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_TorchLargeClone(benchmark::State& state) {
  const at::Tensor original = at::arange(large_elements, at::TensorOptions().dtype(at::kLong));
  for (auto _ : state) benchmark::DoNotOptimize(original.clone());
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * large_elements * 8);
}
BENCHMARK(BM_TorchLargeClone)->UseRealTime()->Unit(benchmark::kMillisecond);

// The 64 MiB ensure and drop paired with the raw clone and release of the
// same bytes: `ratio_to_clone` is the ensure's time over the clone's. At
// 30 ms an operation a run holds only a few of each, and the system's
// page-fault work on fresh mappings moves either by tens of percent from one
// to the next; paired, both see the same.
void BM_TorchLargeEnsurePaired(benchmark::State& state) {
  LargeValue large;
  {
    Paired paired(state, "clone");
    for (auto _ : state) {
      paired.run([&] { large.ensure_and_drop(); }, [&] { benchmark::DoNotOptimize(large.original.clone()); });
    }
  }
  state.SetBytesProcessed(state.iterations() * large_elements * 8);
}
BENCHMARK(BM_TorchLargeEnsurePaired)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace fhelium::bench
