#include "detail/line_allocator.hpp"

#include <limits>
#include <new>

namespace fhelium::residency::detail {

void* allocate_lines(std::size_t count, std::size_t size) {
  if (count > (std::numeric_limits<std::size_t>::max() - cache_line_bytes) / size) throw std::bad_array_new_length();
  const std::size_t bytes = (count * size + cache_line_bytes - 1) / cache_line_bytes * cache_line_bytes;
  return ::operator new(bytes, std::align_val_t{cache_line_bytes});
}

void release_lines(void* block) noexcept { ::operator delete(block, std::align_val_t{cache_line_bytes}); }

}  // namespace fhelium::residency::detail
