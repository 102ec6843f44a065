// StorageIndex: which managed materialization owns each backing storage, so
// that adopting or installing storage already under management is refused.
//
// A flat open-addressing table (linear probing, backward-shift deletion, at
// most half full): a claim or release touches one or two cache lines and
// allocates nothing once the table has grown to the working set.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fhelium/residency/location.hpp"
#include "fhelium/residency/storage_key.hpp"

namespace fhelium::residency::detail {

struct ValueRecord;

class StorageIndex {
 public:
  struct Owner {
    const ValueRecord* record = nullptr;
    ResidencyLocation location;
  };

  // The owner of `key`, or nullptr.
  const Owner* find(const StorageKey& key) const noexcept;
  // False (and nothing changes) when `key` is already claimed.
  bool insert(const StorageKey& key, Owner owner);
  // False when `key` was not claimed.
  bool erase(const StorageKey& key) noexcept;
  std::size_t size() const noexcept { return size_; }
  void clear() noexcept;

 private:
  struct Slot {
    StorageKey key;
    Owner owner;
    std::uint32_t hash = 0;  // mix(key): the slot's home is hash & mask, kept so moves need no rehash
    bool used = false;
  };

  static std::uint32_t mix(const StorageKey& key) noexcept;
  // The slot holding `key` (whose mix is `hash`), or the empty slot where it would go.
  std::size_t probe(const StorageKey& key, std::uint32_t hash) const noexcept;
  void grow();

  std::vector<Slot> slots_;  // size 0 or a power of two
  std::size_t size_ = 0;
};

}  // namespace fhelium::residency::detail
