// FreeCopyRuntime: a runtime whose copies move no data, for measuring the
// manager's bookkeeping alone. A "copy" is a fresh tensor header over one
// shared static buffer per location, so every copy still has its own storage
// identity (the manager's aliasing checks see independent storage) and its
// location is read back from the buffer address. Events complete at once.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/from_blob.h>

#include <array>
#include <atomic>
#include <stdexcept>
#include <chrono>
#include <vector>

#include "fhelium/residency/runtime.hpp"
#include "fhelium/residency/value.hpp"

namespace fhelium::bench {

using namespace residency;

class FreeCopyRuntime final : public DeviceRuntime {
 public:
  static constexpr std::size_t max_bytes = 1 << 20;
  static constexpr int devices = 2;

  FreeCopyRuntime() : buffers_(2 + devices, std::vector<char>(max_bytes)) {}

  // A value of `bytes` bytes placed at `location` without copying.
  ResidentValue make(std::int64_t bytes, const ResidencyLocation& location) const {
    return ResidentValue("Blob", {{"data", header({bytes}, at::kByte, location)}});
  }

 private:
  struct Event final : CompletionEvent {};

  // A tensor of `sizes` and `dtype` over the buffer of `location`: same
  // logical bytes as what it stands for, no data moved.
  at::Tensor header(at::IntArrayRef sizes, at::ScalarType dtype, const ResidencyLocation& location) const {
    const at::TensorOptions options = at::TensorOptions().dtype(dtype);
    std::int64_t elements = 1;
    for (const std::int64_t size : sizes) elements *= size;
    if (elements * static_cast<std::int64_t>(c10::elementSize(dtype)) > static_cast<std::int64_t>(max_bytes)) {
      throw std::length_error("FreeCopyRuntime holds at most 1 MiB per tensor");
    }
    void* data = const_cast<char*>(buffers_[static_cast<std::size_t>(location.ordinal())].data());
    return at::from_blob(data, sizes, [](void*) {}, options);
  }

  std::string do_name() const override { return "free-copy"; }
  int do_cuda_device_count() const override { return devices; }
  bool do_can_pin() const override { return true; }
  ResidentValue do_copy_to(const ResidentValue& value, const ResidencyLocation& destination,
                           const std::optional<c10::Stream>&) override {
    std::vector<at::Tensor> tensors;
    tensors.reserve(value.fields().size());
    for (const auto& field : value.fields()) {
      tensors.push_back(header(field.second.sizes(), field.second.scalar_type(), destination));
    }
    return value.with_tensors(std::move(tensors));
  }
  std::optional<ResidencyLocation> do_locate(const ResidentValue& value) const override {
    if (value.fields().empty()) return std::nullopt;
    std::optional<ResidencyLocation> found;
    for (const auto& field : value.fields()) {
      // Its own buffers say where a copy is; any other CPU tensor is ordinary pageable memory.
      std::optional<ResidencyLocation> here;
      const void* data = field.second.data_ptr();
      for (std::size_t i = 0; i < buffers_.size() && !here; ++i) {
        if (buffers_[i].data() == data) {
          here = i == 0 ? PAGEABLE_HOST : i == 1 ? PINNED_HOST : cuda_location(static_cast<int>(i) - 2);
        }
      }
      if (!here && field.second.device().is_cpu()) here = PAGEABLE_HOST;
      if (!here || (found && *found != *here)) return std::nullopt;
      found = here;
    }
    return found;
  }
  std::shared_ptr<CompletionEvent> do_record_event(const c10::Stream&) override { return std::make_shared<Event>(); }
  bool do_query_event(const CompletionEvent&) override { return true; }
  void do_synchronize_event(const CompletionEvent&) override {}
  void do_synchronize_stream(const c10::Stream&) override {}
  std::optional<AllocatorStats> do_allocator_stats(const c10::Device&) override { return std::nullopt; }
  std::int64_t do_now_ns() override { return clock_.fetch_add(1) + 1; }

  std::vector<std::vector<char>> buffers_;
  std::atomic<std::int64_t> clock_{0};
};

}  // namespace fhelium::bench
