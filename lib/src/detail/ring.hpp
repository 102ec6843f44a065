// Ring: the last `capacity` items pushed, oldest first; the manager's trace
// (TraceRecords) and its diagnostics. Slots live in fixed-size blocks,
// allocated one at a time as the ring first fills and never moved, so every
// push costs about the same: a vector grown by doubling moved all the items
// it kept at each doubling, which with a trace capacity of a million records
// meant one transition moving half a million of them under the state lock,
// and the ring briefly needing half as much memory again as it keeps. A full
// ring overwrites the oldest item's slot in place, reusing its buffers.
// Capacity 0 keeps nothing. Not synchronized: the manager's state gate
// guards it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace fhelium::residency::detail {

template <class T>
class Ring {
 public:
  // Slots per block: a power of two (an index splits with a shift and a
  // mask), a block of trace records about 50 KiB.
  static constexpr std::size_t block_slots = 256;

  explicit Ring(std::size_t capacity) : capacity_(capacity) {}

  std::size_t capacity() const noexcept { return capacity_; }
  std::size_t size() const noexcept { return size_; }

  // Keeps `item` (copied or moved in); with capacity 0 it is not even copied.
  template <class U>
  void push(U&& item) {
    push_in_place([&](T& slot) { slot = std::forward<U>(item); });
  }

  // Keeps the item `fill(slot)` writes into a slot: a fresh default-built one
  // while the ring fills, then the oldest item's, overwritten in place (so an
  // item's own buffers are reused). With capacity 0, `fill` is not called.
  // While the ring fills, a fill that throws keeps nothing.
  template <class Fill>
  void push_in_place(Fill&& fill) {
    if (capacity_ == 0) return;
    if (size_ < capacity_) {
      if (size_ == blocks_.size() * block_slots) add_block();
      // Built as it is first used, so that a new block is not written whole
      // at once (which would evict the caller's working set).
      T* slot = new (&at(size_)) T();
      try {
        fill(*slot);
      } catch (...) {
        slot->~T();
        throw;
      }
      ++size_;
      return;
    }
    fill(at(oldest_));
    oldest_ = oldest_ + 1 == capacity_ ? 0 : oldest_ + 1;
  }

  // Calls `visit` on each item, oldest first.
  template <class F>
  void for_each(F&& visit) const {
    for (std::size_t index = oldest_; index < size_; ++index) visit(at(index));
    for (std::size_t index = 0; index < oldest_; ++index) visit(at(index));
  }

  // The items, oldest first.
  std::vector<T> items() const {
    std::vector<T> result;
    result.reserve(size_);
    for_each([&](const T& item) { result.push_back(item); });
    return result;
  }

  // Drops every item and frees the blocks.
  void clear() noexcept {
    for (std::size_t index = 0; index < size_; ++index) at(index).~T();
    for (std::size_t block = 0; block < blocks_.size(); ++block) {
      std::allocator<T>().deallocate(blocks_[block], block_size(block));
    }
    blocks_.clear();
    size_ = 0;
    oldest_ = 0;
  }

  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;
  ~Ring() { clear(); }

 private:
  T& at(std::size_t index) noexcept { return blocks_[index / block_slots][index % block_slots]; }
  const T& at(std::size_t index) const noexcept { return blocks_[index / block_slots][index % block_slots]; }
  // Slots in block `block`: block_slots, or fewer where the capacity ends sooner.
  std::size_t block_size(std::size_t block) const noexcept {
    return std::min(block_slots, capacity_ - block * block_slots);
  }
  // Storage for the next block's slots, built one at a time as they are used.
  void add_block() {
    // Room first: push_back cannot fail once the block is allocated.
    if (blocks_.size() == blocks_.capacity()) blocks_.reserve(2 * blocks_.size() + 1);
    blocks_.push_back(std::allocator<T>().allocate(block_size(blocks_.size())));
  }

  std::size_t capacity_;
  std::vector<T*> blocks_;  // each from std::allocator<T>, block_size() slots
  std::size_t size_ = 0;    // slots built and in use, at most capacity_
  std::size_t oldest_ = 0;  // where the next push goes once full
};

}  // namespace fhelium::residency::detail
