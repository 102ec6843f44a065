// TorchRuntime: real copies through libtorch. CUDA streams and events go through
// c10's device-generic guard interface, so this file needs CUDA headers only for
// allocator statistics (FHELIUM_RESIDENCY_WITH_CUDA).
#include <ATen/Context.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#include "detail/unix_clock.hpp"
#include "fhelium/residency/errors.hpp"
#include "fhelium/residency/runtime.hpp"
#include "fhelium/residency/value.hpp"

#ifdef FHELIUM_RESIDENCY_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace fhelium::residency {

namespace {

class TorchEvent final : public CompletionEvent {
 public:
  explicit TorchEvent(const c10::Stream& stream) : event_(stream.device_type()) { event_.record(stream); }
  bool query() const { return event_.query(); }

 private:
  c10::Event event_;
};

const TorchEvent& torch_event(const CompletionEvent& event) {
  const auto* typed = dynamic_cast<const TorchEvent*>(&event);
  if (typed == nullptr) throw std::invalid_argument("completion event was not recorded by a TorchRuntime");
  return *typed;
}

at::Tensor copy_tensor(const at::Tensor& tensor, const ResidencyLocation& destination) {
  const bool pinned = destination.kind() == ResidencyLocationKind::pinned_host;
  at::Tensor copy =
      at::empty(tensor.sizes(), tensor.options().device(destination.device()).pinned_memory(pinned));
  const bool non_blocking = destination.is_cuda() && (tensor.is_cuda() || tensor.is_pinned());
  copy.copy_(tensor, non_blocking);
  return copy;
}

}  // namespace

namespace {

// Device-generic, so it reads the same in libtorch 1.13 and 2.x.
int count_cuda_devices() {
  if (!at::hasCUDA()) return 0;
  return static_cast<int>(c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).deviceCount());
}

}  // namespace

TorchRuntime::TorchRuntime() : cuda_devices_(count_cuda_devices()), can_pin_(at::hasCUDA()) {}

bool TorchRuntime::built_with_cuda() noexcept {
#ifdef FHELIUM_RESIDENCY_WITH_CUDA
  return true;
#else
  return false;
#endif
}

std::string TorchRuntime::do_name() const { return "torch"; }
int TorchRuntime::do_cuda_device_count() const { return cuda_devices_; }
bool TorchRuntime::do_can_pin() const { return can_pin_; }

ResidentValue TorchRuntime::do_copy_to(const ResidentValue& value, const ResidencyLocation& destination,
                                       const std::optional<c10::Stream>& stream) {
  if (destination.kind() == ResidencyLocationKind::pinned_host && !can_pin_) {
    throw ResidencyUnavailableError(
        "runtime 'torch' cannot materialize at pinned-host: this libtorch has no CUDA support, so host memory "
        "cannot be pinned");
  }
  std::vector<at::Tensor> tensors;
  tensors.reserve(value.fields().size());
  if (!destination.is_cuda()) {
    for (const auto& field : value.fields()) tensors.push_back(copy_tensor(field.second, destination));
    return value.with_tensors(std::move(tensors));
  }
  const c10::Stream copy_stream =
      stream ? *stream
             : c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getStream(destination.device());
  c10::StreamGuard guard(copy_stream);
  for (const auto& field : value.fields()) tensors.push_back(copy_tensor(field.second, destination));
  const TorchEvent done(copy_stream);
  while (!done.query()) std::this_thread::yield();
  return value.with_tensors(std::move(tensors));
}

[[gnu::hot]]
std::optional<ResidencyLocation> TorchRuntime::do_locate(const ResidentValue& value) const {
  std::optional<ResidencyLocation> found;
  for (const auto& field : value.fields()) {
    const at::Tensor& tensor = field.second;
    ResidencyLocation here;
    if (tensor.is_cuda()) {
      here = cuda_location(tensor.get_device());
    } else if (tensor.device().is_cpu()) {
      here = can_pin_ && tensor.is_pinned() ? PINNED_HOST : PAGEABLE_HOST;
    } else {
      return std::nullopt;
    }
    if (found && *found != here) return std::nullopt;
    found = here;
  }
  return found;
}

std::shared_ptr<CompletionEvent> TorchRuntime::do_record_event(const c10::Stream& stream) {
  return std::make_shared<TorchEvent>(stream);
}

bool TorchRuntime::do_query_event(const CompletionEvent& event) { return torch_event(event).query(); }

void TorchRuntime::do_synchronize_event(const CompletionEvent& event) {
  // c10::Event offers no blocking wait; a short poll is exact and bounded by the work itself.
  const TorchEvent& typed = torch_event(event);
  while (!typed.query()) std::this_thread::sleep_for(std::chrono::microseconds(20));
}

void TorchRuntime::do_synchronize_stream(const c10::Stream& stream) { stream.synchronize(); }

std::optional<AllocatorStats> TorchRuntime::do_allocator_stats(const c10::Device& device) {
#ifdef FHELIUM_RESIDENCY_WITH_CUDA
  if (device.index() >= cuda_devices_) return std::nullopt;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  // Entry 0 is StatType::AGGREGATE in every libtorch; the enum moved between
  // namespaces in 2.x (c10::CachingAllocator), so it is not named here.
  constexpr std::size_t aggregate = 0;
  return AllocatorStats{stats.allocated_bytes[aggregate].current, stats.reserved_bytes[aggregate].current};
#else
  (void)device;
  return std::nullopt;
#endif
}

[[gnu::hot]]
std::int64_t TorchRuntime::do_now_ns() {
  // The counter-based clock where the CPU and kernel vouch for the counter
  // (detail/unix_clock.hpp); FHELIUM_RESIDENCY_CLOCK=system turns it off.
  return detail::unix_time_ns();
}

std::shared_ptr<DeviceRuntime> default_runtime() {
  static const std::shared_ptr<DeviceRuntime> runtime = std::make_shared<TorchRuntime>();
  return runtime;
}

}  // namespace fhelium::residency
