// Shared helpers for the residency unit tests: deterministic values, managers
// over a simulated runtime, and content comparison.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>

#include "fhelium/harness/contents.hpp"
#include "fhelium/harness/simulated_runtime.hpp"
#include "fhelium/residency.hpp"

namespace fhelium::residency::testing {

// A float32 value of `elements` elements (4 bytes each) filled with seed, seed+1, ...
ResidentValue make_value(std::int64_t elements, float seed = 1.0f, const std::string& type_name = "Blob");
// A value with two fields that are views of one storage.
ResidentValue make_view_value(std::int64_t storage_elements, std::int64_t view_elements);
using harness::same_contents;

struct SimulatedFixture {
  std::shared_ptr<harness::SimulatedRuntime> runtime;
  std::unique_ptr<ResidencyManager> manager;
};

SimulatedFixture make_fixture(LocationBudgets budgets = {},
                              harness::SimulatedRuntimeOptions options = {});

// Byte accounting of one location in a fresh snapshot; fails the test when absent.
ResidencyLocationSnapshot location_state(const ResidencyManager& manager, const ResidencyLocation& location);
// Locations where `handle` is materialized, in snapshot order.
std::vector<ResidencyLocation> resident_at(const ResidencyManager& manager, const ResidencyHandle& handle);

inline const ResidencyLocation CUDA0 = cuda_location(0);
inline const ResidencyLocation CUDA1 = cuda_location(1);

}  // namespace fhelium::residency::testing
