#include "fhelium/harness/fault_injecting_runtime.hpp"

#include <algorithm>

#include <c10/util/Exception.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#include "fhelium/residency/value.hpp"

namespace fhelium::harness {

using residency::CompletionEvent;

namespace {

c10::SourceLocation here() { return c10::SourceLocation{"FaultInjectingRuntime", __FILE__, __LINE__}; }

class InjectedOutOfMemoryError final : public c10::OutOfMemoryError, public InjectedFault {
 public:
  InjectedOutOfMemoryError(const std::string& rule, const std::string& message)
      : c10::OutOfMemoryError(here(), message), InjectedFault(rule) {}
};

class InjectedDeviceError final : public c10::Error, public InjectedFault {
 public:
  InjectedDeviceError(const std::string& rule, const std::string& message)
      : c10::Error(here(), message), InjectedFault(rule) {}
};

// An upstream event whose completion was pushed back or cancelled by a rule.
struct AdjustedEvent final : CompletionEvent {
  std::shared_ptr<CompletionEvent> upstream;
  std::string rule;
  bool never = false;
  std::int64_t ready_at_ns = 0;
};

const CompletionEvent& upstream_of(const CompletionEvent& event) {
  const auto* adjusted = dynamic_cast<const AdjustedEvent*>(&event);
  return adjusted ? *adjusted->upstream : event;
}

std::optional<ResidencyLocation> stream_location(const c10::Stream& stream) {
  if (!stream.device().is_cuda()) return std::nullopt;
  return residency::cuda_location(stream.device_index());
}

const char* const operation_names[] = {"copy",      "record_event",       "query_event",
                                       "synchronize_event", "synchronize_stream", "allocator_stats"};
const char* const effect_names[] = {"fail", "delay", "never_complete", "alias"};

}  // namespace

const char* to_string(FaultOperation operation) noexcept { return operation_names[static_cast<int>(operation)]; }
const char* to_string(FaultEffect effect) noexcept { return effect_names[static_cast<int>(effect)]; }

FaultOperation parse_fault_operation(const std::string& text) {
  for (int i = 0; i < 6; ++i) {
    if (text == operation_names[i]) return static_cast<FaultOperation>(i);
  }
  throw std::invalid_argument("unknown fault operation '" + text +
                              "': expected copy, record_event, query_event, synchronize_event, "
                              "synchronize_stream or allocator_stats");
}

FaultEffect parse_fault_effect(const std::string& text) {
  for (int i = 0; i < 4; ++i) {
    if (text == effect_names[i]) return static_cast<FaultEffect>(i);
  }
  throw std::invalid_argument("unknown fault effect '" + text + "': expected fail, delay, never_complete or alias");
}

void FaultRule::validate() const {
  const auto invalid = [&](const std::string& message) {
    return std::invalid_argument("fault rule '" + name + "': " + message);
  };
  if (name.empty()) throw std::invalid_argument("fault rule needs a name");
  if (nth && *nth < 1) throw invalid("nth must be at least 1");
  if (every && *every < 1) throw invalid("every must be at least 1");
  if (probability && !(*probability >= 0.0 && *probability <= 1.0)) throw invalid("probability must be in [0, 1]");
  if (max_fires && *max_fires < 0) throw invalid("max_fires must be non-negative");
  if (effect == FaultEffect::alias && operation != FaultOperation::copy) {
    throw invalid("effect alias applies only to copy");
  }
  if ((effect == FaultEffect::delay || effect == FaultEffect::never_complete) &&
      operation != FaultOperation::record_event) {
    throw invalid(std::string("effect ") + to_string(effect) + " applies only to record_event");
  }
  if (effect == FaultEffect::delay && delay_ns <= 0) throw invalid("a delay needs a positive delay_ns");
}

std::optional<std::string> injected_rule(const std::exception& error) {
  if (const auto* tag = dynamic_cast<const InjectedFault*>(&error)) return tag->rule();
  return std::nullopt;
}

FaultInjectingRuntime::FaultInjectingRuntime(std::shared_ptr<residency::DeviceRuntime> upstream,
                                             std::vector<FaultRule> rules, std::uint64_t seed)
    : upstream_(std::move(upstream)), random_(seed) {
  if (!upstream_) throw std::invalid_argument("FaultInjectingRuntime needs an upstream runtime");
  for (auto& rule : rules) add_rule(std::move(rule));
}

void FaultInjectingRuntime::add_rule(FaultRule rule) {
  rule.validate();
  std::lock_guard lock(mutex_);
  rules_.push_back(RuleState{std::move(rule)});
}

void FaultInjectingRuntime::clear_rules() {
  std::lock_guard lock(mutex_);
  rules_.clear();
}

std::size_t FaultInjectingRuntime::remove_rule(const std::string& name) {
  std::lock_guard lock(mutex_);
  return std::erase_if(rules_, [&](const RuleState& state) { return state.rule.name == name; });
}

std::vector<FiredFault> FaultInjectingRuntime::fired() const {
  std::lock_guard lock(mutex_);
  return fired_;
}

void FaultInjectingRuntime::begin_checking() {
  std::lock_guard lock(mutex_);
  ++checking_depth_;
}

void FaultInjectingRuntime::end_checking() {
  std::lock_guard lock(mutex_);
  if (checking_depth_ == 0) throw std::logic_error("FaultInjectingRuntime::end_checking without begin_checking");
  --checking_depth_;
}

std::optional<FaultRule> FaultInjectingRuntime::select(FaultOperation operation,
                                                       const std::optional<ResidencyLocation>& location,
                                                       const std::optional<std::int64_t>& stream_id,
                                                       const std::string& detail) {
  std::lock_guard lock(mutex_);
  for (auto& state : rules_) {
    const FaultRule& rule = state.rule;
    if (rule.operation != operation) continue;
    if (rule.location && rule.location != location) continue;
    if (rule.stream_id && rule.stream_id != stream_id) continue;
    if (rule.during != FaultCalls::any && (rule.during == FaultCalls::checks) != (checking_depth_ > 0)) continue;
    const std::int64_t index = ++state.matches;
    if (rule.max_fires && state.fires >= *rule.max_fires) continue;
    if (rule.nth && index != *rule.nth) continue;
    if (rule.every && index % *rule.every != 0) continue;
    // The draw happens only for calls that reach it, so a seed replays exactly.
    if (rule.probability && std::uniform_real_distribution<double>(0.0, 1.0)(random_) >= *rule.probability) continue;
    state.fires += 1;
    fired_.push_back(FiredFault{rule.name, operation, rule.effect, index, detail, upstream_->now_ns()});
    return rule;
  }
  return std::nullopt;
}

std::string FaultInjectingRuntime::do_name() const { return "faulty(" + upstream_->name() + ")"; }
int FaultInjectingRuntime::do_cuda_device_count() const { return upstream_->cuda_device_count(); }
bool FaultInjectingRuntime::do_can_pin() const { return upstream_->can_pin(); }

residency::ResidentValue FaultInjectingRuntime::do_copy_to(const residency::ResidentValue& value,
                                                           const ResidencyLocation& destination,
                                                           const std::optional<c10::Stream>& stream) {
  const std::string detail = "copy of " + std::to_string(value.logical_nbytes()) + " bytes to " + destination.name();
  if (const auto rule = select(FaultOperation::copy, destination, stream ? std::optional(stream->id()) : std::nullopt,
                               detail)) {
    if (rule->effect == FaultEffect::alias) {
      std::lock_guard lock(mutex_);
      const auto previous = last_copy_.find(destination);
      if (previous != last_copy_.end()) return previous->second;  // storage someone may already own
      throw InjectedOutOfMemoryError(rule->name, "injected alias (rule '" + rule->name + "') found no earlier copy "
                                     "to " + destination.name() + " to alias: " + detail);
    }
    throw InjectedOutOfMemoryError(rule->name, "injected allocation failure (rule '" + rule->name + "'): " + detail);
  }
  residency::ResidentValue copy = forward([&] { return upstream_->copy_to(value, destination, stream); });
  std::lock_guard lock(mutex_);
  const bool aliasing = std::any_of(rules_.begin(), rules_.end(), [](const RuleState& state) {
    return state.rule.effect == FaultEffect::alias;
  });
  if (aliasing) {
    last_copy_.insert_or_assign(destination, copy);
  } else {
    last_copy_.clear();
  }
  return copy;
}

std::optional<ResidencyLocation> FaultInjectingRuntime::do_locate(const residency::ResidentValue& value) const {
  return upstream_->locate(value);
}

residency::StorageKeys FaultInjectingRuntime::do_storage_keys(const residency::ResidentValue& value) const {
  return upstream_->storage_keys(value);
}

std::shared_ptr<CompletionEvent> FaultInjectingRuntime::do_record_event(const c10::Stream& stream) {
  const std::string detail = "event record on stream " + std::to_string(stream.id()) + " of " + stream.device().str();
  const auto rule = select(FaultOperation::record_event, stream_location(stream), stream.id(), detail);
  if (rule && rule->effect == FaultEffect::fail) {
    throw InjectedDeviceError(rule->name, "CUDA error: injected event record failure (rule '" + rule->name + "')");
  }
  auto event = forward([&] { return upstream_->record_event(stream); });
  if (!rule) return event;
  auto adjusted = std::make_shared<AdjustedEvent>();
  adjusted->upstream = std::move(event);
  adjusted->rule = rule->name;
  adjusted->never = rule->effect == FaultEffect::never_complete;
  adjusted->ready_at_ns = upstream_->now_ns() + rule->delay_ns;
  return adjusted;
}

bool FaultInjectingRuntime::do_query_event(const CompletionEvent& event) {
  if (const auto rule = select(FaultOperation::query_event, std::nullopt, std::nullopt, "event query")) {
    throw InjectedDeviceError(rule->name, "CUDA error: injected event query failure (rule '" + rule->name + "')");
  }
  const bool upstream_done = forward([&] { return upstream_->query_event(upstream_of(event)); });
  const auto* adjusted = dynamic_cast<const AdjustedEvent*>(&event);
  if (adjusted == nullptr) return upstream_done;
  return upstream_done && !adjusted->never && upstream_->now_ns() >= adjusted->ready_at_ns;
}

void FaultInjectingRuntime::do_synchronize_event(const CompletionEvent& event) {
  if (const auto rule = select(FaultOperation::synchronize_event, std::nullopt, std::nullopt, "event synchronize")) {
    throw InjectedDeviceError(rule->name, "CUDA error: injected event synchronize failure (rule '" + rule->name + "')");
  }
  const auto* adjusted = dynamic_cast<const AdjustedEvent*>(&event);
  if (adjusted != nullptr && adjusted->never) {
    throw InjectedDeviceError(adjusted->rule, "wait would never return: event made never-completing by rule '" +
                                                  adjusted->rule + "'");
  }
  forward([&] { upstream_->synchronize_event(upstream_of(event)); });
  if (adjusted == nullptr) return;
  // Wait out the injected delay. A virtual clock does not move while we wait,
  // so a wait that cannot finish is reported instead of spinning forever.
  std::int64_t last = upstream_->now_ns();
  while (last < adjusted->ready_at_ns) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    const std::int64_t now = upstream_->now_ns();
    if (now == last) {
      throw InjectedDeviceError(adjusted->rule, "wait on an event delayed by rule '" + adjusted->rule +
                                                    "' would never return: the clock does not advance while waiting");
    }
    last = now;
  }
}

void FaultInjectingRuntime::do_synchronize_stream(const c10::Stream& stream) {
  const std::string detail = "synchronize stream " + std::to_string(stream.id()) + " of " + stream.device().str();
  if (const auto rule = select(FaultOperation::synchronize_stream, stream_location(stream), stream.id(), detail)) {
    throw InjectedDeviceError(rule->name, "CUDA error: injected stream synchronize failure (rule '" + rule->name + "')");
  }
  forward([&] { upstream_->synchronize_stream(stream); });
}

std::optional<residency::AllocatorStats> FaultInjectingRuntime::do_allocator_stats(const c10::Device& device) {
  const std::string detail = "allocator statistics of " + device.str();
  if (const auto rule = select(FaultOperation::allocator_stats, residency::cuda_location(device.index()),
                               std::nullopt, detail)) {
    throw InjectedDeviceError(rule->name, "CUDA error: injected allocator statistics failure (rule '" + rule->name + "')");
  }
  return upstream_->allocator_stats(device);
}

std::int64_t FaultInjectingRuntime::do_now_ns() { return upstream_->now_ns(); }

}  // namespace fhelium::harness
