#include "detail/check.hpp"

#include <cstdio>
#include <cstdlib>

namespace fhelium::residency::detail {

void invariant_failed(const char* condition, const char* message, const char* file, int line) noexcept {
  std::fprintf(stderr, "fhelium residency invariant violated at %s:%d: %s (%s)\n", file, line, message, condition);
  std::abort();
}

}  // namespace fhelium::residency::detail
