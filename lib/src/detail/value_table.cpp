#include "detail/value_table.hpp"

#include <algorithm>

#include "detail/check.hpp"
#include "detail/handle_text.hpp"
#include "detail/line_allocator.hpp"
#include "fhelium/residency/errors.hpp"

namespace fhelium::residency::detail {

ValueRecord& ValueTable::add(ResidencyValueSpec&& spec, std::shared_ptr<ResidencySource>&& source,
                             std::optional<ResidencyLocation> source_location) {
  if (size_ % chunk_records == 0 && size_ / chunk_records == chunks_.size()) {
    chunks_.push_back(std::make_unique<Chunk>());
    chunks_.back()->reserve(chunk_records);
  }
  // Room first, so that nothing after the record is added can throw.
  if (index_by_serial_.size() == index_by_serial_.capacity()) {
    index_by_serial_.reserve(std::max<std::size_t>(64, index_by_serial_.size() * 2));
  }
  const std::uint64_t serial = next_serial_++;
  Chunk& chunk = *chunks_[size_ / chunk_records];
  chunk.emplace_back(serial, std::move(spec), std::move(source), source_location);
  ++size_;
  index_by_serial_.push_back(size_);
  return chunk.back();
}

void ValueTable::remove_last() {
  FHELIUM_CHECK(size_ > 0, "rollback without a record");
  Chunk& chunk = *chunks_[(size_ - 1) / chunk_records];
  FHELIUM_CHECK(chunk.back().materializations.empty(), "rolled-back record still has materializations");
  index_by_serial_[chunk.back().serial - 1] = 0;
  chunk.pop_back();
  --size_;
}

void ValueTable::raise_unresolved(const ResidencyHandle& handle) const {
  if (!same_text(handle.manager_id, manager_id_)) {
    throw ResidencyHandleError("handle '" + handle.handle_id + "' belongs to manager '" + handle.manager_id +
                               "', not '" + manager_id_ + "'");
  }
  const ValueRecord* record = const_cast<ValueTable*>(this)->find_issued_here(handle);
  if (record == nullptr) {
    throw ResidencyHandleError("residency handle '" + handle.handle_id + "' (" + handle.value_type +
                               ") is unknown to manager '" + manager_id_ + "'");
  }
  FHELIUM_CHECK(record->discarded, "a live record's handle failed to resolve");
  throw ResidencyHandleError("residency value '" + handle.handle_id + "' has been discarded");
}

void ValueTable::check_unaliased(std::span<const StorageKey> keys) const {
  for (const auto& key : keys) {
    if (const StorageIndex::Owner* owner = storage_owners_.find(key)) raise_aliased(key, *owner);
  }
}

void ValueTable::raise_aliased(const StorageKey& key, const StorageIndex::Owner& owner) {
  throw ResidencyOwnershipError("managed materializations must own independent backing storage; storage on " +
                                key.device.str() + " is already owned by value '" + id_of(*owner.record) + "' at " +
                                owner.location.name());
}

[[gnu::hot]]
void ValueTable::claim(std::span<const StorageKey> keys, const ValueRecord& owner,
                       const ResidencyLocation& location) {
  for (std::size_t index = 0; index < keys.size(); ++index) {
    if (storage_owners_.insert(keys[index], StorageIndex::Owner{&owner, location})) [[likely]] continue;
    unclaim(keys.first(index));
    raise_aliased(keys[index], *storage_owners_.find(keys[index]));
  }
}

[[gnu::hot]]
void ValueTable::unclaim(std::span<const StorageKey> keys) {
  for (const auto& key : keys) {
    const bool erased = storage_owners_.erase(key);
    FHELIUM_CHECK(erased, "storage released that was never claimed");
  }
}

const std::shared_ptr<const std::vector<ResidencyHandle>>& ValueTable::handle_list(ValueRecord& record) const {
  if (!record.handle_list) {
    // Over-aligned, so that the control block make_shared puts in front of
    // it starts a cache line and the list fills the rest of its own.
    struct alignas(cache_line_bytes) OwnLines {
      std::vector<ResidencyHandle> list;
    };
    auto block = std::make_shared<OwnLines>(OwnLines{{handle_of(record)}});
    record.handle_list = std::shared_ptr<const std::vector<ResidencyHandle>>(block, &block->list);
  }
  return record.handle_list;
}

void ValueTable::clear() {
  chunks_.clear();
  size_ = 0;
  index_by_serial_.clear();
  storage_owners_.clear();
}

}  // namespace fhelium::residency::detail
