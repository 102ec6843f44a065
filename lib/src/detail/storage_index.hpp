// StorageIndex: which managed materialization owns each backing storage, so
// that adopting or installing storage already under management is refused.
//
// A flat open-addressing table (linear probing, backward-shift deletion, at
// most half full) of 32-byte slots: a claim or release touches one or two
// cache lines and allocates nothing once the table has grown to the working
// set. It starts at 1024 slots (32 KiB, 512 storages), so that a manager's
// first few hundred values cost no growth at all: growing means allocating,
// initializing and refilling a table twice the size, and done from 64 slots
// up it cost an ensure of 1000 fresh values about 80 ns each on a 2-core VM.
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
  // The key's fields around the owner, so that a slot fills 32 bytes; a
  // slot is free while its owner's record is null.
  struct Slot {
    std::uintptr_t address = 0;
    Owner owner;
    std::uint32_t hash = 0;  // mix(key): the slot's home is hash & mask, kept so moves need no rehash
    c10::Device device{c10::DeviceType::CPU};

    bool used() const noexcept { return owner.record != nullptr; }
    bool holds(const StorageKey& key, std::uint32_t key_hash) const noexcept {
      return hash == key_hash && address == key.address && device == key.device;
    }
  };
  static constexpr std::size_t initial_slots = 1024;

  static std::uint32_t mix(const StorageKey& key) noexcept;
  // The slot holding `key` (whose mix is `hash`), or the empty slot where it would go.
  std::size_t probe(const StorageKey& key, std::uint32_t hash) const noexcept;
  void grow();

  std::vector<Slot> slots_;  // size 0 or a power of two
  std::size_t size_ = 0;
};

}  // namespace fhelium::residency::detail
