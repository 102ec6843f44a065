// Ring: the last `capacity` items pushed, oldest first; the manager's trace
// (TraceRecords) and its diagnostics. Slots are allocated once, as the ring
// first fills, and then overwritten in place: a full ring pushes without
// allocating a node (a deque allocated and freed one per block of pushes).
// Capacity 0 keeps nothing. Not synchronized: the manager's state gate guards it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace fhelium::residency::detail {

template <class T>
class Ring {
 public:
  explicit Ring(std::size_t capacity) : capacity_(capacity) {}

  std::size_t capacity() const noexcept { return capacity_; }
  std::size_t size() const noexcept { return slots_.size(); }

  // Keeps `item` (copied or moved in); with capacity 0 it is not even copied.
  template <class U>
  void push(U&& item) {
    push_in_place([&](T& slot) { slot = std::forward<U>(item); });
  }

  // Keeps the item `fill(slot)` writes into a slot: a fresh default-built one
  // while the ring fills, then the oldest item's, overwritten in place (so an
  // item's own buffers are reused). With capacity 0, `fill` is not called.
  template <class Fill>
  void push_in_place(Fill&& fill) {
    if (capacity_ == 0) return;
    if (slots_.size() < capacity_) {
      if (slots_.size() == slots_.capacity()) {
        slots_.reserve(std::min(capacity_, std::max<std::size_t>(16, 2 * slots_.size())));
      }
      T& slot = slots_.emplace_back();
      try {
        fill(slot);
      } catch (...) {
        slots_.pop_back();
        throw;
      }
      return;
    }
    fill(slots_[oldest_]);
    oldest_ = oldest_ + 1 == capacity_ ? 0 : oldest_ + 1;
  }

  // Calls `visit` on each item, oldest first.
  template <class F>
  void for_each(F&& visit) const {
    for (std::size_t index = oldest_; index < slots_.size(); ++index) visit(slots_[index]);
    for (std::size_t index = 0; index < oldest_; ++index) visit(slots_[index]);
  }

  // The items, oldest first.
  std::vector<T> items() const {
    std::vector<T> result;
    result.reserve(slots_.size());
    for_each([&](const T& item) { result.push_back(item); });
    return result;
  }

  void clear() noexcept {
    slots_.clear();
    oldest_ = 0;
  }

 private:
  std::size_t capacity_;
  std::vector<T> slots_;
  std::size_t oldest_ = 0;  // where the next push goes once full
};

}  // namespace fhelium::residency::detail
