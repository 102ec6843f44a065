// Internal invariant checks. A failed check is a bug in this library, never a
// user error: it prints what broke and where, then aborts. Checks stay on in
// every build type because the accounting they guard is cheap to verify and
// expensive to get wrong silently.
#pragma once

namespace fhelium::residency::detail {

[[noreturn]] void invariant_failed(const char* condition, const char* message, const char* file, int line) noexcept;

}  // namespace fhelium::residency::detail

#define FHELIUM_CHECK(condition, message)                                                       \
  do {                                                                                          \
    if (!(condition)) ::fhelium::residency::detail::invariant_failed(#condition, message, __FILE__, __LINE__); \
  } while (false)
