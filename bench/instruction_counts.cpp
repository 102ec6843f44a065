// Instructions per manager operation, counted by callgrind: the end-to-end
// workloads of torch_bench.cpp (default TorchRuntime at pageable host, values
// of one 4 KiB int64 tensor, sources that clone a 4 KiB template), each run a
// fixed number of times with collection switched on around the operations
// only. Unlike wall time, the counts repeat exactly for the same binary, so a
// change to the manager shows up as a number even on a noisy machine.
//
// Run it under callgrind through tools/instruction-counts.sh, which prints a
// table of instructions per operation; run directly, it only executes the
// workloads and checks, outside the counted regions, that each did what it
// is counted as (so no count is ever of a no-op). With --baselines it counts
// the baselines (bare loads and releases) of the ensure and drop workloads
// instead of the operations (see count_paired). With --profile it leaves
// collection alone, for a profile of one function through callgrind's own
// --toggle-collect.
#include <valgrind/callgrind.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fhelium/residency.hpp"
#include "torch_workload.hpp"

namespace {

using namespace fhelium::residency;

using namespace fhelium::bench::torch_workload;

bool profile = false;

// Which side of the paired workloads a run collects. An operation and its
// baseline (an ensure and a bare load, a drop and a bare release) run
// interleaved, one of each in turn, so both meet the same heap: counted
// apart, in phases of their own, each would find the free chunks the phase
// before left (a phase that follows 1000 releases spends hundreds of
// instructions per allocation searching malloc's bins), and the difference
// would be the heap's history, not the manager. One run collects the
// operations, a second run (--baselines) of the same deterministic program
// the baselines, so the two counts come from identical heap histories: the
// two runs allocate exactly alike, counting or not.
bool count_baselines = false;

// Dumps what was collected under `label` ("name operations"), which the
// script reads back, and prints the label.
void dump(const std::string& label) {
  CALLGRIND_DUMP_STATS_AT(label.c_str());
  std::printf("%s\n", label.c_str());
}

// Counts the instructions of `measured` alone and dumps them under `name`,
// with the number of operations it ran, for tools/instruction-counts.sh.
// Not collected in the baselines' run (it runs `measured` all the same).
void count(const std::string& name, std::int64_t operations, const std::function<void()>& measured) {
  const std::string label = name + " " + std::to_string(operations);
  if (profile || count_baselines) {
    measured();
    return;
  }
  CALLGRIND_ZERO_STATS;
  CALLGRIND_TOGGLE_COLLECT;
  measured();
  CALLGRIND_TOGGLE_COLLECT;
  dump(label);
}

// Exits with a message when a workload did not do what it is counted as.
void expect(bool holds, const std::string& what) {
  if (holds) return;
  std::fprintf(stderr, "instruction-counts: workload check failed: %s\n", what.c_str());
  std::exit(1);
}

// One interleaved pair workload: `operation(i)` and `baseline(i)` for each i
// in turn (alternating which goes first, as the paired benchmarks do), with
// collection on around the side being counted only.
template <class Operation, class Baseline>
void count_paired(const std::string& operation_name, const std::string& baseline_name, std::int64_t operations,
                  Operation&& operation, Baseline&& baseline) {
  const auto run = [&](bool counted, auto&& work, std::int64_t i) {
    if (counted && !profile) CALLGRIND_TOGGLE_COLLECT;
    work(i);
    if (counted && !profile) CALLGRIND_TOGGLE_COLLECT;
  };
  if (!profile) CALLGRIND_ZERO_STATS;
  for (std::int64_t i = 0; i < operations; ++i) {
    if (i % 2 == 0) {
      run(!count_baselines, operation, i);
      run(count_baselines, baseline, i);
    } else {
      run(count_baselines, baseline, i);
      run(!count_baselines, operation, i);
    }
  }
  const std::string label = (count_baselines ? baseline_name : operation_name) + " " + std::to_string(operations);
  if (!profile) dump(label);
}

void source_workloads() {
  const auto source = clone_source(template_tensor());
  {
    auto manager = fresh_manager();
    std::vector<ResidencyHandle> handles;
    handles.reserve(batch);
    count("register_source", batch, [&] {
      for (std::int64_t i = 0; i < batch; ++i) handles.push_back(manager->register_source(source_spec(), source));
    });
    expect(manager->snapshot().values.size() == static_cast<std::size_t>(batch), "register_source registers each");
    // Loads kept, as ensure keeps them; released outside the count.
    std::vector<ResidentValue> loaded;
    loaded.reserve(static_cast<std::size_t>(batch));
    count_paired(
        "ensure_from_source", "source_load", batch,
        [&](std::int64_t i) { manager->ensure(handles[static_cast<std::size_t>(i)], PAGEABLE_HOST); },
        [&](std::int64_t) { loaded.push_back(source->load()); });
    expect(used_bytes(*manager, PAGEABLE_HOST) == batch * source_spec().storage_nbytes, "each ensure loads");
    expect(loaded.size() == static_cast<std::size_t>(batch), "each baseline loads");
  }
  {
    // The values to drop and the bare ones to release, made in turn, one of
    // each, so that neither set lies next to the heap's top.
    auto manager = fresh_manager();
    std::vector<ResidencyHandle> handles;
    std::vector<ResidentValue> bare;
    handles.reserve(batch);
    bare.reserve(static_cast<std::size_t>(batch));
    for (std::int64_t i = 0; i < batch; ++i) {
      handles.push_back(manager->register_source(source_spec(), source));
      manager->ensure(handles.back(), PAGEABLE_HOST);
      bare.push_back(source->load());
    }
    count_paired(
        "drop", "tensor_release", batch,
        [&](std::int64_t i) { manager->drop(handles[static_cast<std::size_t>(i)], PAGEABLE_HOST); },
        [&](std::int64_t i) { ResidentValue released = std::move(bare[static_cast<std::size_t>(i)]); });
    expect(used_bytes(*manager, PAGEABLE_HOST) == 0, "each drop releases");
  }
}

void value_workloads() {
  {
    auto manager = fresh_manager();
    std::vector<ResidentValue> values = fresh_values(batch);
    count("adopt", batch, [&] {
      for (auto& value : values) manager->adopt(std::move(value), PAGEABLE_HOST);
    });
    expect(used_bytes(*manager, PAGEABLE_HOST) == batch * source_spec().storage_nbytes, "each adopt charges");
  }
  {
    auto manager = fresh_manager();
    const std::vector<ResidencyHandle> one{manager->adopt(fresh_values(1)[0])};
    const std::uint64_t version = manager->state_version();
    count("acquire_release", batch, [&] {
      for (std::int64_t i = 0; i < batch; ++i) manager->acquire(one, PAGEABLE_HOST).release();
    });
    expect(manager->state_version() == version + 2 * static_cast<std::uint64_t>(batch),
           "each acquire and release changes the state");
  }
  for (const std::int64_t values : {1000, 10000, 100000}) {
    auto manager = fresh_manager();
    for (auto& value : fresh_values(values)) manager->adopt(std::move(value));
    manager->snapshot();  // the first one warms the allocator
    count("snapshot/" + std::to_string(values), values, [&] { ResidencySnapshot snapshot = manager->snapshot(); });
    expect(manager->snapshot().values.size() == static_cast<std::size_t>(values), "the snapshot holds every value");
  }
}

// What the trace ring adds to a transition: the end-to-end workloads run
// with it off (fresh_manager), while a manager with default options keeps
// the last ManagerOptions().trace_capacity reports. The same no-op ensure is
// counted untraced and traced, the traced manager's ring already full
// (every push overwrites the oldest record, as in a long-lived manager):
// the difference is one record's push.
void trace_workloads() {
  const std::int64_t ring = ManagerOptions().trace_capacity;
  for (const bool traced : {false, true}) {
    auto manager = traced ? std::make_unique<ResidencyManager>() : fresh_manager();
    const ResidencyHandle handle = manager->adopt(fresh_values(1)[0], PAGEABLE_HOST);
    const auto ensure_all = [&](std::int64_t times) {
      for (std::int64_t i = 0; i < times; ++i) manager->ensure(handle, PAGEABLE_HOST);
    };
    ensure_all(ring + 1);  // fills the default ring
    count(traced ? "noop_ensure_traced" : "noop_ensure", batch, [&] { ensure_all(batch); });
    expect(manager->trace().size() == static_cast<std::size_t>(traced ? ring : 0),
           "the ring is full when traced, empty when not");
    expect(manager->ensure(handle, PAGEABLE_HOST).no_op, "the ensure changes nothing");
  }
}

void plan_workloads() {
  MixedPlan mixed;
  ResidencyManager* const manager = mixed.manager.get();
  const std::vector<ResidencyAction>& actions = mixed.actions;
  const ResidencyPlan plan{"mixed", actions};
  const ResidencyPlanExplanation explained = manager->explain(plan);
  expect(explained.feasible && explained.actions.size() == actions.size(), "the plan is feasible and explained whole");
  for (const auto& action : explained.actions) expect(!action.no_op, "no action of the plan is a no-op");
  count("explain", batch, [&] { ResidencyPlanExplanation explanation = manager->explain(plan); });
  count("execute_actions", batch, [&] { ResidencyPlanReport report = manager->execute_actions(actions, "mixed"); });
  // Half the values loaded, half dropped.
  expect(used_bytes(*manager, PAGEABLE_HOST) == batch / 2 * source_spec().storage_nbytes, "the plan ran whole");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (!mode.empty() && mode != "--profile" && mode != "--baselines") {
    std::fprintf(stderr, "usage: %s [--profile | --baselines]\n", argv[0]);
    return 2;
  }
  profile = mode == "--profile";
  count_baselines = mode == "--baselines";
  // A buffer of its own for stdout, so that its first use (in either run, at
  // a different point) allocates nothing on the heap the counts depend on.
  static char out_buffer[4096];
  std::setvbuf(stdout, out_buffer, _IOLBF, sizeof out_buffer);
  source_workloads();
  if (count_baselines) return 0;  // the other workloads have no baseline
  value_workloads();
  trace_workloads();
  plan_workloads();
  return 0;
}
