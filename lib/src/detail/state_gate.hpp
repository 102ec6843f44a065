// StateGate: the manager's state lock. One public call holds it at a time.
//
// It differs from a mutex in two ways the manager needs:
//  - reentry fails instead of deadlocking: a call from the holding thread (a
//    callback of one of the manager's own operations) is refused, and while
//    the holder runs a source load every other call is refused too, waiters
//    included, since they would otherwise wait for user code of unknown
//    length that may itself be waiting for them;
//  - an uncontended enter is one atomic read-modify-write and a leave is a
//    plain store: only the holder writes the state word, so leaving needs no
//    lock prefix. Waiting threads first spin with a growing pause between
//    looks (calls are short; a pause keeps the waiter off the state word's
//    cache line while the holder works on it), then yield for a while, then
//    sleep on a condition variable. A leaving thread signals when it sees a
//    sleeper; since its store and that check are not fenced, it can miss one
//    that went to sleep at that very moment, so sleepers also wake every
//    recheck interval (default_recheck_interval) and look again. A missed
//    signal therefore costs that one waiter at most one interval, and never
//    a hang.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace fhelium::residency::detail {

class StateGate {
 public:
  enum class Entry { entered, refused_loading, refused_reentry };

  // How long a sleeping waiter waits for a signal before it looks again.
  static constexpr std::chrono::microseconds default_recheck_interval{500};

  // `recheck_interval`: see above; tests lengthen it so that only a signal
  // can wake a sleeper.
  explicit StateGate(std::chrono::microseconds recheck_interval = default_recheck_interval) noexcept
      : recheck_interval_(recheck_interval) {}
  StateGate(const StateGate&) = delete;
  StateGate& operator=(const StateGate&) = delete;

  // Blocks while another thread holds the gate. Refused (without waiting
  // any further) while the holder is loading, or when this thread holds it.
  // The uncontended entry is inline; waiting and refusal are not.
  Entry enter() {
    std::uint32_t expected = 0;
    if (state_.compare_exchange_strong(expected, busy, std::memory_order_acquire, std::memory_order_relaxed))
        [[likely]] {
      owner_.store(std::this_thread::get_id(), std::memory_order_relaxed);
      return Entry::entered;
    }
    return enter_slow();
  }
  // Only by the thread that entered, with loading off.
  void leave() noexcept {
    owner_.store(std::thread::id(), std::memory_order_relaxed);
    state_.store(0, std::memory_order_release);
    if (sleepers_.load(std::memory_order_relaxed) != 0) [[unlikely]] wake_sleepers();
  }
  // By the holder around a source load: refuses every enter meanwhile and
  // wakes the sleepers so that they fail instead of waiting. Turning loading
  // off is sequentially consistent, and so is the slow path's look at the
  // state that refuses an entry for loading: a thread that writes something
  // (sequentially consistent) before it is refused for a load is therefore
  // seen by the loading holder when it reads that thing (sequentially
  // consistent) after the load.
  void set_loading(bool loading) noexcept;
  // Whether this thread holds the gate (inside one of its calls, loading or
  // not).
  bool held_here() const noexcept {
    return (state_.load(std::memory_order_relaxed) & busy) != 0 &&
           owner_.load(std::memory_order_relaxed) == std::this_thread::get_id();
  }

 private:
  static constexpr std::uint32_t busy = 1;
  static constexpr std::uint32_t loading = 2;

  Entry enter_slow();
  void wake_sleepers() noexcept;

  // Written only by the holder, and by the compare-exchange that makes one.
  std::atomic<std::uint32_t> state_{0};
  std::atomic<std::thread::id> owner_{};
  std::atomic<int> sleepers_{0};  // changed under mutex_
  std::mutex mutex_;
  std::condition_variable released_;
  const std::chrono::microseconds recheck_interval_;
};

}  // namespace fhelium::residency::detail
