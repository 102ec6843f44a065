// residency-ab: compares two builds of the library in one process. Each
// build is a module (ab_rounds.cpp) holding its own copy of the library; the
// driver loads both and runs every workload in rounds, A and B back to back,
// the order alternating from round to round. Both builds therefore meet the
// same machine state, heap and caches, and the per-round differences B - A
// carry almost none of the host's drift, which between two separate
// benchmark runs is tens of nanoseconds per operation on a shared machine.
//
// For each workload it prints the median ns per operation of A and of B, the
// median of the paired differences B - A, a distribution-free 95% interval
// for that median (sign-test ranks, normal approximation), and a verdict.
// The verdict needs the interval to clear a floor, not just 0: the interval
// covers the rounds' noise, not what sets two builds apart beyond their code
// (below), and a build of one revision compared with a build of the same
// revision, four copies each, put ensure 18 ns (1.7%) apart with the
// interval [-30.6, -8.4], the bare load 1.0%, release 1.3%, explain 1.1%.
// So a difference is called only when its whole interval lies beyond
// --floor percent of A's median (default 2).
//
// Two byte-identical copies of one module differ by themselves, by where
// their code lands in memory, which changes from process to process: in
// four runs of one pair of copies, one put ensure 36 ns of 1100 slower
// (interval [29, 54]) and the others within 6. So each build runs from
// several copies of its module (--copies, default 4), each pair of rounds
// from the next, and the comparison averages over as many placements per
// build: four more runs of that pair, with four copies each, gave -6.5 to
// 4.0 ns, no difference shown. And glibc does not hand freed memory
// back to the system during the run (--malloc-defaults keeps its
// thresholds): every round makes and frees a manager, and the page faults
// of memory handed back and taken again cost whatever the host is doing
// (execute rounds ran at 1900 instead of 650 ns per action, with intervals
// of microseconds).
//
// Usage: residency-ab [--rounds N] [--workloads LIST] [--copies K] [--floor PERCENT] [--malloc-defaults]
//                     [--json FILE] MODULE_A MODULE_B
// tools/ab-builds.sh builds the modules of two git revisions and runs this.
#include <dlfcn.h>
#include <malloc.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "ab_interface.hpp"

namespace {

struct Module {
  std::string path;
  void* handle = nullptr;
  FheliumAbRound round = nullptr;
  std::vector<std::string> workloads;
};

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> parts;
  std::stringstream stream(list);
  for (std::string part; std::getline(stream, part, ',');) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

template <class Function>
Function symbol(const Module& module, const char* name) {
  void* found = dlsym(module.handle, name);
  if (found == nullptr) {
    throw std::runtime_error(module.path + ": not a residency-ab module (no " + name + ")");
  }
  return reinterpret_cast<Function>(found);
}

// Each module in a namespace of its own (RTLD_LOCAL): its library copy binds
// to itself, never to the other module's.
Module load(const std::string& path) {
  Module module;
  module.path = path;
  // dlopen searches the library path for a name without a slash; a module
  // named on the command line is a file.
  const std::string file = std::filesystem::absolute(path).string();
  module.handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (module.handle == nullptr) throw std::runtime_error("cannot load " + path + ": " + dlerror());
  const int version = symbol<FheliumAbInterface>(module, "fhelium_ab_interface")();
  if (version != fhelium_ab_interface_version) {
    throw std::runtime_error(path + ": module interface version " + std::to_string(version) + ", this driver reads " +
                             std::to_string(fhelium_ab_interface_version) + "; rebuild it from this tree's bench/");
  }
  module.round = symbol<FheliumAbRound>(module, "fhelium_ab_round");
  module.workloads = split(symbol<FheliumAbWorkloads>(module, "fhelium_ab_workloads")());
  return module;
}

// `first`, loaded, and `count` - 1 copies of its file in `directory`,
// loaded too.
std::vector<Module> with_copies(Module first, int count, const std::filesystem::path& directory,
                                const std::string& tag) {
  const std::string path = first.path;
  std::vector<Module> copies{std::move(first)};
  for (int copy = 1; copy < count; ++copy) {
    const std::filesystem::path target = directory / (tag + "-" + std::to_string(copy) + ".so");
    std::error_code error;
    std::filesystem::copy_file(path, target, error);
    if (error) throw std::runtime_error("cannot copy " + path + " to " + target.string() + ": " + error.message());
    copies.push_back(load(target.string()));
    copies.back().path = path + " (copy " + std::to_string(copy) + ")";
  }
  return copies;
}

double run_round(const Module& module, const std::string& workload) {
  char error[512] = {};
  const double ns = module.round(workload.c_str(), error, sizeof error);
  if (!(ns >= 0)) throw std::runtime_error(module.path + ": workload '" + workload + "': " + error);
  return ns;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

// The ranks of a distribution-free 95% interval for the median of `count`
// values (the sign test's, normal approximation), 0-based.
std::pair<std::size_t, std::size_t> interval_ranks(std::size_t count) {
  const double half = count / 2.0, spread = 0.98 * std::sqrt(static_cast<double>(count));
  const double low = std::floor(half - spread), high = std::ceil(half + spread);
  return {low < 0 ? 0 : static_cast<std::size_t>(low),
          std::min(count - 1, static_cast<std::size_t>(high))};
}

struct Result {
  std::string workload;
  std::vector<double> a, b, differences;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Compares two builds of the residency library (residency-ab modules) in alternating rounds"};
  int rounds = 100;
  std::string workload_list = "drop,release,ensure,load,execute";
  std::string json_path;
  std::string module_a, module_b;
  app.add_option("--rounds", rounds, "rounds per workload and build (at least 6)")->check(CLI::Range(6, 1000000));
  app.add_option("--workloads", workload_list, "comma-separated workloads (both modules list theirs in errors)");
  int copies = 4;
  app.add_option("--copies", copies, "copies of each module, loaded at once and used in turn (at least 1)")
      ->check(CLI::Range(1, 64));
  double floor_percent = 2.0;
  app.add_option("--floor", floor_percent,
                 "percent of A's median the whole interval must clear for a verdict of faster or slower")
      ->check(CLI::Range(0.0, 100.0));
  bool malloc_defaults = false;
  app.add_flag("--malloc-defaults", malloc_defaults,
               "keep glibc's trim and mmap thresholds (freed memory goes back to the system between rounds)");
  app.add_option("--json", json_path, "also write the rounds and results to this file");
  app.add_option("module_a", module_a, "the module of build A")->required();
  app.add_option("module_b", module_b, "the module of build B")->required();
  CLI11_PARSE(app, argc, argv);

  if (!malloc_defaults) {
    // Nothing trimmed from the heap's top, nothing mapped apart: memory a
    // round frees stays for the next.
    mallopt(M_TRIM_THRESHOLD, INT_MAX);
    mallopt(M_MMAP_THRESHOLD, INT_MAX);
  }
  std::filesystem::path directory;
  try {
    std::string pattern = (std::filesystem::temp_directory_path() / "residency-ab-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("cannot make a directory for the module copies");
    directory = pattern;
    Module first_a = load(module_a);
    Module first_b = load(module_b);
    if (first_a.handle == first_b.handle) {
      throw std::runtime_error(module_a + " and " + module_b +
                               " are the same file, which loads once; copy it for a comparison of a build with itself");
    }
    const std::vector<Module> copies_a = with_copies(std::move(first_a), copies, directory, "a");
    const std::vector<Module> copies_b = with_copies(std::move(first_b), copies, directory, "b");
    const Module& a = copies_a.front();
    const Module& b = copies_b.front();
    const std::vector<std::string> workloads = split(workload_list);
    if (workloads.empty()) throw std::runtime_error("--workloads names no workload");
    for (const auto& workload : workloads) {
      for (const Module* module : {&a, &b}) {
        if (std::find(module->workloads.begin(), module->workloads.end(), workload) == module->workloads.end()) {
          std::string known;
          for (const auto& name : module->workloads) known += (known.empty() ? "" : ", ") + name;
          throw std::runtime_error(module->path + " has no workload '" + workload + "' (it has: " + known + ")");
        }
      }
    }

    std::vector<Result> results;
    for (const auto& workload : workloads) results.push_back(Result{workload, {}, {}, {}});
    // One round of each copy first, not counted: each copy's first use
    // loads code and fills its allocator.
    for (auto& result : results) {
      for (int copy = 0; copy < copies; ++copy) {
        run_round(copies_a[copy], result.workload);
        run_round(copies_b[copy], result.workload);
      }
    }
    for (int round = 0; round < rounds; ++round) {
      // Each pair of rounds on the next copies, so that every copy runs
      // first and second alike.
      const std::size_t copy = static_cast<std::size_t>(round / 2 % copies);
      for (auto& result : results) {
        double a_ns = 0, b_ns = 0;
        if (round % 2 == 0) {
          a_ns = run_round(copies_a[copy], result.workload);
          b_ns = run_round(copies_b[copy], result.workload);
        } else {
          b_ns = run_round(copies_b[copy], result.workload);
          a_ns = run_round(copies_a[copy], result.workload);
        }
        result.a.push_back(a_ns);
        result.b.push_back(b_ns);
        result.differences.push_back(b_ns - a_ns);
      }
    }

    std::printf("A: %s\nB: %s\n%d rounds each, %d copies of each module, glibc's %s; ns per operation (medians)\n",
                module_a.c_str(), module_b.c_str(), rounds, copies,
                malloc_defaults ? "default malloc thresholds" : "heap never trimmed");
    std::printf("%-16s %10s %10s %10s %22s %8s  %s\n", "workload", "A", "B", "B - A", "95% interval of B - A",
                "floor", "verdict");
    nlohmann::json report{{"module_a", module_a},
                          {"module_b", module_b},
                          {"rounds", rounds},
                          {"copies", copies},
                          {"floor_percent", floor_percent},
                          {"malloc_defaults", malloc_defaults},
                          {"workloads", nlohmann::json::array()}};
    for (const auto& result : results) {
      std::vector<double> sorted = result.differences;
      std::sort(sorted.begin(), sorted.end());
      const auto [low, high] = interval_ranks(sorted.size());
      const double difference = median(result.differences);
      const double floor_ns = floor_percent / 100 * median(result.a);
      const char* verdict = sorted[high] < -floor_ns ? "B faster"
                            : sorted[low] > floor_ns ? "B slower"
                                                     : "no difference shown";
      char interval[64];
      std::snprintf(interval, sizeof interval, "[%.1f, %.1f]", sorted[low], sorted[high]);
      std::printf("%-16s %10.1f %10.1f %10.1f %22s %8.1f  %s\n", result.workload.c_str(), median(result.a),
                  median(result.b), difference, interval, floor_ns, verdict);
      report["workloads"].push_back({{"workload", result.workload},
                                     {"a_ns", median(result.a)},
                                     {"b_ns", median(result.b)},
                                     {"difference_ns", difference},
                                     {"interval_ns", {sorted[low], sorted[high]}},
                                     {"floor_ns", floor_ns},
                                     {"verdict", verdict},
                                     {"a_rounds_ns", result.a},
                                     {"b_rounds_ns", result.b}});
    }
    if (!json_path.empty()) {
      std::ofstream out(json_path);
      out << report.dump(2) << '\n';
      if (!out) throw std::runtime_error("cannot write " + json_path);
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "residency-ab: %s\n", error.what());
    std::error_code ignored;
    if (!directory.empty()) std::filesystem::remove_all(directory, ignored);
    return 1;
  }
  // The copies stay mapped until exit; removing their files now is safe.
  std::error_code ignored;
  std::filesystem::remove_all(directory, ignored);
  return 0;
}
