#include "detail/storage_index.hpp"

#include <utility>

#include "detail/check.hpp"

namespace fhelium::residency::detail {

// mix() and probe() are inline in the lookups that use them: every claim and
// release of a materialization's storage makes one.
[[gnu::always_inline]] inline std::uint32_t StorageIndex::mix(const StorageKey& key) noexcept {
  // Storage addresses are aligned: mix every bit into the top ones and keep
  // those.
  std::uint64_t mixed = static_cast<std::uint64_t>(key.address) ^
                        (static_cast<std::uint64_t>(static_cast<std::uint8_t>(key.device.type())) << 56) ^
                        (static_cast<std::uint64_t>(static_cast<std::uint8_t>(key.device.index())) << 48);
  mixed *= 0x9E3779B97F4A7C15ull;
  return static_cast<std::uint32_t>(mixed >> 32);
}

[[gnu::always_inline]] inline std::size_t StorageIndex::probe(const StorageKey& key, std::uint32_t hash) const noexcept {
  const std::size_t mask = slots_.size() - 1;
  std::size_t slot = hash & mask;
  while (slots_[slot].used() && !slots_[slot].holds(key, hash)) slot = (slot + 1) & mask;
  return slot;
}

const StorageIndex::Owner* StorageIndex::find(const StorageKey& key) const noexcept {
  if (size_ == 0) return nullptr;
  const Slot& slot = slots_[probe(key, mix(key))];
  return slot.used() ? &slot.owner : nullptr;
}

[[gnu::hot]]
bool StorageIndex::insert(const StorageKey& key, Owner owner) {
  FHELIUM_CHECK(owner.record != nullptr, "a storage claimed without an owner");
  if ((size_ + 1) * 2 > slots_.size()) grow();
  const std::uint32_t hash = mix(key);
  Slot& slot = slots_[probe(key, hash)];
  if (slot.used()) return false;
  slot = Slot{key.address, owner, hash, key.device};
  ++size_;
  return true;
}

[[gnu::hot]]
bool StorageIndex::erase(const StorageKey& key) noexcept {
  if (size_ == 0) return false;
  const std::size_t mask = slots_.size() - 1;
  std::size_t hole = probe(key, mix(key));
  if (!slots_[hole].used()) return false;
  slots_[hole].owner.record = nullptr;
  --size_;
  // Backward shift: move later entries of the run into the hole when their
  // home does not lie cyclically in (hole, current].
  for (std::size_t next = (hole + 1) & mask; slots_[next].used(); next = (next + 1) & mask) {
    const std::size_t wanted = slots_[next].hash & mask;
    const bool stays = hole <= next ? (hole < wanted && wanted <= next) : (hole < wanted || wanted <= next);
    if (stays) continue;
    slots_[hole] = slots_[next];
    slots_[next].owner.record = nullptr;
    hole = next;
  }
  return true;
}

void StorageIndex::clear() noexcept {
  for (Slot& slot : slots_) slot.owner.record = nullptr;
  size_ = 0;
}

void StorageIndex::grow() {
  std::vector<Slot> old = std::exchange(slots_, std::vector<Slot>(slots_.empty() ? initial_slots : slots_.size() * 2));
  const std::size_t mask = slots_.size() - 1;
  size_ = 0;
  for (const Slot& slot : old) {
    if (!slot.used()) continue;
    // Every key in the table is distinct: the first free slot from its home.
    std::size_t at = slot.hash & mask;
    while (slots_[at].used()) at = (at + 1) & mask;
    slots_[at] = slot;
    ++size_;
  }
}

}  // namespace fhelium::residency::detail
