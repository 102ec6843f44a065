// FaultInjectingRuntime: a decorator that fails or delays chosen runtime calls.
//
// It wraps any DeviceRuntime (simulated or real) and forwards every call
// upstream, except where a FaultRule selects it. Rules are data: an operation,
// optional location and stream filters, and a selector (the Nth matching call,
// every Kth, or probability p under the runtime's seed), with an effect.
// Injected errors have the types the real runtime throws -- an allocation
// failure is a c10::OutOfMemoryError, a device failure a c10::Error -- and also
// derive from InjectedFault, so reports can tell them from real ones. Every
// fired fault is logged in order and can be read back with fired().
//
// Thread-safe: rule matching and the fired log are guarded by one mutex.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "fhelium/residency/runtime.hpp"

namespace fhelium::harness {

using residency::ResidencyLocation;

enum class FaultOperation { copy, record_event, query_event, synchronize_event, synchronize_stream, allocator_stats };
enum class FaultEffect {
  fail,            // the call throws
  delay,           // record_event only: the event completes delay_ns after it would have
  never_complete,  // record_event only: the event never completes; waits on it throw
  alias,           // copy only: returns the storage of this runtime's previous copy to the same
                   // location (remembered while an alias rule is armed), or fails when there is none
};

// Which calls a rule sees: any; step: not a harness's own checks between
// and around the operations under test (snapshots, a comparison explain);
// checks: only those.
enum class FaultCalls { any, step, checks };

const char* to_string(FaultOperation operation) noexcept;
const char* to_string(FaultEffect effect) noexcept;
// Parse the names above ("copy", "record_event", ...); std::invalid_argument otherwise.
FaultOperation parse_fault_operation(const std::string& text);
FaultEffect parse_fault_effect(const std::string& text);

struct FaultRule {
  std::string name;
  FaultOperation operation = FaultOperation::copy;
  // Copy destination, or the device of the stream/event; absent = any.
  std::optional<ResidencyLocation> location;
  // Stream id for stream and event operations; absent = any.
  std::optional<std::int64_t> stream_id;
  // Selectors over matching calls (1-based); absent ones do not restrict.
  std::optional<std::int64_t> nth;
  std::optional<std::int64_t> every;
  std::optional<double> probability;
  // Stop firing after this many fires; absent = unlimited.
  std::optional<std::int64_t> max_fires;
  FaultEffect effect = FaultEffect::fail;
  std::int64_t delay_ns = 0;
  // Which calls the rule sees (the others pass by, uncounted): every matching
  // call, only those made outside the spans a harness marks as its own
  // checks (begin_checking), or only those inside them.
  FaultCalls during = FaultCalls::any;

  // Throws std::invalid_argument naming the rule and field for a bad rule.
  void validate() const;
};

struct FiredFault {
  std::string rule;
  FaultOperation operation;
  FaultEffect effect;
  std::int64_t call_index;  // 1-based index among calls matching the rule
  std::string detail;
  std::int64_t at_ns = 0;   // the upstream runtime's clock when it fired
};

// Mixin tag carried by every injected exception.
class InjectedFault {
 public:
  virtual ~InjectedFault() = default;
  const std::string& rule() const noexcept { return rule_; }

 protected:
  explicit InjectedFault(std::string rule) : rule_(std::move(rule)) {}

 private:
  std::string rule_;
};

// Whether `error` was raised by a FaultInjectingRuntime; the rule name if so.
std::optional<std::string> injected_rule(const std::exception& error);

class FaultInjectingRuntime final : public residency::DeviceRuntime {
 public:
  FaultInjectingRuntime(std::shared_ptr<residency::DeviceRuntime> upstream, std::vector<FaultRule> rules,
                        std::uint64_t seed);

  void add_rule(FaultRule rule);
  void clear_rules();
  // Removes the rules named `name`; returns how many were removed.
  std::size_t remove_rule(const std::string& name);
  std::vector<FiredFault> fired() const;
  // Marks the calls made until the matching end_checking() as a harness's own
  // checks (see FaultCalls). Spans nest, and belong to the runtime, not to a
  // thread: calls other threads make meanwhile count as checks too.
  // end_checking() without a span throws std::logic_error.
  void begin_checking();
  void end_checking();
  const std::shared_ptr<residency::DeviceRuntime>& upstream() const noexcept { return upstream_; }
  // How many device calls passed on to the runtime below (copies, event
  // records, queries and waits, stream waits) threw there: failures of the
  // device itself, or of a runtime wrapped around it, that no rule injected.
  std::int64_t upstream_failures() const noexcept { return upstream_failures_.load(); }

 private:
  struct RuleState {
    FaultRule rule;
    std::int64_t matches = 0;
    std::int64_t fires = 0;
  };

  // The rule that fires for this call, if any (and logs it).
  // `call()`, a call to the runtime below, counted in upstream_failures()
  // when it throws.
  template <class Call>
  decltype(auto) forward(Call&& call) {
    try {
      return call();
    } catch (...) {
      upstream_failures_.fetch_add(1);
      throw;
    }
  }

  std::optional<FaultRule> select(FaultOperation operation, const std::optional<ResidencyLocation>& location,
                                  const std::optional<std::int64_t>& stream_id, const std::string& detail);

  std::string do_name() const override;
  int do_cuda_device_count() const override;
  bool do_can_pin() const override;
  residency::ResidentValue do_copy_to(const residency::ResidentValue& value, const ResidencyLocation& destination,
                                      const std::optional<c10::Stream>& stream) override;
  std::optional<ResidencyLocation> do_locate(const residency::ResidentValue& value) const override;
  residency::StorageKeys do_storage_keys(const residency::ResidentValue& value) const override;
  std::shared_ptr<residency::CompletionEvent> do_record_event(const c10::Stream& stream) override;
  bool do_query_event(const residency::CompletionEvent& event) override;
  void do_synchronize_event(const residency::CompletionEvent& event) override;
  void do_synchronize_stream(const c10::Stream& stream) override;
  std::optional<residency::AllocatorStats> do_allocator_stats(const c10::Device& device) override;
  std::int64_t do_now_ns() override;

  const std::shared_ptr<residency::DeviceRuntime> upstream_;
  mutable std::mutex mutex_;
  std::vector<RuleState> rules_;
  std::vector<FiredFault> fired_;
  int checking_depth_ = 0;
  std::atomic<std::int64_t> upstream_failures_{0};
  std::mt19937_64 random_;
  // While an alias rule is armed: the last copy made to each location.
  std::map<ResidencyLocation, residency::ResidentValue> last_copy_;
};

}  // namespace fhelium::harness
