// Whether a name, label or reason is blank: empty or only whitespace. Every
// record and request that requires non-empty text asks this one question, so
// they all refuse the same strings: those that Python's str.strip() empties,
// as far as ASCII goes (space, \t, \n, \v, \f, \r and the separators 0x1c to
// 0x1f). Other bytes, UTF-8 sequences included, count as text.
#pragma once

#include <string_view>

namespace fhelium::residency::detail {

inline bool is_blank(std::string_view text) noexcept {
  for (const char c : text) {
    const bool space = c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f');
    if (!space) return false;
  }
  return true;
}

}  // namespace fhelium::residency::detail
