// Uses the installed fhelium-residency libraries the way an outside program
// would: adopt a value, explain a plan, move it to a (simulated) GPU, snapshot.
#include <ATen/ops/arange.h>
#include <fhelium/harness/simulated_runtime.hpp>
#include <fhelium/residency.hpp>

#include <iostream>

using namespace fhelium::residency;

int main() {
  auto runtime = std::make_shared<fhelium::harness::SimulatedRuntime>();
  const ResidencyLocation gpu = cuda_location(0);
  ResidencyManager manager(ManagerOptions{{{gpu, 1 << 20}}, 64, runtime});
  const ResidencyHandle value =
      manager.adopt(ResidentValue("Block", {{"data", at::arange(256, at::TensorOptions().dtype(at::kFloat))}}));

  const ResidencyPlanExplanation explanation = manager.explain(ResidencyPlan{"to-gpu", {MoveResident{value, gpu}}});
  std::cout << "explain: feasible=" << explanation.feasible << " predicted peak at " << gpu.name() << " "
            << explanation.predicted_peak(gpu).value_or(-1) << " bytes\n";
  const ResidencyTransitionReport moved = manager.move(value, gpu);
  std::cout << "move: " << moved.source->name() << " -> " << moved.destination->name() << ", "
            << moved.storage_nbytes << " bytes\n";
  const ResidencySnapshot snapshot = manager.snapshot();
  const ResidencyLocationSnapshot* at_gpu = snapshot.location(gpu);
  std::cout << "snapshot: " << gpu.name() << " used " << at_gpu->used_bytes << " of " << *at_gpu->budget_bytes
            << " bytes, state_version " << snapshot.state_version << "\n";
  const bool ok = explanation.feasible && at_gpu->used_bytes == 1024 && moved.source == PAGEABLE_HOST;
  std::cout << (ok ? "consumer: ok" : "consumer: WRONG RESULT") << '\n';
  return ok ? 0 : 1;
}
