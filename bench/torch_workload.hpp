// The end-to-end workload shared by torch_bench.cpp (wall time) and
// instruction_counts.cpp (instructions): the default TorchRuntime at pageable
// host, values of one 4 KiB int64 tensor, sources whose load() clones a
// 4 KiB template, batches of 1000 operations.
#pragma once

#include <ATen/ops/arange.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "fhelium/residency.hpp"

namespace fhelium::bench::torch_workload {

using namespace residency;

inline constexpr std::int64_t batch = 1000;
inline constexpr std::int64_t elements = 512;  // 4 KiB of int64

inline at::Tensor template_tensor() { return at::arange(elements, at::TensorOptions().dtype(at::kLong)); }

inline ResidentValue tensor_value(const at::Tensor& tensor) { return ResidentValue("Blob", {{"data", tensor}}); }

// A manager on the default TorchRuntime, without a trace.
inline std::unique_ptr<ResidencyManager> fresh_manager() {
  ManagerOptions options;
  options.trace_capacity = 0;
  return std::make_unique<ResidencyManager>(std::move(options));
}

inline ResidencyValueSpec source_spec() {
  return ResidencyValueSpec("Blob", elements * 8, elements * 8, ReplicaMode::replicable,
                            Recoverability::reconstructible);
}

inline std::shared_ptr<ResidencySource> clone_source(const at::Tensor& original) {
  return make_source([original] { return tensor_value(original.clone()); });
}

// Wall time of `work`, in nanoseconds.
template <class Work>
double elapsed_ns(Work&& work) {
  const auto start = std::chrono::steady_clock::now();
  work();
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
}

// `count` values of a fresh clone of the template each.
inline std::vector<ResidentValue> fresh_values(std::int64_t count) {
  const at::Tensor original = template_tensor();
  std::vector<ResidentValue> values;
  for (std::int64_t i = 0; i < count; ++i) values.push_back(tensor_value(original.clone()));
  return values;
}

// The bytes `manager` charges as used at `at`, from a snapshot.
inline std::int64_t used_bytes(const ResidencyManager& manager, const ResidencyLocation& at = PAGEABLE_HOST) {
  const ResidencySnapshot snapshot = manager.snapshot();
  const ResidencyLocationSnapshot* location = snapshot.location(at);
  return location == nullptr ? 0 : location->used_bytes;
}

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

}  // namespace fhelium::bench::torch_workload
