// Swarm runs: generated scenarios are valid and varied, the same seed gives
// the same report, and a defect the swarm was not told about is found,
// shrunk and written out as a scenario that replays it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "fhelium/harness/forwarding_runtime.hpp"
#include "fhelium/harness/scenario_loader.hpp"
#include "fhelium/harness/shrink.hpp"
#include "fhelium/harness/swarm.hpp"

namespace fhelium::harness {
namespace {

TEST(Swarm, GeneratedScenariosLoadAndVaryTheirMix) {
  std::set<std::string> mixes;
  std::map<std::string, int> fault_kind_runs;
  std::map<std::string, int> operations_off;
  const int runs = 40;
  for (int index = 0; index < runs; ++index) {
    const std::uint64_t seed = swarm_run_seed(11, static_cast<std::size_t>(index));
    const SwarmScenario generated = generate_swarm_scenario(seed, 80);
    const Scenario scenario = parse_scenario(generated.yaml, "generated.yaml");  // throws when invalid
    EXPECT_EQ(scenario.steps.size(), generated.steps);
    EXPECT_GE(generated.steps, 80u);
    mixes.insert(generated.mix);
    std::set<std::string> armed;
    for (const auto& rule : scenario.faults) armed.insert(to_string(rule.operation));
    for (const auto& operation : armed) fault_kind_runs[operation] += 1;
    const std::string off = generated.mix.substr(generated.mix.find("off: ") + 5);
    std::istringstream words(off);
    for (std::string word; words >> word;) operations_off[word] += 1;
    // Same seed, same scenario.
    EXPECT_EQ(generate_swarm_scenario(seed, 80).yaml, generated.yaml);
  }
  EXPECT_EQ(mixes.size(), static_cast<std::size_t>(runs));
  // Every fault operation is armed in some runs and absent from others.
  for (const char* operation :
       {"copy", "record_event", "query_event", "synchronize_event", "synchronize_stream", "allocator_stats"}) {
    EXPECT_GT(fault_kind_runs[operation], 0) << operation;
    EXPECT_LT(fault_kind_runs[operation], runs) << operation;
  }
  // Operations are switched off in some runs (never the two every run keeps).
  EXPECT_GT(operations_off["acquire"], 0);
  EXPECT_GT(operations_off["use"], 0);
  EXPECT_EQ(operations_off.count("ensure"), 0u);
  EXPECT_EQ(operations_off.count("move"), 0u);
}

TEST(Swarm, SameSeedSameReport) {
  SwarmOptions options;
  options.seed = 5;
  options.runs = 6;
  options.steps = 60;
  const SwarmReport first = run_swarm(options);
  const SwarmReport second = run_swarm(options);
  EXPECT_EQ(swarm_json(first), swarm_json(second));
  EXPECT_EQ(swarm_text(first), swarm_text(second));
  EXPECT_TRUE(first.failures.empty()) << swarm_text(first);
  EXPECT_GE(first.steps, 6u * 60u);
  EXPECT_GT(first.invariant_checks, 0);
  options.seed = 6;
  EXPECT_NE(swarm_json(run_swarm(options)), swarm_json(first));
}

TEST(Swarm, RefusesEmptyRuns) {
  SwarmOptions options;
  options.runs = 0;
  EXPECT_THROW(run_swarm(options), std::invalid_argument);
  options.runs = 1;
  options.steps = 0;
  EXPECT_THROW(run_swarm(options), std::invalid_argument);
}

// A runtime with a defect the swarm is not told about: copies from a CUDA
// device 1 to pinned host memory come back with their first element's bits
// flipped.
class LossyDownloadRuntime final : public ForwardingRuntime {
 public:
  using ForwardingRuntime::ForwardingRuntime;

 private:
  residency::ResidentValue do_copy_to(const residency::ResidentValue& value,
                                      const residency::ResidencyLocation& destination,
                                      const std::optional<c10::Stream>& stream) override {
    const auto from = upstream()->locate(value);
    residency::ResidentValue copy = ForwardingRuntime::do_copy_to(value, destination, stream);
    if (destination.kind() == residency::ResidencyLocationKind::pinned_host && from == residency::cuda_location(1)) {
      // Every bit of each field's first element flipped (virtual payloads
      // broadcast one element, so that is all of it).
      for (const auto& field : copy.fields()) field.second.as_strided({1}, {1}).view(at::kByte).bitwise_not_();
    }
    return copy;
  }
};

TEST(Swarm, FindsASeededRuntimeDefectAndWritesAShrunkReproducer) {
  const auto dir = std::filesystem::temp_directory_path() / "fhelium-swarm-test";
  std::filesystem::remove_all(dir);
  SwarmOptions options;
  options.seed = 3;
  options.runs = 16;
  options.steps = 80;
  options.reproducer_dir = dir.string();
  options.replay.wrap_runtime = [](std::shared_ptr<residency::DeviceRuntime> base) {
    return std::make_shared<LossyDownloadRuntime>(std::move(base));
  };
  const SwarmReport report = run_swarm(options);
  ASSERT_FALSE(report.failures.empty()) << swarm_text(report);
  EXPECT_LT(report.failures.size(), report.runs) << "the defect shows only in runs that download from cuda:1 to pinned memory";
  const std::string text = swarm_text(report);
  std::cout << text;
  for (const SwarmRun& run : report.failures) {
    EXPECT_EQ(run.signature, "content of a value") << run.failure;
    EXPECT_LE(run.shrunk_steps, 6u) << run.reproducer;
    EXPECT_LT(run.shrunk_steps, run.steps);
    ASSERT_TRUE(std::filesystem::exists(run.reproducer)) << run.reproducer;
    EXPECT_NE(text.find("reproduce: residency-replay " + run.reproducer), std::string::npos);
    // The reproducer fails the same way with the defect, and passes without it.
    const Scenario minimal = load_scenario_file(run.reproducer);
    EXPECT_EQ(failure_signature(replay(minimal, options.replay)), run.signature);
    EXPECT_EQ(replay(minimal).verdict, "passed");
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fhelium::harness
