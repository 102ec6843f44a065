#include "detail/state_gate.hpp"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace fhelium::residency::detail {

namespace {

// Waits a few cycles without touching memory, telling the core that this is
// a spin loop.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#else
  std::atomic_signal_fence(std::memory_order_seq_cst);
#endif
}

// Spin rounds, each pausing twice as long as the one before (up to
// 2^max_pause_shift pauses, a few microseconds), before yielding; then yield
// rounds before sleeping.
constexpr int pause_rounds = 16;
constexpr int max_pause_shift = 10;
constexpr int yield_rounds = 34;

// A lane call waiting for a holder to leave (StateGate::await_leave) first
// spins for about as long as a typical locked call (2^lane_pause_rounds
// pauses in all), then yields until the lane wait is over.
constexpr int lane_pause_rounds = 8;

}  // namespace

StateGate::Entry StateGate::enter_slow() {
  const std::thread::id self = std::this_thread::get_id();
  for (int spin = 0;; ++spin) {
    std::uint32_t state = state_.load(std::memory_order_seq_cst);  // see set_loading
    if ((state & loading) != 0) return Entry::refused_loading;
    // Only this thread ever stores its own id, so a match is never stale.
    if ((state & busy) != 0 && owner_.load(std::memory_order_relaxed) == self) return Entry::refused_reentry;
    if ((state & busy) == 0) {
      if (state_.compare_exchange_weak(state, state | busy, std::memory_order_seq_cst, std::memory_order_relaxed)) {
        take_over(self);
        return Entry::entered;
      }
      continue;
    }
    if (spin < pause_rounds) {
      for (int i = 0, n = 1 << std::min(spin, max_pause_shift); i < n; ++i) cpu_relax();
      continue;
    }
    if (spin < pause_rounds + yield_rounds) {
      std::this_thread::yield();
      continue;
    }
    std::unique_lock lock(mutex_);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    // A leave() that stored before this re-check is seen here; one that
    // stores after it sees this sleeper and signals under the mutex, after
    // the wait below has begun, unless its unfenced check ran early: then
    // the timeout ends the wait.
    const std::uint32_t now = state_.load(std::memory_order_seq_cst);
    if ((now & busy) != 0 && (now & loading) == 0) released_.wait_for(lock, recheck_interval_);
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
    spin = 0;
  }
}

void StateGate::set_loading(bool on) noexcept {
  if (!on) {
    state_.fetch_and(~loading, std::memory_order_seq_cst);
    return;
  }
  // Read-modify-writes (rare: once per source load) that leave the busy bit
  // as it is; with the sleepers' sequentially consistent count and re-check
  // this signal is never missed.
  state_.fetch_or(loading, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) != 0) wake_sleepers();
}

namespace {

// A thread's identity for the lanes (numbered from 1 in the order threads
// first ask) and the lane it is using now; the same for every gate.
struct ThreadLane {
  std::uint32_t id;
  unsigned lane;
  // How far the thread moves on when it meets another in its lane: threads
  // with different strides do not keep meeting.
  unsigned stride;
};

ThreadLane& this_thread_lane() noexcept {
  static std::atomic<std::uint32_t> next{0};
  thread_local ThreadLane own = [] {
    const std::uint32_t id = next.fetch_add(1, std::memory_order_relaxed) + 1;
    return ThreadLane{id, id % StateGate::lane_count, 1 + id % (StateGate::lane_count - 1)};
  }();
  return own;
}

}  // namespace

unsigned StateGate::enter_own_lane_within(int waits) noexcept {
  ThreadLane& self = this_thread_lane();
  for (int attempt = 0; attempt < 2; ++attempt) {
    const unsigned lane = self.lane;
    if (enter_lane(lane)) {
      std::uint32_t& last = lanes_[lane].last_user;
      if (last != self.id) {
        if (last != 0) self.lane = (lane + self.stride) % lane_count;  // shared: use another next time
        last = self.id;
      }
      return lane;
    }
    if (state_.load(std::memory_order_relaxed) != 0) [[unlikely]] {
      // The gate is held, so no lane would do until its holder leaves.
      return waits > 0 && await_leave() ? enter_own_lane_within(waits - 1) : lane_count;
    }
    self.lane = (lane + self.stride) % lane_count;  // taken: try another
  }
  return lane_count;
}

bool StateGate::enter_lane_later(unsigned lane) noexcept {
  for (int waits = 0; waits < max_lane_waits; ++waits) {
    // When the gate is free the lane itself was taken: one more look.
    if (state_.load(std::memory_order_relaxed) != 0 && !await_leave()) return false;
    if (enter_lane(lane)) return true;
  }
  return false;
}

bool StateGate::await_leave() noexcept {
  std::chrono::steady_clock::time_point deadline{};
  for (int spin = 0;; ++spin) {
    const std::uint32_t state = state_.load(std::memory_order_relaxed);
    if ((state & busy) == 0) return true;
    if ((state & loading) != 0 || held_here()) return false;
    if (spin < lane_pause_rounds) {
      for (int i = 0, n = 1 << spin; i < n; ++i) cpu_relax();
      continue;
    }
    const auto now = std::chrono::steady_clock::now();
    if (spin == lane_pause_rounds) {
      deadline = now + lane_wait_;
    } else if (now >= deadline) {
      return false;
    }
    std::this_thread::yield();
  }
}

void StateGate::publish_lane(std::uint32_t bit) noexcept { published_lanes_.fetch_or(bit, std::memory_order_seq_cst); }

void StateGate::drain_lanes(std::uint32_t published) noexcept {
  for (unsigned lane = 0; lane < lane_count; ++lane) {
    const std::uint32_t bit = 1u << lane;
    if ((published & bit) == 0) continue;
    std::atomic<std::uint32_t>& word = lanes_[lane].state;
    for (int spin = 0;; ++spin) {
      std::uint32_t state = word.load(std::memory_order_seq_cst);
      if ((state & lane_held) != 0) {
        // A lane section is short and never blocks; its thread may have
        // been preempted, so stop spinning soon.
        if (spin < pause_rounds) {
          cpu_relax();
        } else {
          std::this_thread::yield();
        }
        continue;
      }
      // The load acquires: what the lane did before leaving is visible from here on.
      if (state == 0) break;
      if (word.compare_exchange_weak(state, 0, std::memory_order_acq_rel, std::memory_order_relaxed)) {
        used_lanes_ |= bit;
        break;
      }
    }
  }
}

void StateGate::wake_sleepers() noexcept {
  {
    std::lock_guard lock(mutex_);
  }
  released_.notify_all();
}

}  // namespace fhelium::residency::detail
