// StorageKey: identity of one backing storage, used to detect aliasing between
// materializations. A plain value type; safe to share across threads.
#pragma once

#include <c10/core/Device.h>

#include <cstddef>
#include <cstdint>
#include <functional>

#include "fhelium/residency/inline_vector.hpp"

namespace fhelium::residency {

// The device of a storage and the address of its storage object. Two tensors
// with equal keys share backing memory.
struct StorageKey {
  c10::Device device{c10::DeviceType::CPU};
  std::uintptr_t address = 0;
  friend bool operator==(const StorageKey&, const StorageKey&) = default;
};

// A value's distinct storage keys, as a runtime reports them. Most values
// have one storage, kept inline: reporting it allocates nothing. Converts to
// std::vector<StorageKey>.
using StorageKeys = InlineVector<StorageKey, 1>;

}  // namespace fhelium::residency

template <>
struct std::hash<fhelium::residency::StorageKey> {
  std::size_t operator()(const fhelium::residency::StorageKey& key) const noexcept {
    return std::hash<std::uintptr_t>{}(key.address) ^ (static_cast<std::size_t>(key.device.index()) << 1);
  }
};
