// residency-replay: replays scenario YAML files against the residency manager
// and reports, per scenario, the steps run, faults fired, invariant checks,
// peaks and verdict. Exit status 0 only when every scenario passed.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "fhelium/harness/replay.hpp"
#include "fhelium/harness/fault_coverage.hpp"
#include "fhelium/harness/reporters.hpp"
#include "fhelium/harness/shrink.hpp"
#include "fhelium/harness/scenario_loader.hpp"

namespace fs = std::filesystem;
using namespace fhelium::harness;

namespace {

std::vector<std::string> collect(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const auto& input : inputs) {
    if (fs::is_directory(input)) {
      std::vector<std::string> found;
      for (const auto& entry : fs::recursive_directory_iterator(input)) {
        const auto extension = entry.path().extension();
        if (entry.is_regular_file() && (extension == ".yaml" || extension == ".yml")) {
          found.push_back(entry.path().string());
        }
      }
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::exists(input)) {
      files.push_back(input);
    } else {
      throw std::invalid_argument("no such file or directory: " + input);
    }
  }
  return files;
}

// Locates the first difference between two JSON dumps, for a useful message.
std::string first_difference(const std::string& a, const std::string& b) {
  std::size_t at = 0;
  while (at < a.size() && at < b.size() && a[at] == b[at]) ++at;
  const std::size_t from = at < 60 ? 0 : at - 60;
  return "first difference at byte " + std::to_string(at) + ": ..." + a.substr(from, 120) + "... vs ..." +
         b.substr(from, 120) + "...";
}

// `invalid` is set when the file is not a valid scenario (exit status 2,
// not a broken guarantee).
ScenarioResult run_file(const std::string& file, const ReplayOptions& options, bool check_determinism,
                        bool& invalid) {
  Scenario scenario;
  try {
    scenario = load_scenario_file(file);
  } catch (const ScenarioError& error) {
    invalid = true;
    ScenarioResult result;
    result.file = file;
    result.name = fs::path(file).stem().string();
    result.verdict = "failed";
    result.failure = std::string("invalid scenario: ") + error.what();
    result.failed_line = error.line();
    return result;
  }
  ScenarioResult result = replay(scenario, options);
  if (check_determinism && result.verdict != "skipped") {
    ReplayOptions quiet = options;
    quiet.log = nullptr;
    const ScenarioResult again = replay(scenario, quiet);
    const std::string first = to_json(result).dump();
    const std::string second = to_json(again).dump();
    if (first != second) {
      result.verdict = "failed";
      result.failure = "nondeterministic: two replays with seed " + std::to_string(result.seed) +
                       " produced different reports; " + first_difference(first, second);
    }
  }
  return result;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("cannot write " + path);
  out << text;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Replay residency scenarios against the manager and check its guarantees"};
  std::vector<std::string> inputs;
  std::optional<std::uint64_t> seed;
  std::string runtime;
  std::string json_path, junit_path, timeline_path, html_path;
  bool verbose = false, check_determinism = false;
  std::string snapshots_dir;
  std::vector<std::string> diff_files;
  app.add_option("inputs", inputs, "Scenario files or directories (searched for *.yaml)");
  app.add_option("--snapshots", snapshots_dir, "Write each scenario's final snapshot as DIR/NAME.json");
  std::string shrink_input, shrink_output;
  std::size_t max_replays = 2000;
  app.add_option("--shrink", shrink_input,
                 "Shrink the failing scenario FILE to a small one that fails the same way (write it with -o)");
  app.add_option("-o,--output", shrink_output, "Where --shrink writes the shrunk scenario");
  app.add_option("--max-replays", max_replays, "Replays --shrink may spend (default 2000)");
  app.add_option("--diff", diff_files, "Compare two saved snapshots (or any two JSON files): print what differs "
                                       "by JSON pointer; exit 0 when equal, 1 when not")
      ->expected(2);
  app.add_option("--seed", seed, "Seed for fault rules and generated behaviour (overrides each scenario's)");
  app.add_option("--runtime", runtime, "Device runtime: simulated or torch (overrides each scenario's)")
      ->check(CLI::IsMember({"simulated", "torch"}));
  app.add_option("--json", json_path, "Write the machine-readable report to FILE");
  app.add_option("--junit", junit_path, "Write JUnit XML to FILE");
  app.add_option("--timeline", timeline_path,
                 "Write a Chrome trace-event timeline on virtual time (open it in Perfetto) to FILE");
  app.add_option("--html", html_path,
                 "Write a self-contained HTML report (bytes over virtual time per location, faults, steps) to FILE");
  app.add_flag("--verbose,-v", verbose, "Log every step");
  app.add_flag("--check-determinism", check_determinism, "Replay each scenario twice and fail on any difference");
  app.set_version_flag("--version", "residency-replay " FHELIUM_RESIDENCY_VERSION);
  app.footer("Exit status: 0 every scenario passed, 1 a scenario failed, 2 usage error or invalid scenario file.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error) == 0 ? 0 : 2;  // --help and --version exit 0
  }

  if (!shrink_input.empty()) {
    if (shrink_output.empty() || !inputs.empty()) {
      std::cerr << "residency-replay: --shrink FILE takes -o OUTPUT and no other scenarios\n";
      return 2;
    }
    try {
      std::ifstream in(shrink_input);
      if (!in) throw std::runtime_error("cannot read " + shrink_input);
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      ShrinkOptions options;
      options.max_replays = max_replays;
      options.replay.seed = seed;
      if (!runtime.empty()) options.replay.runtime = runtime;
      const ShrinkResult shrunk = shrink_scenario(text, shrink_input, options);
      write_file(shrink_output, "# Shrunk by residency-replay --shrink from " + shrink_input + " (" +
                                    std::to_string(shrunk.replays) + " replays); it fails with: " +
                                    shrunk.signature + "\n" + shrunk.yaml);
      std::cout << "residency-replay: shrunk " << shrink_input << " from " << shrunk.steps_before << " steps ("
                << shrunk.bytes_before << " bytes) to " << shrunk.steps_after << " steps (" << shrunk.bytes_after
                << " bytes) in " << shrunk.replays << " replays" << (shrunk.budget_exhausted ? " (replay budget spent)" : "")
                << "; it still fails with: " << shrunk.signature << "\nwritten to " << shrink_output
                << "; replay it with: residency-replay " << shrink_output << "\n";
      return 0;
    } catch (const ScenarioError& error) {
      std::cerr << "residency-replay: --shrink: invalid scenario: " << error.what() << '\n';
      return 2;
    } catch (const std::exception& error) {
      std::cerr << "residency-replay: --shrink: " << error.what() << '\n';
      return 2;
    }
  }
  if (!diff_files.empty()) {
    if (!inputs.empty()) {
      std::cerr << "residency-replay: --diff takes two JSON files and no scenarios\n";
      return 2;
    }
    try {
      const auto read = [](const std::string& path) {
        std::ifstream in(path);
        if (!in) throw std::runtime_error("cannot read " + path);
        return nlohmann::json::parse(in);
      };
      const auto differences = json_differences(read(diff_files[0]), read(diff_files[1]));
      for (const auto& line : differences) std::cout << line << '\n';
      std::cout << differences.size() << " difference(s)\n";
      return differences.empty() ? 0 : 1;
    } catch (const std::exception& error) {
      std::cerr << "residency-replay: --diff: " << error.what() << '\n';
      return 2;
    }
  }
  if (inputs.empty()) {
    std::cerr << "residency-replay: name scenario files or directories (or --diff A.json B.json); see --help\n";
    return 2;
  }
  try {
    const std::vector<std::string> files = collect(inputs);
    if (files.empty()) {
      std::cerr << "residency-replay: no scenario files found\n";
      return 2;
    }
    ReplayOptions options;
    options.seed = seed;
    if (!runtime.empty()) options.runtime = runtime;
    if (verbose) options.log = [](const std::string& line) { std::cout << line << '\n'; };
    // On a terminal, a progress line for long runs (at most ten updates a
    // second); nothing when the output is a file or a pipe.
    const bool terminal = !verbose && isatty(STDOUT_FILENO) != 0;
    std::string current;
    auto last_update = std::chrono::steady_clock::now();
    if (terminal) {
      options.progress = [&](std::size_t done, std::size_t total) {
        const auto now = std::chrono::steady_clock::now();
        if (done != total && now - last_update < std::chrono::milliseconds(100)) return;
        last_update = now;
        std::cout << "\r\033[K" << current << ": step " << done << "/" << total << std::flush;
      };
    }

    std::vector<ScenarioResult> results;
    std::size_t passed = 0, failed = 0, skipped = 0, invalid = 0;
    for (std::size_t i = 0; i < files.size(); ++i) {
      if (verbose) std::cout << "[" << i + 1 << "/" << files.size() << "] " << files[i] << '\n';
      bool invalid_file = false;
      current = "[" + std::to_string(i + 1) + "/" + std::to_string(files.size()) + "] " + files[i];
      results.push_back(run_file(files[i], options, check_determinism, invalid_file));
      if (terminal) std::cout << "\r\033[K";
      invalid += invalid_file;
      const ScenarioResult& result = results.back();
      passed += result.verdict == "passed";
      failed += result.verdict == "failed";
      skipped += result.verdict == "skipped";
      std::cout << "[" << i + 1 << "/" << files.size() << "] " << text_summary(result) << std::flush;
    }
    if (!json_path.empty()) write_file(json_path, to_json(results).dump(2) + "\n");
    if (!junit_path.empty()) write_file(junit_path, junit_xml(results));
    if (!timeline_path.empty()) write_file(timeline_path, timeline(results).dump() + "\n");
    if (!html_path.empty()) write_file(html_path, html_report(results));
    if (!snapshots_dir.empty()) {
      std::filesystem::create_directories(snapshots_dir);
      for (const auto& result : results) {
        if (!result.final_snapshot) continue;
        write_file((std::filesystem::path(snapshots_dir) / (result.name + ".json")).string(),
                   snapshot_json(*result.final_snapshot, result.value_names).dump(2) + "\n");
      }
    }
    if (results.size() > 1) {
      // Which parts of the fault model and which error paths this run exercised.
      const FaultCoverage coverage = fault_coverage(results);
      const auto missing_pairs = coverage.never_fired();
      const auto missing_paths = coverage.never_reached();
      std::cout << "\nfault coverage: " << coverage.fired.size() - missing_pairs.size() << " of "
                << coverage.fired.size() << " fault-model pairs fired, " << coverage.error_paths.size() - missing_paths.size()
                << " of " << coverage.error_paths.size() << " error paths reached";
      for (const auto& [operation, effect] : missing_pairs) std::cout << "\n  never fired: " << operation << "/" << effect;
      for (const auto& kind : missing_paths) std::cout << "\n  never reached: " << kind;
      std::cout << '\n';
    }
    std::cout << "\nresidency-replay: " << passed << " passed, " << failed << " failed, " << skipped << " skipped";
    if (invalid > 0) std::cout << " (" << invalid << " invalid scenario file" << (invalid == 1 ? "" : "s") << ")";
    std::cout << '\n';
    if (invalid > 0) return 2;
    return failed == 0 ? 0 : 1;
  } catch (const std::exception& error) {
    std::cerr << "residency-replay: " << error.what() << '\n';
    return 2;
  }
}
