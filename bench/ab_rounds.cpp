// One round of an end-to-end workload (torch_workload.hpp: the default
// TorchRuntime at pageable host, values of one 4 KiB int64 tensor), built as
// a loadable module against one build of the library. residency-ab
// (ab_driver.cpp) loads the modules of two builds into one process and runs
// their rounds alternately, so that both builds meet the same machine state:
// the difference of two benchmark runs carries whatever the host did between
// them, which on a shared machine is tens of nanoseconds per operation.
//
// The module links its own copy of the library and exports only the
// functions below (ab_interface.hpp), so two of them load side by side.
#include <ATen/ops/arange.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ab_interface.hpp"
#include "fhelium/residency.hpp"
#include "torch_workload.hpp"

namespace {

using namespace fhelium::residency;
using namespace fhelium::bench::torch_workload;

// A workload check that failed: the round did not do what it is timed as.
struct CheckFailed {
  std::string what;
};

void expect(bool holds, const std::string& what) {
  if (!holds) throw CheckFailed{what};
}

#ifndef FHELIUM_AB_SLOWDOWN_NS
#define FHELIUM_AB_SLOWDOWN_NS 0
#endif
// A module built with FHELIUM_AB_SLOWDOWN_NS waits that long per operation
// inside each timed part (and in the untimed registrations ensure and drop
// start from): the driver's test compares it with the plain module, a
// difference the driver must find.
constexpr std::int64_t slowdown_ns = FHELIUM_AB_SLOWDOWN_NS;

// The time of `work`, and of the module's slowdown after it.
template <class Work>
double timed_ns(Work&& work) {
  return elapsed_ns([&] {
    work();
    if constexpr (slowdown_ns > 0) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(slowdown_ns * batch);
      while (std::chrono::steady_clock::now() < until) {
      }
    }
  });
}

// A batch of sources registered with `manager`, the registrations alone
// timed into `ns` when it is given (the spec and the source made before, as
// BM_TorchRegisterSource makes them).
std::vector<ResidencyHandle> registered(ResidencyManager& manager, double* ns = nullptr) {
  const auto source = clone_source(template_tensor());
  const ResidencyValueSpec spec = source_spec();
  std::vector<ResidencyHandle> handles;
  handles.reserve(static_cast<std::size_t>(batch));
  const double elapsed = timed_ns([&] {
    for (std::int64_t i = 0; i < batch; ++i) handles.push_back(manager.register_source(spec, source, PAGEABLE_HOST));
  });
  if (ns != nullptr) *ns = elapsed;
  return handles;
}

// Each round returns nanoseconds per operation of its timed part.
using Round = double (*)();

double ensure_round() {
  auto manager = fresh_manager();
  const std::vector<ResidencyHandle> handles = registered(*manager);
  const double ns = timed_ns([&] {
    for (const auto& handle : handles) manager->ensure(handle, PAGEABLE_HOST);
  });
  expect(used_bytes(*manager) == batch * source_spec().storage_nbytes, "each ensure loads");
  return ns / batch;
}

// The loads are kept, as ensure keeps them, and released untimed.
double load_round() {
  const auto source = clone_source(template_tensor());
  std::vector<ResidentValue> loaded;
  loaded.reserve(static_cast<std::size_t>(batch));
  const double ns = timed_ns([&] {
    for (std::int64_t i = 0; i < batch; ++i) loaded.push_back(source->load());
  });
  expect(loaded.size() == static_cast<std::size_t>(batch) && !loaded.back().fields().empty(), "each load loads");
  return ns / batch;
}

double drop_round() {
  auto manager = fresh_manager();
  const std::vector<ResidencyHandle> handles = registered(*manager);
  for (const auto& handle : handles) manager->ensure(handle, PAGEABLE_HOST);
  const double ns = timed_ns([&] {
    for (const auto& handle : handles) manager->drop(handle, PAGEABLE_HOST);
  });
  expect(used_bytes(*manager) == 0, "each drop releases");
  return ns / batch;
}

double release_round() {
  std::vector<ResidentValue> values = fresh_values(batch);
  const double ns = timed_ns([&] {
    for (auto& value : values) ResidentValue released = std::move(value);
  });
  expect(values.back().fields().empty(), "each value is released");
  return ns / batch;
}

double adopt_round() {
  auto manager = fresh_manager();
  std::vector<ResidentValue> values = fresh_values(batch);
  const double ns = timed_ns([&] {
    for (auto& value : values) manager->adopt(std::move(value), PAGEABLE_HOST);
  });
  expect(used_bytes(*manager) == batch * source_spec().storage_nbytes, "each adopt charges");
  return ns / batch;
}

double register_source_round() {
  auto manager = fresh_manager();
  double ns = 0;
  const std::vector<ResidencyHandle> handles = registered(*manager, &ns);
  expect(manager->snapshot().values.size() == handles.size() && handles.size() == static_cast<std::size_t>(batch),
         "each source is registered");
  return ns / batch;
}

double acquire_release_round() {
  auto manager = fresh_manager();
  const std::vector<ResidencyHandle> one{manager->adopt(fresh_values(1)[0], PAGEABLE_HOST)};
  const std::uint64_t version = manager->state_version();
  const double ns = timed_ns([&] {
    for (std::int64_t i = 0; i < batch; ++i) manager->acquire(one, PAGEABLE_HOST).release();
  });
  expect(manager->state_version() == version + 2 * static_cast<std::uint64_t>(batch),
         "each acquire and release changes the state");
  return ns / batch;
}

double snapshot_round() {
  auto manager = fresh_manager();
  for (auto& value : fresh_values(batch)) manager->adopt(std::move(value), PAGEABLE_HOST);
  manager->snapshot();  // the first one warms the allocator, as in BM_TorchSnapshot
  std::size_t seen = 0;
  const double ns = timed_ns([&] { seen = manager->snapshot().values.size(); });
  expect(seen == static_cast<std::size_t>(batch), "the snapshot holds every value");
  return ns / batch;
}

double explain_round() {
  MixedPlan plan;
  const ResidencyPlan whole{"mixed", plan.actions};
  bool feasible = false;
  const double ns = timed_ns([&] { feasible = plan.manager->explain(whole).feasible; });
  expect(feasible, "the plan is feasible");
  return ns / batch;
}

double execute_round() {
  MixedPlan plan;
  std::size_t transitions = 0;
  const double ns = timed_ns([&] {
    transitions = plan.manager->execute_actions(plan.actions, "mixed").transitions.size();
  });
  expect(transitions == static_cast<std::size_t>(batch), "every action of the plan ran");
  expect(used_bytes(*plan.manager) == batch / 2 * source_spec().storage_nbytes, "half loaded, half dropped");
  return ns / batch;
}

const std::map<std::string, Round>& rounds() {
  static const std::map<std::string, Round> all{
      {"acquire_release", acquire_release_round},
      {"adopt", adopt_round},
      {"drop", drop_round},
      {"ensure", ensure_round},
      {"execute", execute_round},
      {"explain", explain_round},
      {"load", load_round},
      {"register_source", register_source_round},
      {"release", release_round},
      {"snapshot", snapshot_round},
  };
  return all;
}

void write_error(char* error, std::size_t size, const std::string& text) {
  if (error != nullptr && size > 0) std::snprintf(error, size, "%s", text.c_str());
}

}  // namespace

extern "C" {

FHELIUM_AB_EXPORT int fhelium_ab_interface() { return fhelium_ab_interface_version; }

FHELIUM_AB_EXPORT const char* fhelium_ab_workloads() {
  static const std::string names = [] {
    std::string joined;
    for (const auto& [name, round] : rounds()) joined += (joined.empty() ? "" : ",") + name;
    return joined;
  }();
  return names.c_str();
}

FHELIUM_AB_EXPORT double fhelium_ab_round(const char* workload, char* error, std::size_t error_size) {
  const auto found = rounds().find(workload == nullptr ? "" : workload);
  if (found == rounds().end()) {
    write_error(error, error_size, std::string("unknown workload '") + (workload ? workload : "") + "'");
    return -1;
  }
  try {
    return found->second();
  } catch (const CheckFailed& failed) {
    write_error(error, error_size, "workload check failed: " + failed.what);
  } catch (const std::exception& thrown) {
    write_error(error, error_size, std::string("the round threw: ") + thrown.what());
  } catch (...) {
    write_error(error, error_size, "the round threw a non-standard exception");
  }
  return -1;
}

}  // extern "C"
