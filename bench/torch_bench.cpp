// End-to-end bookkeeping on the default TorchRuntime at pageable host: values
// of one 4 KiB int64 tensor, sources whose load() clones a 4 KiB template.
// Each benchmark reports items_per_second for one operation (residency-gate
// turns that into ns per operation and compares it with the absolute targets
// in bench/thresholds.json). BM_TorchSourceLoad and BM_TorchTensorRelease
// measure what the manager calls, so overhead above them is visible.
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <benchmark/benchmark.h>

#include <memory>

#include "fhelium/residency.hpp"
#include "torch_workload.hpp"

namespace fhelium::bench {
namespace {

using namespace residency;

using namespace torch_workload;

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

// A 1000-action plan: 500 EnsureResident of source-backed values (each a
// load) and 500 DropResident of source-backed values already resident.
struct MixedPlan {
  std::unique_ptr<ResidencyManager> manager = fresh_manager();
  std::vector<ResidencyAction> actions;

  MixedPlan() {
    const auto source = clone_source(template_tensor());
    const ResidencyValueSpec spec = source_spec();
    for (std::int64_t i = 0; i < batch / 2; ++i) {
      actions.push_back(EnsureResident{manager->register_source(spec, source, PAGEABLE_HOST), PAGEABLE_HOST});
    }
    for (std::int64_t i = 0; i < batch / 2; ++i) {
      const ResidencyHandle handle = manager->register_source(spec, source, PAGEABLE_HOST);
      manager->ensure(handle, PAGEABLE_HOST);
      actions.push_back(DropResident{handle, PAGEABLE_HOST});
    }
  }
};

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

// A 64 MiB source-backed ensure against the raw clone of the same bytes.
constexpr std::int64_t large_elements = (64 << 20) / 8;

void BM_TorchLargeEnsure(benchmark::State& state) {
  const at::Tensor original = at::arange(large_elements, at::TensorOptions().dtype(at::kLong));
  const ResidencyValueSpec spec("Blob", large_elements * 8, large_elements * 8, ReplicaMode::replicable,
                                Recoverability::reconstructible);
  auto manager = fresh_manager();
  const ResidencyHandle handle = manager->register_source(spec, clone_source(original), PAGEABLE_HOST);
  for (auto _ : state) {
    manager->ensure(handle, PAGEABLE_HOST);
    manager->drop(handle, PAGEABLE_HOST);
  }
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

}  // namespace
}  // namespace fhelium::bench
