#include "detail/state_gate.hpp"

namespace fhelium::residency::detail {

StateGate::Entry StateGate::enter_slow() {
  const std::thread::id self = std::this_thread::get_id();
  for (int spin = 0;; ++spin) {
    std::uint32_t state = state_.load(std::memory_order_acquire);
    if ((state & loading) != 0) return Entry::refused_loading;
    // Only this thread ever stores its own id, so a match is never stale.
    if ((state & busy) != 0 && owner_.load(std::memory_order_relaxed) == self) return Entry::refused_reentry;
    if ((state & busy) == 0) {
      if (state_.compare_exchange_weak(state, state | busy, std::memory_order_acquire, std::memory_order_relaxed)) {
        owner_.store(self, std::memory_order_relaxed);
        return Entry::entered;
      }
      continue;
    }
    if (spin < 50) {
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
    state_.fetch_and(~loading, std::memory_order_release);
    return;
  }
  // Read-modify-writes (rare: once per source load) that leave the busy bit
  // as it is; with the sleepers' sequentially consistent count and re-check
  // this signal is never missed.
  state_.fetch_or(loading, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) != 0) wake_sleepers();
}

void StateGate::wake_sleepers() noexcept {
  {
    std::lock_guard lock(mutex_);
  }
  released_.notify_all();
}

}  // namespace fhelium::residency::detail
