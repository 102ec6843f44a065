// Throughput of model-checked property commands; built only when the
// property tests (RapidCheck) are, so the main benchmark never needs them.
#include <benchmark/benchmark.h>

#include <random>

#include "system.hpp"

namespace fhelium::bench {
namespace {

using residency::PAGEABLE_HOST;
using residency::ReplicaMode;
using residency::ResidencyHandle;

// Throughput of model-checked commands: each runs a primitive on the manager
// and on the reference model and compares the snapshot, as the property tests do.
void BM_PropertyCommands(benchmark::State& state) {
  std::mt19937 random(7);
  std::int64_t commands = 0;
  for (auto _ : state) {
    property::System system;
    property::Model model;
    for (int i = 0; i < 8; ++i) {
      const std::size_t index = model.values.size();
      model.adopt(1024, PAGEABLE_HOST, i % 2 == 0);
      system.handles.push_back(system.manager->adopt(property::System::contents(index, 1024), PAGEABLE_HOST,
                                                     i % 2 == 0 ? ReplicaMode::exclusive : ReplicaMode::replicable));
    }
    for (int i = 0; i < 200; ++i) {
      property::Primitive primitive;
      primitive.kind = static_cast<property::PrimitiveKind>(random() % 3);
      primitive.value = random() % model.values.size();
      primitive.location = property::all_locations()[random() % 4];
      const std::string predicted = model.apply(primitive);
      const std::string actual = property::outcome_of([&] {
        const ResidencyHandle& handle = system.handles[primitive.value];
        if (primitive.kind == property::PrimitiveKind::ensure) system.manager->ensure(handle, primitive.location);
        if (primitive.kind == property::PrimitiveKind::move) system.manager->move(handle, primitive.location);
        if (primitive.kind == property::PrimitiveKind::drop) system.manager->drop(handle, primitive.location);
      });
      if ((actual == "ok" ? (predicted == "no-op" ? "no-op" : "ok") : actual) != predicted) {
        state.SkipWithError("model and manager disagree");
        return;
      }
      system.check_against(model);
      ++commands;
    }
  }
  state.SetItemsProcessed(commands);
}
BENCHMARK(BM_PropertyCommands)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace fhelium::bench
