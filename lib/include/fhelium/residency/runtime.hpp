// The device-runtime seam: every contact the manager has with devices.
//
// DeviceRuntime copies values between locations (which allocates), says where
// a value physically lives and which storages it uses, records and queries
// completion events on streams, synchronizes, samples allocator statistics and
// reads the clock. Public methods are non-virtual: they check preconditions
// shared by every runtime, then call a private do_* hook (the NVI pattern), so
// decorators and simulations inherit the same argument checks.
//
// Thread-safety: a runtime may be shared by several managers and threads;
// implementations must make every public method safe to call concurrently.
// Runtime failures propagate with their concrete type (c10::OutOfMemoryError
// for exhausted allocators, c10::Error for device errors).
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fhelium/residency/location.hpp"
#include "fhelium/residency/storage_key.hpp"

namespace fhelium::residency {

class ResidentValue;

// Process-wide allocator sample of one CUDA device, in bytes.
struct AllocatorStats {
  std::int64_t allocated_bytes = 0;
  std::int64_t reserved_bytes = 0;
};

// Opaque completion marker recorded on a stream by one runtime. Only the
// runtime that recorded it (or a decorator over it) can query it.
class CompletionEvent {
 public:
  virtual ~CompletionEvent() = default;
};

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  DeviceRuntime() = default;
  DeviceRuntime(const DeviceRuntime&) = delete;
  DeviceRuntime& operator=(const DeviceRuntime&) = delete;

  // Short identifier used in diagnostics ("torch", "simulated", ...).
  std::string name() const { return do_name(); }
  // Number of CUDA devices this runtime can materialize on.
  int cuda_device_count() const { return do_cuda_device_count(); }
  // Whether pinned-host materialization is possible.
  bool can_pin() const { return do_can_pin(); }

  // Throws std::invalid_argument when `location` is a CUDA device this runtime
  // does not have. Host locations are always valid.
  void check_location(const ResidencyLocation& location) const;
  // Throws std::invalid_argument unless `stream` is a CUDA stream on the CUDA
  // device of `location`.
  void check_stream(const ResidencyLocation& location, const c10::Stream& stream) const;

  // Returns an independent copy of `value` materialized at `destination`
  // (fresh storage; allocates). `stream`, when given, must be on the CUDA
  // destination's device. Returns once the copy is complete. Throws
  // std::invalid_argument for a bad location or stream, the runtime's
  // allocation/device errors otherwise.
  ResidentValue copy_to(const ResidentValue& value, const ResidencyLocation& destination,
                        const std::optional<c10::Stream>& stream);
  // Where every tensor of `value` lives; nullopt when the tensors disagree, the
  // value has no tensors, or the placement is not one this runtime knows.
  std::optional<ResidencyLocation> locate(const ResidentValue& value) const { return do_locate(value); }
  // Whether `value` lives entirely at `location` (always true without tensors).
  bool occupies(const ResidentValue& value, const ResidencyLocation& location) const;
  // Distinct backing-storage identities of `value`.
  StorageKeys storage_keys(const ResidentValue& value) const { return do_storage_keys(value); }

  // Records a completion event after the work enqueued so far on `stream`.
  std::shared_ptr<CompletionEvent> record_event(const c10::Stream& stream);
  // Whether `event` has completed. Throws on device error.
  bool query_event(const CompletionEvent& event) { return do_query_event(event); }
  // Blocks until `event` completes. Throws on device error, and (in
  // simulation) when the event can never complete.
  void synchronize_event(const CompletionEvent& event) { do_synchronize_event(event); }
  // Blocks until all work on `stream` completes.
  void synchronize_stream(const c10::Stream& stream);
  // Allocator statistics of a CUDA device, or nullopt when not instrumented.
  // Throws std::invalid_argument for a non-CUDA device.
  std::optional<AllocatorStats> allocator_stats(const c10::Device& device);
  // Current time in nanoseconds (Unix time, or virtual time in simulation).
  std::int64_t now_ns() { return do_now_ns(); }

 private:
  virtual std::string do_name() const = 0;
  virtual int do_cuda_device_count() const = 0;
  virtual bool do_can_pin() const = 0;
  virtual ResidentValue do_copy_to(const ResidentValue& value, const ResidencyLocation& destination,
                                   const std::optional<c10::Stream>& stream) = 0;
  virtual std::optional<ResidencyLocation> do_locate(const ResidentValue& value) const = 0;
  virtual StorageKeys do_storage_keys(const ResidentValue& value) const;
  virtual std::shared_ptr<CompletionEvent> do_record_event(const c10::Stream& stream) = 0;
  virtual bool do_query_event(const CompletionEvent& event) = 0;
  virtual void do_synchronize_event(const CompletionEvent& event) = 0;
  virtual void do_synchronize_stream(const c10::Stream& stream) = 0;
  virtual std::optional<AllocatorStats> do_allocator_stats(const c10::Device& device) = 0;
  virtual std::int64_t do_now_ns() = 0;
};

// The real runtime over libtorch. Pageable host always works; pinned host and
// cuda:N need a libtorch built with CUDA and a present device. On a CPU-only
// libtorch, CUDA locations are argument errors and pinned materialization
// fails with ResidencyUnavailableError saying why.
class TorchRuntime final : public DeviceRuntime {
 public:
  TorchRuntime();
  // Whether this build can sample CUDA allocator statistics.
  static bool built_with_cuda() noexcept;

 private:
  std::string do_name() const override;
  int do_cuda_device_count() const override;
  bool do_can_pin() const override;
  ResidentValue do_copy_to(const ResidentValue& value, const ResidencyLocation& destination,
                           const std::optional<c10::Stream>& stream) override;
  std::optional<ResidencyLocation> do_locate(const ResidentValue& value) const override;
  std::shared_ptr<CompletionEvent> do_record_event(const c10::Stream& stream) override;
  bool do_query_event(const CompletionEvent& event) override;
  void do_synchronize_event(const CompletionEvent& event) override;
  void do_synchronize_stream(const c10::Stream& stream) override;
  std::optional<AllocatorStats> do_allocator_stats(const c10::Device& device) override;
  std::int64_t do_now_ns() override;

  int cuda_devices_;
  bool can_pin_;
};

// The process-wide default runtime used when ManagerOptions names none.
std::shared_ptr<DeviceRuntime> default_runtime();

}  // namespace fhelium::residency
