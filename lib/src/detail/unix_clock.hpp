// UnixClock: Unix time in nanoseconds from a constant-rate tick counter (the
// CPU's time-stamp counter), kept on the system clock by re-anchoring.
//
// Every transition report carries two timestamps. Reading the system clock
// costs a library call, the kernel's shared-page protocol and a serialized
// counter read (27-30 ns a reading on a 2-core x86-64 VM); this clock reads
// the counter and scales it (15-19 ns there).
//
// How it stays right:
//  - Until it is calibrated it returns the system clock. Calibration measures
//    the counter's rate over `calibrate_ns` of system time, between two
//    system readings each bracketed tightly by counter readings (a thread
//    preempted mid-reading does not skew the rate).
//  - Once calibrated it returns anchor + ticks x rate, where the anchor is a
//    (ticks, system time) pair taken at most `resync_ns` ago. A reading past
//    that age takes a new anchor from the system clock, and refines the rate
//    over the span since the previous anchor.
//  - A rate measured across a step of the system clock (settimeofday, an NTP
//    jump) differs from the current one by more than 1/1000: it is not taken,
//    but the anchor is, so the clock follows the step within `resync_ns`.
//    When the next span's rate agrees with it, though, the counter's own rate
//    has changed (a virtual machine moved to another host): that rate is
//    taken, so a reading is off by at most two spans' drift at the old rate.
//  - A counter that reads below the anchor (another socket's unsynchronized
//    counter) gets the system clock for that reading.
// Readers never block: the anchor is published under a sequence count, and
// one thread at a time (whichever finds it stale) takes the next one; the
// others read the system clock meanwhile.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

namespace fhelium::residency::detail {

class UnixClock {
 public:
  struct Sources {
    std::int64_t (*system_ns)();  // Unix time in nanoseconds
    std::uint64_t (*ticks)();     // a counter at a constant rate
  };
  struct Timing {
    std::int64_t calibrate_ns = 10'000'000;  // system time the first rate is measured over
    std::int64_t resync_ns = 1'000'000'000;  // the oldest anchor a reading scales from
    // The widest counter bracket around a system reading that still anchors
    // (about 0.7 us at 3 GHz; a reading takes 70 ticks): calibration's error is
    // then within 70 ppm, and each later anchor's within 1 ppm.
    std::uint64_t pair_ticks = 2048;
  };

  UnixClock(Sources sources, Timing timing) noexcept : sources_(sources), timing_(timing) {}
  UnixClock(const UnixClock&) = delete;
  UnixClock& operator=(const UnixClock&) = delete;

  std::int64_t now() noexcept {
    const std::uint64_t sequence = sequence_.load(std::memory_order_acquire);
    if (sequence != 0 && (sequence & 1) == 0) {
      const std::uint64_t base_ticks = base_ticks_.load(std::memory_order_relaxed);
      const std::int64_t base_ns = base_ns_.load(std::memory_order_relaxed);
      const std::uint64_t scale = scale_.load(std::memory_order_relaxed);
      const std::uint64_t limit = limit_ticks_.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (sequence_.load(std::memory_order_relaxed) == sequence) {
        // A counter below the anchor wraps past `limit` and takes the slow path.
        const std::uint64_t elapsed = sources_.ticks() - base_ticks;
        if (elapsed <= limit) [[likely]] return base_ns + scaled(elapsed, scale);
      }
    }
    return resync();
  }

  // Whether readings come from the counter (after the first calibration).
  bool calibrated() const noexcept { return sequence_.load(std::memory_order_acquire) != 0; }

  // The process's clock over the CPU's time-stamp counter, or nullptr where
  // the counter is not one to trust (trusts_counter): not x86-64, no
  // invariant counter, or a kernel that does not vouch for it.
  static UnixClock* process_clock();

  // What process_clock decides on, as read from the machine.
  struct CounterEvidence {
    // FHELIUM_RESIDENCY_CLOCK; nullptr when unset ("system" turns the counter off).
    const char* choice = nullptr;
    bool invariant_counter = false;  // CPUID 0x80000007, EDX bit 8
    // The kernel's clock source, the first line of its sysfs file ("tsc");
    // nullopt when the file cannot be read.
    std::optional<std::string> clock_source;
    std::string cpu_flags;  // the first "flags" line of /proc/cpuinfo; empty when there is none
  };
  // The counter is trusted when the CPU says it is invariant (constant rate
  // in every power state) and the kernel vouches for it: either it keeps its
  // own time with the counter (`tsc`, chosen only after checking that the
  // CPUs' counters agree), or it keeps time with the KVM paravirtual clock
  // (itself the counter, scaled by the host) and has marked the counter
  // reliable (`tsc_reliable`: the hypervisor guarantees it, so the kernel
  // skips its own checks). A guest's system clock then costs about 25 ns a
  // reading against about 13 for the counter.
  static bool trusts_counter(const CounterEvidence& evidence);

 private:
  // Nanoseconds for `ticks` at `scale` (nanoseconds per tick, times 2^32).
  static std::int64_t scaled(std::uint64_t ticks, std::uint64_t scale) noexcept {
    return static_cast<std::int64_t>((static_cast<unsigned __int128>(ticks) * scale) >> 32);
  }
  // The system clock's reading; on the way, calibrates or re-anchors when no
  // other thread is doing so.
  std::int64_t resync() noexcept;
  void publish(std::uint64_t ticks, std::int64_t system_ns, std::uint64_t scale) noexcept;

  const Sources sources_;
  const Timing timing_;

  // What readers scale from, published under sequence_ (odd while written;
  // 0 until calibrated).
  std::atomic<std::uint64_t> sequence_{0};
  std::atomic<std::uint64_t> base_ticks_{0};
  std::atomic<std::int64_t> base_ns_{0};
  std::atomic<std::uint64_t> scale_{0};
  std::atomic<std::uint64_t> limit_ticks_{0};

  // The writer's side, touched only while holding `writing_`.
  std::atomic<bool> writing_{false};
  bool started_ = false;
  std::uint64_t anchor_ticks_ = 0;  // calibration start, then the last anchor
  std::int64_t anchor_ns_ = 0;
  std::uint64_t anchor_scale_ = 0;  // 0 until calibrated
  std::uint64_t candidate_scale_ = 0;  // the last span's rate when it disagreed with anchor_scale_, else 0
};

// Unix time in nanoseconds: the process clock's reading where there is one
// (UnixClock::process_clock), the system clock's elsewhere. TorchRuntime's clock.
std::int64_t unix_time_ns();

}  // namespace fhelium::residency::detail
