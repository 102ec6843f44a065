#include "fhelium/harness/simulated_runtime.hpp"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include "fhelium/residency/errors.hpp"
#include "fhelium/residency/value.hpp"

namespace fhelium::harness {

using residency::AllocatorStats;
using residency::CompletionEvent;
using residency::ResidentValue;

// Storages this runtime allocated, keyed by data address, with live and
// high-water byte counts per location. Shared with tensor deleters, which may
// run after the runtime is gone.
struct SimulatedRuntime::Registry {
  struct Usage {
    std::int64_t live = 0;
    std::int64_t high_water = 0;
  };
  mutable std::mutex mutex;
  std::unordered_map<const void*, std::pair<ResidencyLocation, std::int64_t>> storages;
  std::map<ResidencyLocation, Usage> usage;
};

namespace {

struct SimulatedEvent final : CompletionEvent {
  int device = 0;
  std::int64_t stream_id = 0;
  std::int64_t completes_at_ns = 0;
};

const SimulatedEvent& simulated_event(const CompletionEvent& event) {
  const auto* typed = dynamic_cast<const SimulatedEvent*>(&event);
  if (typed == nullptr) throw std::invalid_argument("completion event was not recorded by a SimulatedRuntime");
  return *typed;
}

}  // namespace

struct SimulatedRuntime::Clock {
  struct StreamState {
    std::int64_t tail_ns = 0;
    std::vector<std::shared_ptr<SimulatedEvent>> open_events;
    std::vector<std::size_t> open_activity;  // indices into `activity` that may still be running
  };
  mutable std::mutex mutex;
  std::int64_t now_ns = 0;
  std::int64_t events_recorded = 0;
  std::vector<RuntimeActivity> activity;
  std::map<std::pair<int, std::int64_t>, StreamState> streams;

  StreamState& state(const c10::Stream& stream) { return streams[{stream.device_index(), stream.id()}]; }
};

SimulatedRuntime::SimulatedRuntime(SimulatedRuntimeOptions options)
    : options_(std::move(options)), registry_(std::make_shared<Registry>()), clock_(std::make_unique<Clock>()) {
  if (options_.cuda_devices < 0 || options_.cuda_devices > residency::max_cuda_device_index + 1) {
    throw std::invalid_argument("simulated runtime needs 0..128 CUDA devices, got " +
                                std::to_string(options_.cuda_devices));
  }
  if (options_.copy_ns_per_mib < 0) throw std::invalid_argument("copy_ns_per_mib must be non-negative");
  if (options_.start_ns < 0) throw std::invalid_argument("start_ns must be non-negative");
  for (const auto& [location, capacity] : options_.capacity_bytes) {
    if (location == residency::PAGEABLE_HOST) {
      throw std::invalid_argument("simulated capacities apply to pinned-host and cuda:N, not pageable-host");
    }
    if (capacity < 0) throw std::invalid_argument("capacity of " + location.name() + " must be non-negative");
    check_location(location);
  }
  clock_->now_ns = options_.start_ns;
}

SimulatedRuntime::~SimulatedRuntime() = default;

std::string SimulatedRuntime::do_name() const { return "simulated"; }
int SimulatedRuntime::do_cuda_device_count() const { return options_.cuda_devices; }
bool SimulatedRuntime::do_can_pin() const { return options_.can_pin; }

c10::Stream SimulatedRuntime::stream(int device, std::int64_t id) const {
  check_location(residency::cuda_location(device));
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device)),
                     id);
}

void SimulatedRuntime::check_simulated_stream(const c10::Stream& stream) const {
  if (!stream.device().is_cuda()) throw std::invalid_argument("not a CUDA stream: " + stream.device().str());
  check_location(residency::cuda_location(stream.device_index()));
}

namespace {

// A virtual payload: one element broadcast (every stride 0) to many.
bool broadcast_element(const at::Tensor& tensor) {
  if (tensor.numel() <= 1) return false;
  return std::all_of(tensor.strides().begin(), tensor.strides().end(), [](std::int64_t stride) { return stride == 0; });
}

}  // namespace

at::Tensor SimulatedRuntime::allocate_copy(const at::Tensor& tensor, const ResidencyLocation& destination) {
  // A virtual payload keeps its shape over one stored element; the device
  // still accounts (and is limited by) the bytes it stands for.
  const bool virtual_payload = broadcast_element(tensor);
  const at::Tensor source = virtual_payload ? tensor : tensor.contiguous();
  const std::int64_t nbytes = static_cast<std::int64_t>(source.numel()) * source.element_size();
  const std::int64_t stored = virtual_payload ? static_cast<std::int64_t>(source.element_size()) : nbytes;
  if (virtual_payload && destination == residency::PAGEABLE_HOST) {
    at::Tensor element = at::empty({1}, source.options());
    element.copy_(source.as_strided({1}, {1}));
    return element.expand(source.sizes());
  }
  if (destination == residency::PAGEABLE_HOST) {
    at::Tensor copy = at::empty(source.sizes(), source.options());
    copy.copy_(source);
    return copy;
  }
  void* data = std::malloc(static_cast<std::size_t>(std::max<std::int64_t>(stored, 1)));
  if (data == nullptr) throw std::bad_alloc();
  {
    std::lock_guard lock(registry_->mutex);
    Registry::Usage& usage = registry_->usage[destination];
    const auto capacity = options_.capacity_bytes.find(destination);
    if (capacity != options_.capacity_bytes.end() && usage.live + nbytes > capacity->second) {
      std::free(data);
      device_refusals_.fetch_add(1);
      TORCH_CHECK_WITH(OutOfMemoryError, false, "simulated allocator out of memory at ", destination.name(),
                       ": tried to allocate ", nbytes, " bytes with ", usage.live, " of ", capacity->second,
                       " bytes in use");
    }
    usage.live += nbytes;
    usage.high_water = std::max(usage.high_water, usage.live);
    registry_->storages.emplace(data, std::make_pair(destination, nbytes));
  }
  std::weak_ptr<Registry> weak = registry_;
  at::Tensor copy = at::from_blob(
      data, virtual_payload ? at::IntArrayRef({1}) : source.sizes(),
      [weak](void* pointer) {
        if (auto registry = weak.lock()) {
          std::lock_guard lock(registry->mutex);
          const auto found = registry->storages.find(pointer);
          if (found != registry->storages.end()) {
            registry->usage[found->second.first].live -= found->second.second;
            registry->storages.erase(found);
          }
        }
        std::free(pointer);
      },
      source.options());
  if (virtual_payload) {
    copy.copy_(source.as_strided({1}, {1}));
    return copy.expand(source.sizes());
  }
  copy.copy_(source);  // ATen's copy kernel, as a real device copy would use
  return copy;
}

std::int64_t SimulatedRuntime::device_refusals() const { return device_refusals_.load(); }

ResidentValue SimulatedRuntime::do_copy_to(const ResidentValue& value, const ResidencyLocation& destination,
                                           const std::optional<c10::Stream>& stream) {
  if (destination.kind() == residency::ResidencyLocationKind::pinned_host && !options_.can_pin) {
    device_refusals_.fetch_add(1);
    throw residency::ResidencyUnavailableError("simulated runtime was configured without pinned host memory");
  }
  std::vector<at::Tensor> tensors;
  tensors.reserve(value.fields().size());
  for (const auto& field : value.fields()) tensors.push_back(allocate_copy(field.second, destination));
  RuntimeActivity copy;
  copy.kind = RuntimeActivity::Kind::copy;
  copy.destination = destination;
  copy.bytes = value.logical_nbytes();
  if (destination.is_cuda()) {
    const c10::Stream copy_stream = stream ? *stream : this->stream(destination.cuda_index());
    const std::int64_t mib = (value.logical_nbytes() + (1 << 20) - 1) >> 20;
    check_simulated_stream(copy_stream);
    {
      std::lock_guard lock(clock_->mutex);
      enqueue_locked(copy_stream, mib * options_.copy_ns_per_mib, copy);
    }
    if (options_.copy_ns_per_mib > 0) synchronize_stream(copy_stream);
  } else {
    std::lock_guard lock(clock_->mutex);
    copy.start_ns = copy.end_ns = clock_->now_ns;
    log_locked(copy);
  }
  return value.with_tensors(std::move(tensors));
}

std::optional<ResidencyLocation> SimulatedRuntime::do_locate(const ResidentValue& value) const {
  std::optional<ResidencyLocation> found;
  std::lock_guard lock(registry_->mutex);
  for (const auto& field : value.fields()) {
    if (!field.second.device().is_cpu()) return std::nullopt;
    const auto entry = registry_->storages.find(field.second.storage().data());
    const ResidencyLocation here = entry == registry_->storages.end() ? residency::PAGEABLE_HOST : entry->second.first;
    if (found && *found != here) return std::nullopt;
    found = here;
  }
  return found;
}

void SimulatedRuntime::enqueue(const c10::Stream& stream, std::int64_t duration_ns) {
  check_simulated_stream(stream);
  if (duration_ns < 0) throw std::invalid_argument("work duration must be non-negative");
  std::lock_guard lock(clock_->mutex);
  enqueue_locked(stream, duration_ns, RuntimeActivity{});
}

void SimulatedRuntime::enqueue_locked(const c10::Stream& stream, std::int64_t duration_ns, RuntimeActivity activity) {
  Clock::StreamState& state = clock_->state(stream);
  const std::int64_t start = std::max(state.tail_ns, clock_->now_ns);
  state.tail_ns = (duration_ns == never || start > never - duration_ns) ? never : start + duration_ns;
  if (!options_.record_activity) return;
  activity.device = stream.device_index();
  activity.stream_id = stream.id();
  activity.start_ns = start;
  activity.end_ns = state.tail_ns;
  if (activity.end_ns > clock_->now_ns) state.open_activity.push_back(clock_->activity.size());
  clock_->activity.push_back(activity);
}

void SimulatedRuntime::log_locked(RuntimeActivity activity) {
  if (options_.record_activity) clock_->activity.push_back(activity);
}

std::vector<RuntimeActivity> SimulatedRuntime::activity() const {
  std::lock_guard lock(clock_->mutex);
  return clock_->activity;
}

void SimulatedRuntime::advance(std::int64_t duration_ns) {
  if (duration_ns < 0) throw std::invalid_argument("virtual time cannot move backwards");
  std::lock_guard lock(clock_->mutex);
  clock_->now_ns += duration_ns;
}

void SimulatedRuntime::complete(const c10::Stream& stream) {
  check_simulated_stream(stream);
  std::lock_guard lock(clock_->mutex);
  Clock::StreamState& state = clock_->state(stream);
  state.tail_ns = std::min(state.tail_ns, clock_->now_ns);
  for (const auto& event : state.open_events) event->completes_at_ns = std::min(event->completes_at_ns, clock_->now_ns);
  state.open_events.clear();
  for (const std::size_t index : state.open_activity) {
    RuntimeActivity& cut = clock_->activity[index];
    cut.start_ns = std::min(cut.start_ns, clock_->now_ns);
    cut.end_ns = std::min(cut.end_ns, clock_->now_ns);
  }
  state.open_activity.clear();
}

std::int64_t SimulatedRuntime::stream_tail_ns(const c10::Stream& stream) const {
  check_simulated_stream(stream);
  std::lock_guard lock(clock_->mutex);
  const auto found = clock_->streams.find({stream.device_index(), stream.id()});
  return found == clock_->streams.end() ? 0 : found->second.tail_ns;
}

std::shared_ptr<CompletionEvent> SimulatedRuntime::do_record_event(const c10::Stream& stream) {
  check_simulated_stream(stream);
  std::lock_guard lock(clock_->mutex);
  Clock::StreamState& state = clock_->state(stream);
  auto event = std::make_shared<SimulatedEvent>();
  event->device = stream.device_index();
  event->stream_id = stream.id();
  event->completes_at_ns = std::max(state.tail_ns, clock_->now_ns);
  std::erase_if(state.open_events, [&](const auto& open) { return open->completes_at_ns <= clock_->now_ns; });
  std::erase_if(state.open_activity, [&](std::size_t index) { return clock_->activity[index].end_ns <= clock_->now_ns; });
  state.open_events.push_back(event);
  clock_->events_recorded += 1;
  RuntimeActivity recorded;
  recorded.kind = RuntimeActivity::Kind::event;
  recorded.device = stream.device_index();
  recorded.stream_id = stream.id();
  recorded.start_ns = clock_->now_ns;
  recorded.end_ns = event->completes_at_ns;  // the span it stays incomplete
  if (options_.record_activity && recorded.end_ns > recorded.start_ns) {
    state.open_activity.push_back(clock_->activity.size());
  }
  log_locked(recorded);
  return event;
}

bool SimulatedRuntime::do_query_event(const CompletionEvent& event) {
  const SimulatedEvent& typed = simulated_event(event);
  std::lock_guard lock(clock_->mutex);
  return typed.completes_at_ns <= clock_->now_ns;
}

void SimulatedRuntime::do_synchronize_event(const CompletionEvent& event) {
  const SimulatedEvent& typed = simulated_event(event);
  std::lock_guard lock(clock_->mutex);
  if (typed.completes_at_ns == never) {
    device_refusals_.fetch_add(1);
    throw std::runtime_error("simulated wait would never return: the event on cuda:" + std::to_string(typed.device) +
                             " stream " + std::to_string(typed.stream_id) + " never completes");
  }
  clock_->now_ns = std::max(clock_->now_ns, typed.completes_at_ns);
}

void SimulatedRuntime::do_synchronize_stream(const c10::Stream& stream) {
  check_simulated_stream(stream);
  std::lock_guard lock(clock_->mutex);
  Clock::StreamState& state = clock_->state(stream);
  if (state.tail_ns == never) {
    device_refusals_.fetch_add(1);
    throw std::runtime_error("simulated wait would never return: stream " + std::to_string(stream.id()) + " on " +
                             stream.device().str() + " never completes its work");
  }
  clock_->now_ns = std::max(clock_->now_ns, state.tail_ns);
}

std::optional<AllocatorStats> SimulatedRuntime::do_allocator_stats(const c10::Device& device) {
  check_location(residency::cuda_location(device.index()));
  std::lock_guard lock(registry_->mutex);
  const Registry::Usage& usage = registry_->usage[residency::cuda_location(device.index())];
  return AllocatorStats{usage.live, usage.high_water};
}

std::int64_t SimulatedRuntime::do_now_ns() {
  std::lock_guard lock(clock_->mutex);
  return clock_->now_ns;
}

std::int64_t SimulatedRuntime::live_bytes(const ResidencyLocation& location) const {
  std::lock_guard lock(registry_->mutex);
  const auto found = registry_->usage.find(location);
  return found == registry_->usage.end() ? 0 : found->second.live;
}

std::int64_t SimulatedRuntime::events_recorded() const {
  std::lock_guard lock(clock_->mutex);
  return clock_->events_recorded;
}

}  // namespace fhelium::harness
