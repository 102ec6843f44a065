// The check every call makes of a handle it is given, with its common case
// inline: a handle whose three fields each start with a visible character is
// well formed (every whitespace character is at most ' '), decided without a
// call; any other goes to validate_handle(), which names the blank field.
#pragma once

#include <string>

#include "fhelium/residency/model.hpp"

namespace fhelium::residency::detail {

inline bool starts_visible(const std::string& field) noexcept {
  return !field.empty() && static_cast<unsigned char>(field.front()) > ' ';
}

// True for most well-formed handles; false says nothing (validate_handle decides).
inline bool plainly_well_formed(const ResidencyHandle& handle) noexcept {
  return starts_visible(handle.manager_id) && starts_visible(handle.handle_id) && starts_visible(handle.value_type);
}

// validate_handle(handle), its common case inline.
inline void require_well_formed(const ResidencyHandle& handle) {
  if (plainly_well_formed(handle)) [[likely]] return;
  validate_handle(handle);
}

}  // namespace fhelium::residency::detail
