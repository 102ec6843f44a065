#include "detail/unix_clock.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

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

// Whether the kernel listed `flag` among the first CPU's flags in /proc/cpuinfo.
bool cpu_flag(const std::string& flag) {
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    for (std::string word; words >> word;) {
      if (word == flag) return true;
    }
    return false;
  }
  return false;
}

// The counter is trusted when the CPU says it is invariant (constant rate in
// every power state) and the kernel vouches for it: either it keeps its own
// time with the counter (`tsc`, chosen only after checking that the CPUs'
// counters agree), or it keeps time with the KVM paravirtual clock (itself
// the counter, scaled by the host) and has marked the counter reliable
// (`tsc_reliable`: the hypervisor guarantees it, so the kernel skips its own
// checks). A guest's system clock then costs about 25 ns a reading against
// about 13 for the counter.
bool counter_is_trusted() {
  if (const char* choice = std::getenv("FHELIUM_RESIDENCY_CLOCK"); choice != nullptr && std::strcmp(choice, "system") == 0) {
    return false;
  }
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0x80000007u, &eax, &ebx, &ecx, &edx) == 0 || (edx & (1u << 8)) == 0) return false;
  std::FILE* source = std::fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
  if (source == nullptr) return false;
  char name[32] = {};
  const bool read = std::fgets(name, sizeof name, source) != nullptr;
  std::fclose(source);
  if (!read) return false;
  if (std::strcmp(name, "tsc\n") == 0) return true;
  return std::strcmp(name, "kvm-clock\n") == 0 && cpu_flag("tsc_reliable");
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

std::int64_t unix_time_ns() {
  // Its own copy of process_clock()'s answer: one guard check per reading
  // instead of a call and a guard check.
  static UnixClock* const clock = UnixClock::process_clock();
  return clock != nullptr ? clock->now() : system_unix_ns();
}

UnixClock* UnixClock::process_clock() {
#if defined(__x86_64__)
  static UnixClock* const clock = []() -> UnixClock* {
    if (!counter_is_trusted()) return nullptr;
    static UnixClock instance(Sources{&system_unix_ns, &time_stamp_counter}, Timing{});
    return &instance;
  }();
  return clock;
#else
  return nullptr;
#endif
}

}  // namespace fhelium::residency::detail
