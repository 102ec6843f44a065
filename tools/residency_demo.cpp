// residency-demo: a tour of the manager on a simulated two-GPU machine. It
// adopts weights, streams them to a GPU under a budget, explains a plan before
// running it, and prints the snapshot as tables.
#include <ATen/ops/arange.h>

#include <iostream>
#include <string>

#include "fhelium/harness/simulated_runtime.hpp"
#include "fhelium/harness/text_report.hpp"
#include "fhelium/residency.hpp"

using namespace fhelium::residency;

namespace {

ResidentValue layer(std::int64_t index, std::int64_t elements) {
  const at::Tensor weights = at::arange(elements, at::TensorOptions().dtype(at::kFloat)).add_(float(index));
  return ResidentValue("LayerWeights", {{"weight", weights}}, {{"layer", index}});
}

}  // namespace

namespace {

void tour() {
  auto runtime = std::make_shared<fhelium::harness::SimulatedRuntime>();
  ResidencyManager manager(ManagerOptions{{{cuda_location(0), 3 << 20}}, 4096, runtime, {}});
  std::cout << "Simulated runtime: pinned host and " << runtime->cuda_device_count()
            << " CUDA devices modelled on the CPU; cuda:0 has a 3 MiB budget.\n\n";

  std::vector<ResidencyHandle> layers;
  for (std::int64_t i = 0; i < 4; ++i) layers.push_back(manager.adopt(layer(i, 256 * 1024)));  // 1 MiB each
  manager.move(layers[0], cuda_location(0));
  manager.move(layers[1], cuda_location(0));

  const ResidencyPlan next_layers{"layers-2-3",
                                  {MoveResident{layers[2], cuda_location(0), {}}},
                                  {MoveResident{layers[1], PINNED_HOST, {}}},
                                  {MemoryReservation(cuda_location(0), 512 * 1024, "activations")},
                                  {MoveResident{layers[0], PINNED_HOST, {}}}};
  std::cout << fhelium::harness::format_explanation(manager.explain(next_layers)) << '\n';

  ResidencyScope scope = manager.scope(next_layers);
  const ResidencyPlanReport report = scope.run([&] {
    auto lease = manager.acquire({layers[2]}, cuda_location(0), runtime->stream(0, 1));
    runtime->enqueue(runtime->stream(0, 1), 250);  // a kernel reading layer 2
    lease.release();
  });
  std::cout << "scope '" << report.plan_name << "' ran " << report.transitions.size() << " transitions\n\n";
  std::cout << fhelium::harness::format_snapshot(manager.snapshot());
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument == "--version") {
      std::cout << "residency-demo " FHELIUM_RESIDENCY_VERSION "\n";
      return 0;
    }
    if (argument == "--help" || argument == "-h") {
      std::cout << "Usage: residency-demo [--version]\nA short guided tour of the residency manager on the "
                   "simulated runtime.\nExit status: 0 done, 1 a step failed, 2 usage error.\n";
      return 0;
    }
    std::cerr << "residency-demo: unknown argument '" << argument << "' (try --help)\n";
    return 2;
  }
  try {
    tour();
  } catch (const std::exception& error) {
    std::cerr << "residency-demo: " << error.what() << '\n';
    return 1;
  }
  return 0;
}
