// The two text steps of resolving a handle, done inline: comparing its short
// fields (manager ids like "manager-12", value types like "tensor") and
// reading its id's serial. Every call that names a value pays for them, so
// they avoid the library calls (memcmp, from_chars) that dominate at these
// lengths.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace fhelium::residency::detail {

namespace handle_text_detail {

template <class Word>
inline Word load(const char* at) noexcept {
  Word word;
  std::memcpy(&word, at, sizeof word);
  return word;
}

}  // namespace handle_text_detail

// a == b. Up to 16 bytes take two overlapping word loads per side.
inline bool same_text(std::string_view a, std::string_view b) noexcept {
  using handle_text_detail::load;
  const std::size_t size = a.size();
  if (size != b.size()) return false;
  const char* x = a.data();
  const char* y = b.data();
  if (size > 16) return std::memcmp(x, y, size) == 0;
  if (size >= 8) {
    return load<std::uint64_t>(x) == load<std::uint64_t>(y) &&
           load<std::uint64_t>(x + size - 8) == load<std::uint64_t>(y + size - 8);
  }
  if (size >= 4) {
    return load<std::uint32_t>(x) == load<std::uint32_t>(y) &&
           load<std::uint32_t>(x + size - 4) == load<std::uint32_t>(y + size - 4);
  }
  for (std::size_t index = 0; index < size; ++index) {
    if (x[index] != y[index]) return false;
  }
  return true;
}

// The serial a handle id spells: decimal digits, no sign and no leading zero,
// as the manager writes them. 0 (never a serial) for any other text, and for
// more than 19 digits, more than any manager issues.
inline std::uint64_t handle_serial(std::string_view id) noexcept {
  if (id.empty() || id.size() > 19 || id.front() == '0') return 0;
  std::uint64_t serial = 0;  // 19 digits stay below 2^64
  for (const char character : id) {
    const unsigned digit = static_cast<unsigned char>(character) - static_cast<unsigned>('0');
    if (digit > 9) return 0;
    serial = serial * 10 + digit;
  }
  return serial;
}

}  // namespace fhelium::residency::detail
