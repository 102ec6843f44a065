#include "detail/unix_clock.hpp"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>

#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

namespace fhelium::residency::detail {

namespace {

// Nanoseconds per tick, times 2^32, over a span; 0 when it does not fit.
std::uint64_t rate(std::int64_t span_ns, std::uint64_t span_ticks) noexcept {
  if (span_ns <= 0 || span_ticks == 0) return 0;
  const unsigned __int128 scale = (static_cast<unsigned __int128>(span_ns) << 32) / span_ticks;
  return scale == 0 || scale > UINT64_MAX ? 0 : static_cast<std::uint64_t>(scale);
}

// Whether `measured` is within 1/1000 of `current`: a rate across a step of
// the system clock is not.
bool agrees(std::uint64_t measured, std::uint64_t current) noexcept {
  const std::uint64_t difference = measured > current ? measured - current : current - measured;
  return difference <= current / 1000;
}

std::int64_t system_unix_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

#if defined(__x86_64__)
std::uint64_t time_stamp_counter() { return __rdtsc(); }

// The first CPU's flags line of /proc/cpuinfo; empty when there is none.
std::string cpu_flags_line() {
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);) {
    if (line.rfind("flags", 0) == 0) return line;
  }
  return {};
}

UnixClock::CounterEvidence read_counter_evidence() {
  UnixClock::CounterEvidence evidence;
  evidence.choice = std::getenv("FHELIUM_RESIDENCY_CLOCK");
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  evidence.invariant_counter = __get_cpuid(0x80000007u, &eax, &ebx, &ecx, &edx) != 0 && (edx & (1u << 8)) != 0;
  std::ifstream source("/sys/devices/system/clocksource/clocksource0/current_clocksource");
  if (std::string name; std::getline(source, name)) evidence.clock_source = name;
  evidence.cpu_flags = cpu_flags_line();
  return evidence;
}
#endif

}  // namespace

std::int64_t UnixClock::resync() noexcept {
  // The system time is bracketed by two counter readings. A wide bracket
  // (the thread was preempted or interrupted in between) pairs the time with
  // no particular tick, so it anchors nothing.
  const std::uint64_t before = sources_.ticks();
  const std::int64_t system = sources_.system_ns();
  const std::uint64_t after = sources_.ticks();
  if (after < before || after - before > timing_.pair_ticks) return system;
  const std::uint64_t ticks = before + (after - before) / 2;
  if (writing_.exchange(true, std::memory_order_acquire)) return system;  // another thread is at it
  const bool forward = ticks > anchor_ticks_ && system > anchor_ns_;
  const std::int64_t span_ns = system - anchor_ns_;
  const std::uint64_t span_ticks = ticks - anchor_ticks_;
  // Only a long enough span measures a rate (reading jitter over 10 ms is
  // parts per million).
  const bool measurable = started_ && forward && span_ns >= timing_.calibrate_ns;
  bool anchor = false;
  if (anchor_scale_ == 0) {
    // Calibrating: the first reading starts it, a reading that went back
    // starts it again, and one a long enough span later completes it.
    if (measurable) anchor_scale_ = rate(span_ns, span_ticks);
    anchor = !started_ || !forward || measurable;
    started_ = true;
  } else if (!forward || span_ticks > limit_ticks_.load(std::memory_order_relaxed)) {
    // Stale, or the counter or the system clock went back: a new anchor,
    // refining the rate when the span measures one. A raced reading that
    // found the anchor fresh changes nothing.
    if (measurable) {
      const std::uint64_t measured = rate(span_ns, span_ticks);
      if (measured != 0) {
        if (agrees(measured, anchor_scale_) || (candidate_scale_ != 0 && agrees(measured, candidate_scale_))) {
          // The rate refined; or the counter's own rate changed (a virtual
          // machine moved to a host whose counter runs at another rate), as
          // two spans in a row now agree.
          anchor_scale_ = measured;
          candidate_scale_ = 0;
        } else {
          // A step of the system clock, or the first span at a changed
          // rate: the next span tells which.
          candidate_scale_ = measured;
        }
      }
    }
    anchor = true;
  }
  if (anchor) {
    anchor_ticks_ = ticks;
    anchor_ns_ = system;
    if (anchor_scale_ != 0) publish(ticks, system, anchor_scale_);
  }
  writing_.store(false, std::memory_order_release);
  return system;
}

void UnixClock::publish(std::uint64_t ticks, std::int64_t system_ns, std::uint64_t scale) noexcept {
  const unsigned __int128 limit = (static_cast<unsigned __int128>(timing_.resync_ns) << 32) / scale;
  const std::uint64_t sequence = sequence_.load(std::memory_order_relaxed);  // even: only this writer changes it
  sequence_.store(sequence + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  base_ticks_.store(ticks, std::memory_order_relaxed);
  base_ns_.store(system_ns, std::memory_order_relaxed);
  scale_.store(scale, std::memory_order_relaxed);
  limit_ticks_.store(limit > UINT64_MAX / 2 ? UINT64_MAX / 2 : static_cast<std::uint64_t>(limit),
                     std::memory_order_relaxed);
  sequence_.store(sequence + 2, std::memory_order_release);
}

bool UnixClock::trusts_counter(const CounterEvidence& evidence) {
  if (evidence.choice != nullptr && std::strcmp(evidence.choice, "system") == 0) return false;
  if (!evidence.invariant_counter || !evidence.clock_source) return false;
  if (*evidence.clock_source == "tsc") return true;
  if (*evidence.clock_source != "kvm-clock") return false;
  // Whole words after the colon: "nonstop_tsc" is not "tsc_reliable".
  constexpr std::string_view wanted = "tsc_reliable";
  const std::string_view flags = evidence.cpu_flags;
  const std::size_t colon = flags.find(':');
  if (colon == std::string_view::npos) return false;
  const auto blank = [](char c) { return c == ' ' || c == '\t'; };
  for (std::size_t at = flags.find(wanted, colon); at != std::string_view::npos; at = flags.find(wanted, at + 1)) {
    const std::size_t end = at + wanted.size();
    if ((at == colon + 1 || blank(flags[at - 1])) && (end == flags.size() || blank(flags[end]))) return true;
  }
  return false;
}

[[gnu::hot]]
std::int64_t unix_time_ns() {
  // Its own copy of process_clock()'s answer: one guard check per reading
  // instead of a call and a guard check.
  static UnixClock* const clock = UnixClock::process_clock();
  return clock != nullptr ? clock->now() : system_unix_ns();
}

UnixClock* UnixClock::process_clock() {
#if defined(__x86_64__)
  static UnixClock* const clock = []() -> UnixClock* {
    if (!trusts_counter(read_counter_evidence())) return nullptr;
    static UnixClock instance(Sources{&system_unix_ns, &time_stamp_counter}, Timing{});
    return &instance;
  }();
  return clock;
#else
  return nullptr;
#endif
}

}  // namespace fhelium::residency::detail
