// SimulatedRuntime: pinned host and N CUDA devices modelled on the CPU.
//
// Data lives in ordinary CPU tensors; the runtime remembers which simulated
// location each storage it allocated occupies, and forgets it when the
// storage is freed. Per-location capacities make allocation run out the way a
// real allocator does (c10::OutOfMemoryError). Allocator statistics are
// modelled: allocated bytes are the live simulated storages of a device,
// reserved bytes their high-water mark (a caching allocator keeps memory).
//
// Streams and events run on a virtual clock. Work enqueued on a stream
// completes after its modelled duration; an event completes when its stream
// reaches it; time moves only through advance(), complete() and waits
// (synchronizing jumps the clock to the completion point, as a real wait
// takes time). Waiting for work that can never complete throws instead of
// hanging. Everything is deterministic: no wall clock, no randomness.
//
// Thread-safe: all methods may be called concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "fhelium/residency/runtime.hpp"

namespace at {
class Tensor;
}

namespace fhelium::harness {

using residency::ResidencyLocation;

struct SimulatedRuntimeOptions {
  // Number of simulated CUDA devices (cuda:0 .. cuda:N-1), at most 128.
  int cuda_devices = 2;
  // Allocation capacity per location (pinned-host or cuda:N); absent = unlimited.
  std::map<ResidencyLocation, std::int64_t> capacity_bytes;
  // Whether pinned-host materialization is possible.
  bool can_pin = true;
  // Modelled copy cost onto a CUDA device, in virtual nanoseconds per MiB; 0 = instant.
  std::int64_t copy_ns_per_mib = 0;
  // Virtual time at construction: by default a fixed, positive Unix-like
  // epoch (2023-11-14T22:13:20Z), so snapshot and report timestamps look like
  // the reference's time_ns() values while staying deterministic.
  static constexpr std::int64_t default_start_ns = 1'700'000'000'000'000'000;
  std::int64_t start_ns = default_start_ns;
  // Keep a log of copies, stream work and recorded events (activity()), for
  // timelines. Off by default: the log grows with every copy.
  bool record_activity = false;
};

// One thing the runtime did on virtual time.
struct RuntimeActivity {
  enum class Kind { copy, work, event };
  Kind kind = Kind::work;
  int device = -1;             // the stream's device; -1 for a host copy, which uses no stream
  std::int64_t stream_id = 0;  // 0 is the device's default stream
  ResidencyLocation destination;  // copies: where to
  std::int64_t bytes = 0;         // copies: logical bytes copied
  std::int64_t start_ns = 0;  // events: when recorded
  // When it ends (events: when they complete); SimulatedRuntime::never while
  // stalled, start_ns for instant copies. complete() cuts work and events
  // short at the time it is called.
  std::int64_t end_ns = 0;
};

class SimulatedRuntime final : public residency::DeviceRuntime {
 public:
  static constexpr std::int64_t never = std::numeric_limits<std::int64_t>::max();

  explicit SimulatedRuntime(SimulatedRuntimeOptions options = {});
  ~SimulatedRuntime() override;

  // Stream `id` on simulated device `device` (id 0 is the default stream).
  // Throws std::invalid_argument for a device the runtime does not have.
  c10::Stream stream(int device, std::int64_t id = 0) const;

  // Enqueues consumer work of `duration_ns` (or `never`) on `stream`.
  void enqueue(const c10::Stream& stream, std::int64_t duration_ns);
  // Moves virtual time forward by `duration_ns` (non-negative).
  void advance(std::int64_t duration_ns);
  // Finishes all work enqueued on `stream` so far, at the current time.
  void complete(const c10::Stream& stream);
  // Virtual time at which all work enqueued on `stream` completes (`never` if stalled).
  std::int64_t stream_tail_ns(const c10::Stream& stream) const;

  // Live simulated bytes at a pinned or CUDA location.
  std::int64_t live_bytes(const ResidencyLocation& location) const;
  // Number of events recorded so far.
  std::int64_t events_recorded() const;
  // Calls the simulated device refused so far because it could not do them:
  // a copy past an allocator capacity or to pinned memory configured away,
  // a wait on work that never completes.
  std::int64_t device_refusals() const;
  // Everything logged so far, in the order it happened (empty unless
  // record_activity is set).
  std::vector<RuntimeActivity> activity() const;

 private:
  struct Registry;
  struct Clock;

  std::string do_name() const override;
  int do_cuda_device_count() const override;
  bool do_can_pin() const override;
  residency::ResidentValue do_copy_to(const residency::ResidentValue& value, const ResidencyLocation& destination,
                                      const std::optional<c10::Stream>& stream) override;
  std::optional<ResidencyLocation> do_locate(const residency::ResidentValue& value) const override;
  std::shared_ptr<residency::CompletionEvent> do_record_event(const c10::Stream& stream) override;
  bool do_query_event(const residency::CompletionEvent& event) override;
  void do_synchronize_event(const residency::CompletionEvent& event) override;
  void do_synchronize_stream(const c10::Stream& stream) override;
  std::optional<residency::AllocatorStats> do_allocator_stats(const c10::Device& device) override;
  std::int64_t do_now_ns() override;

  // Enqueues `duration_ns` of work on `stream`, logged as `activity`; the clock lock is held.
  void enqueue_locked(const c10::Stream& stream, std::int64_t duration_ns, RuntimeActivity activity);
  void log_locked(RuntimeActivity activity);

  at::Tensor allocate_copy(const at::Tensor& tensor, const ResidencyLocation& destination);
  void check_simulated_stream(const c10::Stream& stream) const;

  const SimulatedRuntimeOptions options_;
  std::shared_ptr<Registry> registry_;
  std::unique_ptr<Clock> clock_;
  std::atomic<std::int64_t> device_refusals_{0};
};

}  // namespace fhelium::harness
