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
//
// Beside the exclusive holder the gate has lanes: a few short sections that
// run concurrently with one another but never with a holder. A lane is
// entered with one compare-exchange on a word of its own cache line, and
// that word is all it writes of the gate, so threads in different lanes do
// not contend. Entering a lane publishes the lane, then looks at the state
// word; entering the gate takes the state word, then waits for every
// published lane that is held to be left. Both sides are sequentially
// consistent, so either the lane sees the holder (and gives way, touching
// nothing) or the holder sees the lane (and waits for it). A lane is never
// held while waiting: when its word is taken it is refused, and when a
// holder is in it is refused (enter_lane) or first waits briefly, holding
// nothing, for the holder to leave (enter_lane_soon); a refused caller goes
// through enter() instead. A lane section must not call code
// that could come back into the gate (user code, a runtime's virtual calls)
// and must not block: a holder spins for it. Each lane remembers that it was
// used since the last entry; the holder collects that (take_used_lanes) so
// the owner of the state can fold in what the lanes did.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "detail/line_allocator.hpp"

namespace fhelium::residency::detail {

class StateGate {
 public:
  enum class Entry { entered, refused_loading, refused_reentry };

  // How long a sleeping waiter waits for a signal before it looks again.
  static constexpr std::chrono::microseconds default_recheck_interval{500};

  // How long a lane call waits for a holder to leave before it queues for
  // the gate instead (enter_lane_soon): far longer than a typical locked
  // call, far shorter than a time slice.
  static constexpr std::chrono::microseconds default_lane_wait{50};

  // `recheck_interval`: see above; tests lengthen it so that only a signal
  // can wake a sleeper. `lane_wait`: see enter_lane_soon.
  explicit StateGate(std::chrono::microseconds recheck_interval = default_recheck_interval,
                     std::chrono::microseconds lane_wait = default_lane_wait) noexcept
      : recheck_interval_(recheck_interval), lane_wait_(lane_wait) {}

  static constexpr unsigned lane_count = 8;
  StateGate(const StateGate&) = delete;
  StateGate& operator=(const StateGate&) = delete;

  // Blocks while another thread holds the gate. Refused (without waiting
  // any further) while the holder is loading, or when this thread holds it.
  // The uncontended entry is inline; waiting and refusal are not.
  // Once entered, no lane is held until leave().
  Entry enter() {
    std::uint32_t expected = 0;
    if (state_.compare_exchange_strong(expected, busy, std::memory_order_seq_cst, std::memory_order_relaxed))
        [[likely]] {
      take_over(std::this_thread::get_id());
      return Entry::entered;
    }
    return enter_slow();
  }
  // The lanes entered since the previous entry (a bit per lane), and forgets
  // them; by the holder only.
  std::uint32_t take_used_lanes() noexcept {
    const std::uint32_t used = used_lanes_;
    used_lanes_ = 0;
    return used;
  }

  // Enters lane `lane` (below lane_count); false, having changed nothing,
  // when the gate is held or the lane is taken.
  bool enter_lane(unsigned lane) noexcept {
    LaneWord& word = lanes_[lane];
    std::uint32_t before = word.state.load(std::memory_order_relaxed);
    if ((before & lane_held) != 0) return false;
    const std::uint32_t bit = 1u << lane;
    // Sequentially consistent (a plain load on x86), so that a holder's look at
    // the published lanes after this is certain to include this one.
    if ((published_lanes_.load(std::memory_order_seq_cst) & bit) == 0) publish_lane(bit);
    if (!word.state.compare_exchange_strong(before, lane_held | lane_used, std::memory_order_seq_cst,
                                            std::memory_order_relaxed)) {
      return false;
    }
    if (state_.load(std::memory_order_seq_cst) != 0) [[unlikely]] {
      word.state.store(before, std::memory_order_release);  // as it was: nothing was done in the lane
      return false;
    }
    return true;
  }
  // Enters a lane for a call of this thread's own: the lane this thread
  // keeps using, unless another thread is in it. A thread that finds another
  // one's traces in its lane moves to another lane for its next call, so
  // threads that run at once settle in lanes of their own. Returns the lane,
  // or lane_count (having changed nothing) when the gate stayed held (see
  // enter_lane_soon) or no lane was free at the first two tries.
  unsigned enter_own_lane() noexcept { return enter_own_lane_within(max_lane_waits); }
  // Enters lane `lane` as enter_lane does, but while another thread holds
  // the gate it first waits up to the lane wait (await_leave) for the holder
  // to leave. False, having changed nothing, when the lane is taken, or the
  // gate is this thread's, loading, or held past that wait.
  //
  // Falling back to enter() the moment a holder is seen would turn a lane
  // call into a gate entry, which holds every other thread out of its lane
  // in turn: with more threads than cores one preempted holder then keeps
  // the others queueing for the gate long after it has left.
  bool enter_lane_soon(unsigned lane) noexcept { return enter_lane(lane) || enter_lane_later(lane); }
  void leave_lane(unsigned lane) noexcept { lanes_[lane].state.store(lane_used, std::memory_order_release); }
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

  static constexpr std::uint32_t lane_held = 1;
  static constexpr std::uint32_t lane_used = 2;  // since the holder last looked

  struct alignas(cache_line_bytes) LaneWord {
    std::atomic<std::uint32_t> state{0};
    // The thread that last entered for a call of its own (enter_own_lane);
    // 0 for none. Guarded by `state`.
    std::uint32_t last_user = 0;
  };

  // A lane call waits for holders to leave at most this many times, so a
  // stream of holders cannot keep it from queueing for the gate for long.
  static constexpr int max_lane_waits = 2;

  Entry enter_slow();
  // enter_own_lane, waiting for holders up to `waits` more times.
  unsigned enter_own_lane_within(int waits) noexcept;
  // enter_lane_soon once enter_lane has refused.
  bool enter_lane_later(unsigned lane) noexcept;
  // Waits, spinning briefly and then yielding up to the lane wait, until no
  // other thread holds the gate: true once it was seen free. False at once
  // when this thread holds it or its holder is loading (a load runs user
  // code of unknown length), and false when the holders stay past the wait.
  bool await_leave() noexcept;
  // The rest of becoming the holder, once the state word is taken: who holds
  // the gate, and no lane held from here on.
  void take_over(std::thread::id self) noexcept {
    owner_.store(self, std::memory_order_relaxed);
    const std::uint32_t published = published_lanes_.load(std::memory_order_seq_cst);
    if (published != 0) [[unlikely]] drain_lanes(published);
  }
  void wake_sleepers() noexcept;
  // Marks lane `bit` as one that holders must look at, once for the gate's life.
  void publish_lane(std::uint32_t bit) noexcept;
  // By a new holder: waits until no lane of `published` is held, and notes
  // (and clears) the ones used.
  void drain_lanes(std::uint32_t published) noexcept;

  // Written only by the holder, and by the compare-exchange that makes one.
  std::atomic<std::uint32_t> state_{0};
  // The lanes ever entered (a bit per lane): read at every entry, written
  // once per lane.
  std::atomic<std::uint32_t> published_lanes_{0};
  std::uint32_t used_lanes_ = 0;  // by the holder
  std::atomic<std::thread::id> owner_{};
  std::atomic<int> sleepers_{0};  // changed under mutex_
  std::mutex mutex_;
  std::condition_variable released_;
  const std::chrono::microseconds recheck_interval_;
  const std::chrono::microseconds lane_wait_;
  LaneWord lanes_[lane_count];
};

}  // namespace fhelium::residency::detail
