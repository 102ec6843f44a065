// ForwardingRuntime: a DeviceRuntime decorator that forwards every hook to an
// upstream runtime (LevelDB's EnvWrapper for the device seam). A decorator
// derives from it and overrides only the hooks it changes, so a hook added to
// the seam cannot be forgotten. Thread-safety is the upstream's.
#pragma once

#include <memory>
#include <stdexcept>
#include <utility>

#include "fhelium/residency/runtime.hpp"
#include "fhelium/residency/value.hpp"

namespace fhelium::harness {

class ForwardingRuntime : public residency::DeviceRuntime {
 public:
  // Throws std::invalid_argument for a null upstream.
  explicit ForwardingRuntime(std::shared_ptr<residency::DeviceRuntime> upstream) : upstream_(std::move(upstream)) {
    if (!upstream_) throw std::invalid_argument("ForwardingRuntime needs an upstream runtime");
  }
  const std::shared_ptr<residency::DeviceRuntime>& upstream() const noexcept { return upstream_; }

 protected:
  std::string do_name() const override { return upstream_->name(); }
  int do_cuda_device_count() const override { return upstream_->cuda_device_count(); }
  bool do_can_pin() const override { return upstream_->can_pin(); }
  residency::ResidentValue do_copy_to(const residency::ResidentValue& value,
                                      const residency::ResidencyLocation& destination,
                                      const std::optional<c10::Stream>& stream) override {
    return upstream_->copy_to(value, destination, stream);
  }
  std::optional<residency::ResidencyLocation> do_locate(const residency::ResidentValue& value) const override {
    return upstream_->locate(value);
  }
  residency::StorageKeys do_storage_keys(const residency::ResidentValue& value) const override {
    return upstream_->storage_keys(value);
  }
  std::shared_ptr<residency::CompletionEvent> do_record_event(const c10::Stream& stream) override {
    return upstream_->record_event(stream);
  }
  bool do_query_event(const residency::CompletionEvent& event) override { return upstream_->query_event(event); }
  void do_synchronize_event(const residency::CompletionEvent& event) override { upstream_->synchronize_event(event); }
  void do_synchronize_stream(const c10::Stream& stream) override { upstream_->synchronize_stream(stream); }
  std::optional<residency::AllocatorStats> do_allocator_stats(const c10::Device& device) override {
    return upstream_->allocator_stats(device);
  }
  std::int64_t do_now_ns() override { return upstream_->now_ns(); }

 private:
  std::shared_ptr<residency::DeviceRuntime> upstream_;
};

}  // namespace fhelium::harness
