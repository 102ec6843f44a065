// residency-swarm: generates workloads, each run under its own random mix of
// operations and faults, replays them with every check the replay engine
// has, and shrinks every failing run into a scenario file that reproduces it.
// Exit status 0 when every run passed.
#include <CLI/CLI.hpp>

#include <fstream>
#include <iostream>

#include "fhelium/harness/scenario_loader.hpp"
#include "fhelium/harness/swarm.hpp"

using namespace fhelium::harness;

int main(int argc, char** argv) {
  CLI::App app{"Swarm runs: generated workloads under per-run random fault mixes, checked after every step"};
  SwarmOptions options;
  std::string json_path, print_run;
  bool quiet = false;
  std::optional<std::size_t> show;
  app.add_option("--seed", options.seed, "Seed of the swarm (default 1); the same seed gives the same runs and report");
  app.add_option("--runs", options.runs, "Runs (default 100)")->check(CLI::PositiveNumber);
  app.add_option("--steps", options.steps, "Workload steps per run (default 200)")->check(CLI::PositiveNumber);
  app.add_option("--out", options.reproducer_dir,
                 "Directory for the shrunk scenario of each failing run (default swarm-failures)");
  app.add_option("--max-shrink-replays", options.shrink_replays, "Replays the shrinking of one failing run may spend");
  app.add_option("--json", json_path, "Write the report as JSON to FILE");
  app.add_option("--print", show, "Print the scenario of run N (it is not replayed) and exit");
  app.add_flag("--quiet,-q", quiet, "No line per run");
  app.set_version_flag("--version", "residency-swarm " FHELIUM_RESIDENCY_VERSION);
  app.footer("Exit status: 0 every run passed, 1 a run failed (its reproducer is written), 2 usage error.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error) == 0 ? 0 : 2;
  }
  if (show) {
    std::cout << generate_swarm_scenario(swarm_run_seed(options.seed, *show), options.steps).yaml;
    return 0;
  }
  if (options.reproducer_dir.empty()) options.reproducer_dir = "swarm-failures";
  if (!quiet) {
    options.on_run = [&](const SwarmRun& run) {
      std::cout << "run " << run.index << " seed " << run.seed << ": " << run.verdict << ", " << run.steps << " steps, "
                << run.faults_fired << " faults fired; " << run.mix << "\n";
      if (!run.reproducer.empty()) std::cout << "  reproduce: residency-replay " << run.reproducer << "\n";
      std::cout.flush();
    };
  }
  try {
    const SwarmReport report = run_swarm(options);
    std::cout << swarm_text(report);
    if (!json_path.empty()) {
      std::ofstream out(json_path);
      out << swarm_json(report);
      if (!out) {
        std::cerr << "residency-swarm: cannot write " << json_path << "\n";
        return 2;
      }
    }
    return report.failures.empty() ? 0 : 1;
  } catch (const ScenarioError& error) {
    // A generated scenario the loader refuses is a generator defect.
    std::cerr << "residency-swarm: generated an invalid scenario: " << error.what() << "\n";
    return 2;
  } catch (const std::exception& error) {
    std::cerr << "residency-swarm: " << error.what() << "\n";
    return 2;
  }
}
