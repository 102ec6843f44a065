#include "fhelium/residency/runtime.hpp"

#include <stdexcept>

#include "fhelium/residency/value.hpp"

namespace fhelium::residency {

[[gnu::hot]]
void DeviceRuntime::check_location(const ResidencyLocation& location) const {
  if (!location.is_cuda()) return;
  const int count = cuda_device_count();
  if (location.cuda_index() >= count) {
    throw std::invalid_argument("residency location " + location.name() +
                                " is not available: CUDA residency locations require available CUDA devices, and "
                                "runtime '" + name() + "' has " + std::to_string(count) + " CUDA device(s)");
  }
}

void DeviceRuntime::check_stream(const ResidencyLocation& location, const c10::Stream& stream) const {
  if (!location.is_cuda()) {
    throw std::invalid_argument("host location " + location.name() + " does not accept a CUDA stream (got " +
                                stream.device().str() + ")");
  }
  if (!stream.device().is_cuda()) {
    throw std::invalid_argument("stream on " + stream.device().str() + " is not a CUDA stream");
  }
  if (stream.device_index() != location.cuda_index()) {
    throw std::invalid_argument("stream device " + stream.device().str() + " does not match location " +
                                location.name());
  }
  check_location(location);
}

ResidentValue DeviceRuntime::copy_to(const ResidentValue& value, const ResidencyLocation& destination,
                                     const std::optional<c10::Stream>& stream) {
  check_location(destination);
  if (stream) check_stream(destination, *stream);
  return do_copy_to(value, destination, stream);
}

[[gnu::hot]]
bool DeviceRuntime::occupies(const ResidentValue& value, const ResidencyLocation& location) const {
  if (value.fields().empty()) return true;
  const auto actual = locate(value);
  return actual && *actual == location;
}

[[gnu::hot]]
StorageKeys DeviceRuntime::do_storage_keys(const ResidentValue& value) const {
  return StorageKeys(value.storage_keys());
}

std::shared_ptr<CompletionEvent> DeviceRuntime::record_event(const c10::Stream& stream) {
  if (!stream.device().is_cuda()) {
    throw std::invalid_argument("completion events need a CUDA stream, got " + stream.device().str());
  }
  check_location(cuda_location(stream.device_index()));
  return do_record_event(stream);
}

void DeviceRuntime::synchronize_stream(const c10::Stream& stream) {
  if (!stream.device().is_cuda()) {
    throw std::invalid_argument("stream synchronization needs a CUDA stream, got " + stream.device().str());
  }
  do_synchronize_stream(stream);
}

std::optional<AllocatorStats> DeviceRuntime::allocator_stats(const c10::Device& device) {
  if (!device.is_cuda() || !device.has_index()) {
    throw std::invalid_argument("allocator statistics need an indexed CUDA device, got " + device.str());
  }
  return do_allocator_stats(device);
}

}  // namespace fhelium::residency
