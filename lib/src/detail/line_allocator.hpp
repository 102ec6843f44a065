// LineAllocator: an allocator whose blocks own the cache lines they touch,
// and cache_line_bytes, the line size the detail types align to.
//
// Each block starts a cache line and is rounded up to whole lines, so no other
// allocation shares a line with it. Containers that one thread writes on
// every call while other threads work on their own (a lane's lease table)
// use it: with the default allocator two such tables, or one and a small
// object another thread reads on every call, can end up in one line, and
// each write then takes the line from the other core. On 2 cores that
// halved the throughput of two threads leasing different values in about
// half the runs, depending only on where the heap had put things.
#pragma once

#include <cstddef>

namespace fhelium::residency::detail {

inline constexpr std::size_t cache_line_bytes = 64;

// A block for `count` objects of `size` bytes, starting a cache line and
// rounded up to whole lines; out of line, so that the containers' inline
// paths stay as short as with the default allocator.
void* allocate_lines(std::size_t count, std::size_t size);
void release_lines(void* block) noexcept;

template <class T>
class LineAllocator {
 public:
  using value_type = T;
  static_assert(alignof(T) <= cache_line_bytes);

  LineAllocator() noexcept = default;
  template <class U>
  LineAllocator(const LineAllocator<U>&) noexcept {}

  T* allocate(std::size_t count) { return static_cast<T*>(allocate_lines(count, sizeof(T))); }
  void deallocate(T* block, std::size_t) noexcept { release_lines(block); }

  friend bool operator==(const LineAllocator&, const LineAllocator&) noexcept { return true; }
};

}  // namespace fhelium::residency::detail
