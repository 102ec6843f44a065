// The DeviceRuntime contract: what every runtime behind the manager's device
// seam must do, written once and run against every runtime stack (simulated,
// fault-injecting over simulated, the benchmark's free-copy runtime, the real
// TorchRuntime on host and, where the build and machine have it, on CUDA).
//
// It depends only on lib and libtorch (no YAML, no test framework), so the
// same checks run in `meson test` and in the self-contained GPU check.
// Not thread-safe: run one subject at a time.
#pragma once

#include <c10/core/Stream.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "fhelium/residency/runtime.hpp"

namespace fhelium::contract {

// A runtime under test and how to drive what the seam itself cannot express.
struct RuntimeSubject {
  std::string name;
  std::shared_ptr<residency::DeviceRuntime> runtime;
  // A stream of the runtime's own kind: id `id` on CUDA device `device`.
  // Needed when the runtime has CUDA devices.
  std::function<c10::Stream(int device, int id)> stream;
  // Enqueues consumer work on a stream that keeps it busy until `release`
  // (virtual time: `ns` ns; real devices: long enough to observe). Empty when
  // the runtime cannot model work; the ordering checks are then skipped.
  std::function<void(const c10::Stream& stream, std::int64_t ns)> enqueue;
  // Lets enqueued work finish: advances virtual time by `ns`, or waits on a
  // real device. Empty with `enqueue`.
  std::function<void(std::int64_t ns)> release;
  // Whether copies carry the bytes (false for bookkeeping-only runtimes).
  bool copies_data = true;
  // Whether allocator_stats() is documented to be present on its CUDA devices.
  bool allocator_stats_on_cuda = false;
  // Events complete immediately (no modelled or real asynchrony).
  bool events_complete_at_once = false;
};

struct ContractCheck {
  std::string subject;
  std::string check;
  enum class Verdict { pass, fail, skip } verdict = Verdict::pass;
  std::string detail;  // why it failed or was skipped
};

// Runs every contract check against `subject`.
std::vector<ContractCheck> run_contract(const RuntimeSubject& subject);

// A table of results; returns the number of failures.
std::size_t print_contract(std::ostream& out, const std::vector<ContractCheck>& checks);

}  // namespace fhelium::contract
