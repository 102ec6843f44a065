#include "support.hpp"

#include <ATen/ops/arange.h>
#include <gtest/gtest.h>

namespace fhelium::residency::testing {

ResidentValue make_value(std::int64_t elements, float seed, const std::string& type_name) {
  at::Tensor data = at::arange(elements, at::TensorOptions().dtype(at::kFloat)).add_(seed);
  return ResidentValue(type_name, {{"data", data}}, {{"level", std::int64_t{3}}, {"scale", 1.5}});
}

ResidentValue make_view_value(std::int64_t storage_elements, std::int64_t view_elements) {
  at::Tensor base = at::arange(storage_elements, at::TensorOptions().dtype(at::kFloat));
  return ResidentValue("Pair", {{"head", base.narrow(0, 0, view_elements)},
                                {"tail", base.narrow(0, storage_elements - view_elements, view_elements)}});
}

SimulatedFixture make_fixture(LocationBudgets budgets,
                              harness::SimulatedRuntimeOptions options) {
  auto runtime = std::make_shared<harness::SimulatedRuntime>(std::move(options));
  ManagerOptions manager_options;
  manager_options.budgets = std::move(budgets);
  manager_options.runtime = runtime;
  return {runtime, std::make_unique<ResidencyManager>(std::move(manager_options))};
}

ResidencyLocationSnapshot location_state(const ResidencyManager& manager, const ResidencyLocation& location) {
  const ResidencySnapshot snapshot = manager.snapshot();
  const ResidencyLocationSnapshot* state = snapshot.location(location);
  if (state == nullptr) {
    ADD_FAILURE() << "location " << location.name() << " is not registered";
    return ResidencyLocationSnapshot(location, std::nullopt, 0, 0, std::nullopt, 0, 0, 0, 0, 0, 0, 0, std::nullopt,
                                     std::nullopt);
  }
  return *state;
}

std::vector<ResidencyLocation> resident_at(const ResidencyManager& manager, const ResidencyHandle& handle) {
  const ResidencySnapshot snapshot = manager.snapshot();
  std::vector<ResidencyLocation> result;
  const ResidencyValueSnapshot* value = snapshot.value(handle);
  if (value == nullptr) {
    ADD_FAILURE() << "handle " << handle.handle_id << " is not in the snapshot";
    return result;
  }
  for (const auto& item : value->materializations) result.push_back(item.location);
  return result;
}

}  // namespace fhelium::residency::testing
