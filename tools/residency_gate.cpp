// residency-gate: the release gate. Reads the results of the invariant suites
// (meson's test log), the scenario replay report and the benchmark JSON,
// compares them with the committed thresholds (bench/thresholds.json: speed
// ratios to an in-run reference, complexity classes, and the core engine's
// per-operation targets on this machine class), prints a verdict table,
// writes a JSON verdict, and exits non-zero on any failed invariant, missing
// suite or regression beyond tolerance. --update-baseline records the current
// benchmark ratios as the new baseline, deliberately.
//
// Thresholds come from --thresholds, else the build directory's copy
// (BUILD/bench/thresholds.json), else the installed data directory, so an
// installed gate works from any directory. Exit status: 0 pass, 1 a verdict
// failed, 2 usage error or unreadable/invalid input. A failed verdict whose
// every failure is a timed check, in a run where a reading of the host's own
// speed (thresholds "host") was above its usual time, is marked inconclusive
// in the output and the JSON verdict; it still exits 1.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

using nlohmann::json;

namespace {

struct Check {
  std::string name;
  std::string measured;
  std::string threshold;
  bool passed;
  // Judged from measured times (speed, complexity, targets, data movement,
  // contention): a slow host can fail it without a regression. A check that
  // found its benchmark missing or stopped with an error is not.
  bool timed = false;
};

// One reading of the host's own speed in this run (thresholds "host"): a
// benchmark that runs no manager code, or the baseline counter a paired
// benchmark timed in the same iterations as its operation. Above its usual
// time, the host ran slow while it was measured.
struct HostProbe {
  std::string benchmark;
  std::string counter;  // empty: the benchmark's own time per item
  double measured_ns;
  double usual_max_ns;
  bool slow() const { return measured_ns > usual_max_ns; }
  std::string name() const { return counter.empty() ? benchmark : benchmark + " " + counter; }
};

json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  return json::parse(in);
}

// meson writes one JSON object per line.
std::vector<json> read_json_lines(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<json> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(json::parse(line));
  }
  return lines;
}

// Input that cannot be read or parsed: exit status 2, not a failed verdict.
struct InvalidInput : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string find_thresholds(const std::string& explicit_path, const std::string& build_dir) {
  if (!explicit_path.empty()) return explicit_path;
  std::vector<std::string> candidates{build_dir + "/bench/thresholds.json"};
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error && std::string(FHELIUM_RESIDENCY_DATA_FROM_BIN).size() > 0) {
    candidates.push_back((self.parent_path() / FHELIUM_RESIDENCY_DATA_FROM_BIN / "thresholds.json").string());
  }
  candidates.push_back(std::string(FHELIUM_RESIDENCY_DATADIR) + "/thresholds.json");
  std::string looked;
  for (const auto& candidate : candidates) {
    if (std::filesystem::is_regular_file(candidate)) return candidate;
    looked += (looked.empty() ? "" : ", ") + candidate;
  }
  throw InvalidInput("no thresholds file: pass --thresholds FILE (looked for " + looked + ")");
}

std::string fixed(double value, int digits = 2) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << value;
  return out.str();
}

// Whole mebibytes, as the data-movement sizes are (the gate does not link the
// harness, whose format_bytes rounds to tenths).
std::string mebibytes(long bytes) { return std::to_string(bytes >> 20) + " MiB"; }

class Gate {
 public:
  explicit Gate(json thresholds) : thresholds_(std::move(thresholds)) {}

  void tests(const std::string& path) { suites(path, "", thresholds_.at("required_suites")); }

  // A sanitizer or fuzzing build's test log: `kind` names its entry under
  // "sanitizers" in the thresholds (address, thread, fuzz).
  // Line and branch coverage of lib/ from gcovr's JSON summary (tools/coverage.sh).
  void coverage(const std::string& path) {
    const json summary = read_json(path);
    const json& floors = thresholds_.at("coverage");
    for (const char* kind : {"line", "branch"}) {
      const double percent = summary.at(std::string(kind) + "_percent").get<double>();
      const double floor = floors.at(std::string("min_") + kind + "_percent").get<double>();
      add(std::string(kind) + " coverage of lib/",
          fixed(percent, 1) + "% (" + std::to_string(summary.at(std::string(kind) + "_covered").get<long>()) + " of " +
              std::to_string(summary.at(std::string(kind) + "_total").get<long>()) + ")",
          ">= " + fixed(floor, 1) + "%", percent >= floor);
    }
  }

  // A residency-swarm --json report: every run passed, over enough steps,
  // with every runtime fault kind fired somewhere.
  void swarm(const std::string& path) {
    const json report = read_json(path);
    const json& floors = thresholds_.at("swarm");
    const auto steps = report.at("steps").get<long>();
    const auto failures = report.at("failures").size();
    add("swarm runs", std::to_string(report.at("runs").get<long>()) + " runs, " + std::to_string(steps) + " steps, " +
            std::to_string(failures) + " failing",
        "0 failing over >= " + std::to_string(floors.at("min_steps").get<long>()) + " steps",
        failures == 0 && steps >= floors.at("min_steps").get<long>());
    std::string missing;
    for (const auto& kind : floors.at("fault_kinds")) {
      if (!report.at("faults_by_kind").contains(kind.get<std::string>())) missing += " " + kind.get<std::string>();
    }
    add("swarm fault kinds",
        missing.empty() ? std::to_string(report.at("faults_by_kind").size()) + " kinds fired" : "never fired:" + missing,
        "every listed kind fired", missing.empty());
  }

  void sanitized(const std::string& kind, const std::string& path) {
    const json& required = thresholds_.at("sanitizers").at(kind).at("required_suites");
    suites(path, kind + " ", required);
  }

 private:
  void suites(const std::string& path, const std::string& prefix, const json& required) {
    std::map<std::string, std::pair<int, int>> suites;  // suite, or "suite/test" -> (passed, failed)
    // Meson names a test "project:suite / test", or only "test" in a build
    // whose tests are all of one suite (the fuzz build): those are kept by
    // test name, and a required "suite/test" entry finds its test there.
    std::map<std::string, std::pair<int, int>> bare;
    for (const auto& test : read_json_lines(path)) {
      const bool ok = test.value("result", "") == "OK" || test.value("result", "") == "EXPECTEDFAIL";
      const std::string full = test.value("name", "");
      const std::size_t separator = full.find(" / ");
      if (separator == std::string::npos) {
        auto& [passed, failed] = bare[full];
        (ok ? passed : failed) += 1;
        continue;
      }
      const std::string test_name = full.substr(separator + 3);
      std::string name = full.substr(0, separator);
      name = name.substr(name.find(':') == std::string::npos ? 0 : name.find(':') + 1);
      // A required entry may name one test as "suite/test".
      for (const std::string& key : {name, name + "/" + test_name}) {
        auto& [passed, failed] = suites[key];
        (ok ? passed : failed) += 1;
      }
    }
    for (const auto& suite : required) {
      const std::string name = suite.get<std::string>();
      const std::pair<int, int>* counts = nullptr;
      if (const auto found = suites.find(name); found != suites.end()) {
        counts = &found->second;
      } else if (const std::size_t slash = name.find('/'); slash != std::string::npos) {
        if (const auto alone = bare.find(name.substr(slash + 1)); alone != bare.end()) counts = &alone->second;
      }
      if (counts == nullptr) {
        add(prefix + "suite " + name, "missing", "present, all passing", false);
        continue;
      }
      const auto [passed, failed] = *counts;
      add(prefix + "suite " + name, std::to_string(passed) + " passed, " + std::to_string(failed) + " failed",
          "all passing", failed == 0 && passed > 0);
    }
  }

 public:

  void replay(const std::string& path) {
    const json report = read_json(path);
    const int passed = report.value("passed", 0), failed = report.value("failed", 0);
    const int minimum = thresholds_.value("min_scenarios", 1);
    add("scenario replay", std::to_string(passed) + " passed, " + std::to_string(failed) + " failed",
        ">= " + std::to_string(minimum) + " passed, none failed", failed == 0 && passed >= minimum);
    coverage(report);
  }

  // Every (operation, effect) pair of the fault model fired somewhere in the
  // scenario library, and every manager error path was reached.
  void coverage(const json& report) {
    if (!report.contains("fault_coverage")) {
      add("fault coverage", "missing from the replay report", "present", false);
      return;
    }
    const json& coverage = report.at("fault_coverage");
    const auto listed = [](const json& names, std::size_t total, const char* what) {
      std::string text = std::to_string(total - names.size()) + " of " + std::to_string(total) + " " + what;
      for (const auto& name : names) text += (&name == &names.front() ? "; never: " : ", ") + name.get<std::string>();
      return text;
    };
    add("fault coverage", listed(coverage.at("never_fired"), coverage.at("pairs").size(), "pairs fired"),
        "every fault-model pair fired", coverage.at("never_fired").empty());
    add("error paths", listed(coverage.at("never_reached"), coverage.at("error_paths").size(), "reached"),
        "every manager error path reached", coverage.at("never_reached").empty());
  }

  void benchmarks(const std::string& path, bool update) {
    const json report = read_json(path);
    errors(report);
    const std::map<std::string, json> runs = measurements(report);
    const auto ns_per_item = [&](const std::string& name) -> std::optional<double> {
      const auto found = runs.find(name);
      if (found == runs.end() || !found->second.contains("items_per_second")) return std::nullopt;
      return 1e9 / found->second.at("items_per_second").get<double>();
    };
    // A counter a benchmark reports beside its time (a baseline it timed in
    // the same iterations, per item).
    const auto counter = [&](const std::string& name, const std::string& counter_name) -> std::optional<double> {
      const auto found = runs.find(name);
      if (found == runs.end() || !found->second.contains(counter_name) || !found->second.at(counter_name).is_number()) {
        return std::nullopt;
      }
      return found->second.at(counter_name).get<double>();
    };
    const auto reference = ns_per_item("BM_Reference");
    if (!reference) {
      add("benchmark reference", "missing", "BM_Reference present", false);
      return;
    }
    const double tolerance = thresholds_.at("speed").value("tolerance", 2.0);
    json& baseline = thresholds_.at("speed").at("baseline_ratios");
    for (auto& [name, ratio] : baseline.items()) {
      const auto value = ns_per_item(name);
      if (!value) {
        add("speed " + name, "missing", "present", false);
        continue;
      }
      const double measured = *value / *reference;
      if (update) ratio = std::round(measured * 100.0) / 100.0;
      timed("speed " + name, fixed(*value, 1) + " ns/item = " + fixed(measured) + "x reference",
          "<= " + fixed(ratio.get<double>() * tolerance) + "x (baseline " + fixed(ratio.get<double>()) + " x " +
              fixed(tolerance, 1) + ")",
          measured <= ratio.get<double>() * tolerance);
    }
    for (const auto& [name, limit] : thresholds_.at("complexity").items()) scaling(runs, name, limit);
    if (thresholds_.contains("targets")) {
      for (const auto& target : thresholds_.at("targets")) absolute(ns_per_item, counter, target);
    }
    movement(runs);
    contention(runs);
    host(ns_per_item, counter);
  }

  const std::vector<Check>& checks() const { return checks_; }
  const json& thresholds() const { return thresholds_; }
  // The host's readings; empty when the thresholds name none.
  const std::vector<HostProbe>& host_probes() const { return host_; }

 private:
  void add(std::string name, std::string measured, std::string threshold, bool passed) {
    checks_.push_back({std::move(name), std::move(measured), std::move(threshold), passed});
  }
  void timed(std::string name, std::string measured, std::string threshold, bool passed) {
    checks_.push_back({std::move(name), std::move(measured), std::move(threshold), passed, true});
  }

  // The host's speed (thresholds "host": a list of readings, each a
  // benchmark of no manager code, or a paired benchmark's baseline
  // `counter`, with its usual time per item on this machine class). A
  // reading named and not found is a failed check: without it a timed
  // failure could not be read.
  template <class Lookup, class CounterLookup>
  void host(const Lookup& ns_per_item, const CounterLookup& counter) {
    if (!thresholds_.contains("host")) return;
    const json& probes = thresholds_.at("host");
    const auto malformed = [&] {
      return InvalidInput(R"(thresholds "host" must be a non-empty list of {"benchmark": NAME, "usual_max_ns": )"
                          R"(NS above 0} entries, each with an optional "counter": NAME; got )" + probes.dump());
    };
    if (!probes.is_array() || probes.empty()) throw malformed();
    for (const json& probe : probes) {
      if (!probe.is_object() || !probe.contains("benchmark") || !probe.at("benchmark").is_string() ||
          !probe.contains("usual_max_ns") || !probe.at("usual_max_ns").is_number() ||
          !(probe.at("usual_max_ns").get<double>() > 0) ||
          (probe.contains("counter") && !probe.at("counter").is_string())) {
        throw malformed();
      }
    }
    for (const json& probe : probes) {
      HostProbe reading{probe.at("benchmark").get<std::string>(), probe.value("counter", std::string()), 0,
                        probe.at("usual_max_ns").get<double>()};
      const auto value = reading.counter.empty() ? ns_per_item(reading.benchmark)
                                                 : counter(reading.benchmark, reading.counter);
      if (!value) {
        add("host " + reading.name(), "missing", "present (the host's speed in this run)", false);
        continue;
      }
      reading.measured_ns = *value;
      host_.push_back(std::move(reading));
    }
  }

  // One measurement per benchmark run name. With --benchmark_repetitions the
  // median of the repetitions stands for the run (the targets are medians);
  // without, the single run does. Aggregates other than the median (mean,
  // stddev, the complexity fit) are not measurements and are left out.
  static std::map<std::string, json> measurements(const json& report) {
    std::map<std::string, json> runs;
    std::map<std::string, json> medians;
    for (const auto& run : report.at("benchmarks")) {
      if (stopped_with_error(run)) continue;  // measured nothing (errors())
      if (run.value("run_type", "iteration") != "aggregate") {
        runs[run.at("name").get<std::string>()] = run;
      } else if (run.value("aggregate_name", "") == "median") {
        medians[run.value("run_name", run.at("name").get<std::string>())] = run;
      }
    }
    for (auto& [name, median] : medians) runs[name] = std::move(median);
    return runs;
  }

  // A benchmark that stopped with an error (SkipWithError: a workload check
  // failed, or a model and the manager disagreed) measured nothing. Its rows
  // carry a time of 0 and no rate, which a ratio or a fit would read as fast,
  // and a benchmark no threshold names would not be read at all: each one
  // fails the gate by name with its message, and measurements() leaves its
  // rows out, so every check that needs it finds it missing.
  static bool stopped_with_error(const json& run) { return run.value("error_occurred", false); }

  void errors(const json& report) {
    std::map<std::string, std::string> failed;  // run name -> message, once per repeated run
    for (const auto& run : report.at("benchmarks")) {
      if (!stopped_with_error(run)) continue;
      failed.emplace(run.value("run_name", run.at("name").get<std::string>()), run.value("error_message", ""));
    }
    for (const auto& [name, message] : failed) add("benchmark " + name, "error: " + message, "no error", false);
    add("benchmark errors", failed.empty() ? "none" : std::to_string(failed.size()) + " benchmark(s) stopped with an error",
        "none", failed.empty());
  }

  // Fits time = c * N^k over the benchmark's sizes; linear means k <= max_exponent.
  void scaling(const std::map<std::string, json>& runs, const std::string& name, const json& limit) {
    std::vector<std::pair<double, double>> points;
    for (const auto& [run_name, run] : runs) {
      if (run_name.rfind(name + "/", 0) != 0) continue;  // `runs` holds measurements only
      const double n = std::stod(run_name.substr(name.size() + 1));
      // A benchmark that measures wall time (work on other threads) is fitted on it.
      const bool wall = run_name.find("/real_time") != std::string::npos;
      points.emplace_back(std::log(n), std::log(run.at(wall ? "real_time" : "cpu_time").get<double>()));
    }
    if (points.size() < 3) {
      add("complexity " + name, "missing", "at least 3 sizes", false);
      return;
    }
    double mean_x = 0, mean_y = 0;
    for (const auto& [x, y] : points) {
      mean_x += x / static_cast<double>(points.size());
      mean_y += y / static_cast<double>(points.size());
    }
    double numerator = 0, denominator = 0;
    for (const auto& [x, y] : points) {
      numerator += (x - mean_x) * (y - mean_y);
      denominator += (x - mean_x) * (x - mean_x);
    }
    const double exponent = numerator / denominator;
    const double maximum = limit.value("max_exponent", 1.15);
    timed("complexity " + name, "O(N^" + fixed(exponent) + ")",
        limit.value("class", std::string("N")) + " (exponent <= " + fixed(maximum) + ")", exponent <= maximum);
  }

  // An absolute per-item target on this machine class: `max_ns` for
  // `benchmark`, counted above `above` (times `above_share`, the part of each
  // item that is that operation) when given, or taken as the benchmark's
  // counter `above_counter` (the operation above a baseline it timed in the
  // same iterations); or, failing that, within `within_ns` of
  // `or_within_ns_of`, or with its counter `or_within_counter` at most
  // `within_ns`. A target with `ratio_to` instead bounds the benchmark's
  // time per item by `max_ratio` times that benchmark's, and one with
  // `ratio_counter` bounds that counter (a ratio to a baseline timed in the
  // same iterations) by `max_ratio`.
  template <class Lookup, class CounterLookup>
  void absolute(const Lookup& ns_per_item, const CounterLookup& counter, const json& target) {
    const std::string name = target.at("benchmark").get<std::string>();
    const auto value = ns_per_item(name);
    if (!value) {
      add("target " + name, "missing", "present", false);
      return;
    }
    if (target.contains("ratio_counter")) {
      const std::string ratio_name = target.at("ratio_counter").get<std::string>();
      const double max_ratio = target.at("max_ratio").get<double>();
      const auto ratio = counter(name, ratio_name);
      if (!ratio) {
        add("target " + name, "missing counter " + ratio_name, "present", false);
        return;
      }
      timed("target " + name, fixed(*value, 1) + " ns/item, " + ratio_name + " " + fixed(*ratio, 3),
          ratio_name + " <= " + fixed(max_ratio, 3), *ratio <= max_ratio);
      return;
    }
    if (target.contains("ratio_to")) {
      const std::string base = target.at("ratio_to").get<std::string>();
      const double max_ratio = target.at("max_ratio").get<double>();
      const auto base_ns = ns_per_item(base);
      if (!base_ns) {
        add("target " + name, "missing " + base, "present", false);
        return;
      }
      const double ratio = *value / *base_ns;
      timed("target " + name, fixed(*value, 1) + " ns/item = " + fixed(ratio, 3) + "x " + base,
          "<= " + fixed(max_ratio, 3) + "x " + base, ratio <= max_ratio);
      return;
    }
    const double max_ns = target.at("max_ns").get<double>();
    double measured = *value;
    std::string what = fixed(*value, 1) + " ns/item";
    std::string threshold = "<= " + fixed(max_ns, 0) + " ns";
    if (target.contains("above")) {
      const std::string base = target.at("above").get<std::string>();
      const double share = target.value("above_share", 1.0);
      const auto base_ns = ns_per_item(base);
      if (!base_ns) {
        add("target " + name, "missing " + base, "present", false);
        return;
      }
      measured = *value - share * *base_ns;
      what += ", " + fixed(measured, 1) + " ns above " + (share == 1.0 ? "" : fixed(share) + " x ") + base;
      threshold += " above " + base;
    } else if (target.contains("above_counter")) {
      const std::string above = target.at("above_counter").get<std::string>();
      const auto above_ns = counter(name, above);
      if (!above_ns) {
        add("target " + name, "missing counter " + above, "present", false);
        return;
      }
      measured = *above_ns;
      what += ", " + above + " " + fixed(measured, 1);
      threshold = above + " " + threshold;
    }
    bool passed = measured <= max_ns;
    if (target.contains("or_within_ns_of")) {
      const std::string other = target.at("or_within_ns_of").get<std::string>();
      const double within = target.at("within_ns").get<double>();
      if (const auto other_ns = ns_per_item(other)) {
        what += ", " + fixed(*value - *other_ns, 1) + " ns above " + other;
        passed = passed || *value - *other_ns <= within;
      }
      threshold += ", or within " + fixed(within, 0) + " ns of " + other;
    } else if (target.contains("or_within_counter")) {
      const std::string within_counter = target.at("or_within_counter").get<std::string>();
      const double within = target.at("within_ns").get<double>();
      if (const auto within_ns = counter(name, within_counter)) {
        what += ", " + within_counter + " " + fixed(*within_ns, 1);
        passed = passed || *within_ns <= within;
      } else {
        what += ", counter " + within_counter + " missing";
      }
      threshold += ", or " + within_counter + " <= " + fixed(within, 0) + " ns";
    }
    timed("target " + name, what, threshold, passed);
  }

  void movement(const std::map<std::string, json>& runs) {
    const json& limits = thresholds_.at("data_movement");
    const double max_ratio = limits.value("max_ratio", 1.1);
    const long min_bytes = limits.value("min_bytes", 16L << 20);
    bool judged = false;
    for (const auto& [name, run] : runs) {
      if (name.rfind("BM_ManagerMove/", 0) != 0) continue;
      const std::string size = name.substr(15, name.find('/', 15) - 15);
      if (std::stol(size) < min_bytes) continue;
      judged = true;
      const std::string check = "data movement " + mebibytes(std::stol(size));
      const auto raw = runs.find("BM_RawCopy/" + size + "/real_time");
      if (raw == runs.end()) {
        add(check, "missing raw copy", "present", false);
        continue;
      }
      const double ratio = run.at("real_time").get<double>() / raw->second.at("real_time").get<double>();
      timed(check, fixed(ratio) + "x raw copy", "<= " + fixed(max_ratio) + "x", ratio <= max_ratio);
    }
    // No manager move of at least min_bytes measured: nothing was judged.
    if (!judged) add("data movement", "missing", "BM_ManagerMove of at least " + mebibytes(min_bytes), false);
  }

  void contention(const std::map<std::string, json>& runs) {
    const double minimum = thresholds_.at("contention").value("min_efficiency", 0.8);
    const auto rate = [&](int threads) -> std::optional<double> {
      const auto found = runs.find("BM_Contention/real_time/threads:" + std::to_string(threads));
      if (found == runs.end()) return std::nullopt;
      return found->second.at("items_per_second").get<double>();
    };
    const auto one = rate(1), four = rate(4);
    if (!one || !four) {
      add("contention", "missing", "1 and 4 thread runs", false);
      return;
    }
    timed("contention 4 threads", fixed(*four / *one) + "x one thread's throughput", ">= " + fixed(minimum) + "x",
        *four / *one >= minimum);
  }

  json thresholds_;
  std::vector<Check> checks_;
  std::vector<HostProbe> host_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Release gate over the invariant suites, the scenario replay and the benchmarks"};
  std::string build_dir = "build", thresholds_path, tests_path, replay_path, bench_path, verdict_path;
  bool update = false;
  app.add_option("--build-dir", build_dir, "Build directory holding the results (default: build)");
  app.add_option("--thresholds", thresholds_path,
                 "Thresholds file (default: BUILD/bench/thresholds.json, else the installed copy)");
  app.add_option("--tests", tests_path, "meson test log (default: BUILD/meson-logs/testlog.json)");
  app.add_option("--replay", replay_path, "residency-replay --json report (default: BUILD/replay.json)");
  app.add_option("--bench", bench_path, "Google Benchmark JSON (default: BUILD/bench.json)");
  app.add_option("--json", verdict_path, "Write the verdict as JSON (default: BUILD/gate-verdict.json)");
  std::string asan_path, tsan_path, fuzz_path, coverage_path, swarm_path;
  app.add_option("--swarm", swarm_path, "residency-swarm --json report (default: BUILD/swarm.json)");
  app.add_option("--asan-tests", asan_path, "meson test log of tools/sanitize.sh address (default: build-asan/...)");
  app.add_option("--tsan-tests", tsan_path, "meson test log of tools/sanitize.sh thread (default: build-tsan/...)");
  app.add_option("--fuzz-tests", fuzz_path, "meson test log of tools/fuzz.sh (default: build-fuzz/...)");
  app.add_option("--coverage", coverage_path,
                 "gcovr JSON summary of tools/coverage.sh (default: build-cov/coverage.json)");
  app.add_flag("--update-baseline", update,
               "Record the measured speed ratios as the new baseline in the --thresholds file");
  app.set_version_flag("--version", "residency-gate " FHELIUM_RESIDENCY_VERSION);
  app.footer("Exit status: 0 pass, 1 a check failed (\"inconclusive\" in the verdict when only timed checks failed "
             "on a host that ran slow), 2 usage error or unreadable input.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error) == 0 ? 0 : 2;
  }
  if (update && thresholds_path.empty()) {
    std::cerr << "residency-gate: --update-baseline needs --thresholds FILE (the committed bench/thresholds.json)\n";
    return 2;
  }
  if (tests_path.empty()) tests_path = build_dir + "/meson-logs/testlog.json";
  if (replay_path.empty()) replay_path = build_dir + "/replay.json";
  if (bench_path.empty()) bench_path = build_dir + "/bench.json";
  if (verdict_path.empty()) verdict_path = build_dir + "/gate-verdict.json";
  if (swarm_path.empty()) swarm_path = build_dir + "/swarm.json";
  // Sanitizer and fuzz builds sit beside the main build directory.
  const auto sibling = [&](const char* name) {
    return (std::filesystem::path(build_dir).parent_path() / name / "meson-logs" / "testlog.json").string();
  };
  if (asan_path.empty()) asan_path = sibling("build-asan");
  if (tsan_path.empty()) tsan_path = sibling("build-tsan");
  if (fuzz_path.empty()) fuzz_path = sibling("build-fuzz");
  if (coverage_path.empty()) {
    coverage_path = (std::filesystem::path(build_dir).parent_path() / "build-cov" / "coverage.json").string();
  }

  try {
    thresholds_path = find_thresholds(thresholds_path, build_dir);
    Gate gate([&] {
      try {
        return read_json(thresholds_path);
      } catch (const std::exception& error) {
        throw InvalidInput("thresholds " + thresholds_path + ": " + error.what());
      }
    }());
    const auto guarded = [&](const std::string& what, const auto& step) {
      try {
        step();
      } catch (const std::exception& error) {
        std::cerr << "residency-gate: " << what << ": " << error.what() << '\n';
        return false;
      }
      return true;
    };
    bool inputs = guarded("test log", [&] { gate.tests(tests_path); });
    inputs = guarded("replay report", [&] { gate.replay(replay_path); }) && inputs;
    inputs = guarded("benchmarks", [&] { gate.benchmarks(bench_path, update); }) && inputs;
    inputs = guarded("ASan/UBSan results (tools/sanitize.sh address)", [&] { gate.sanitized("address", asan_path); }) &&
             inputs;
    inputs = guarded("TSan results (tools/sanitize.sh thread)", [&] { gate.sanitized("thread", tsan_path); }) && inputs;
    inputs = guarded("fuzz results (tools/fuzz.sh)", [&] { gate.sanitized("fuzz", fuzz_path); }) && inputs;
    inputs = guarded("coverage (tools/coverage.sh)", [&] { gate.coverage(coverage_path); }) && inputs;
    inputs = guarded("swarm report (residency-swarm --json)", [&] { gate.swarm(swarm_path); }) && inputs;
    if (!inputs) {
      std::cerr << "residency-gate: some results could not be read; no verdict (run tools/release-gate.sh)\n";
      return 2;
    }

    std::size_t width = 5;
    for (const auto& check : gate.checks()) width = std::max(width, check.name.size());
    std::cout << std::left << std::setw(static_cast<int>(width)) << "check" << "  verdict  measured  |  threshold\n";
    json verdict = {{"checks", json::array()}};
    bool passed = true;
    for (const auto& check : gate.checks()) {
      std::cout << std::left << std::setw(static_cast<int>(width)) << check.name << "  "
                << (check.passed ? "PASS   " : "FAIL   ") << "  " << check.measured << "  |  " << check.threshold
                << '\n';
      verdict["checks"].push_back({{"name", check.name},
                                   {"passed", check.passed},
                                   {"measured", check.measured},
                                   {"threshold", check.threshold}});
      passed = passed && check.passed;
    }
    verdict["passed"] = passed;
    // A run whose every failure is timed, on a host that ran slow, shows no
    // regression either way: its verdict still fails, marked inconclusive. A
    // pass is a pass on any host.
    bool inconclusive = false;
    if (!gate.host_probes().empty()) {
      std::size_t timed_failures = 0;
      bool only_timed = true;
      for (const auto& check : gate.checks()) {
        if (check.passed) continue;
        if (check.timed) ++timed_failures;
        only_timed = only_timed && check.timed;
      }
      bool slow = false;
      verdict["host"] = json::array();
      std::cout << '\n';
      for (const auto& probe : gate.host_probes()) {
        slow = slow || probe.slow();
        json reading = {{"benchmark", probe.benchmark},
                        {"measured_ns", probe.measured_ns},
                        {"usual_max_ns", probe.usual_max_ns},
                        {"slow", probe.slow()}};
        if (!probe.counter.empty()) reading["counter"] = probe.counter;
        verdict["host"].push_back(std::move(reading));
        std::cout << "host: " << probe.name() << " " << fixed(probe.measured_ns, 1) << " ns, "
                  << (probe.slow() ? "above" : "within") << " its usual <= " << fixed(probe.usual_max_ns, 0)
                  << " ns on this machine class\n";
      }
      inconclusive = !passed && only_timed && slow;
      if (inconclusive) {
        std::cout << "host: it ran slow, so the " << timed_failures
                  << " timed check(s) that failed show no regression either way; only a run of the benchmarks "
                     "on a host at its usual speed can judge them\n";
      } else if (slow && !passed) {
        std::cout << "host: it ran slow, but a check that no slow host explains failed too\n";
      }
    }
    verdict["inconclusive"] = inconclusive;
    std::ofstream(verdict_path) << verdict.dump(2) << '\n';
    if (update) {
      std::ofstream(thresholds_path) << gate.thresholds().dump(2) << '\n';
      std::cout << "\nbaseline ratios written to " << thresholds_path << '\n';
    }
    std::cout << "\nresidency-gate: " << (passed ? "PASS" : inconclusive ? "FAIL (inconclusive: the host ran slow)" : "FAIL")
              << " (" << gate.checks().size()
              << " checks; verdict in " << verdict_path << ")\n";
    return passed ? 0 : 1;
  } catch (const InvalidInput& error) {
    std::cerr << "residency-gate: " << error.what() << '\n';
    return 2;
  } catch (const std::exception& error) {
    std::cerr << "residency-gate: " << error.what() << '\n';
    return 2;
  }
}
