// Value records: handle issue and lookup, materializations per value in
// insertion order, and the storage-ownership index that rejects aliasing.
//
// Records live in fixed-size chunks, in registration order, and never move
// (leases and holds point at them); a record keeps its first materialization
// inline. A snapshot of many values therefore reads memory in order instead
// of chasing one heap block per record and another per materialization.
#pragma once

#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "detail/check.hpp"
#include "detail/handle_text.hpp"
#include "detail/storage_index.hpp"
#include "fhelium/residency/inline_vector.hpp"
#include "fhelium/residency/location.hpp"
#include "fhelium/residency/model.hpp"
#include "fhelium/residency/value.hpp"

namespace fhelium::residency::detail {

// Field order matters for speed: what snapshots and the transition rules read
// (location, byte and protection counts) comes first, the tensors and storage
// keys last, so a record's hot fields share as few cache lines as possible.
struct Materialization {
  ResidencyLocation location;
  std::int64_t storage_nbytes = 0;  // actual unique backing storage
  std::int64_t use_count = 0;
  std::int64_t hold_count = 0;
  std::int64_t pending_count = 0;
  ResidentValue value;
  // Kept inline: most values have one storage, and a drop then frees nothing
  // of the record's own.
  StorageKeys storage_keys;

  // One whose value `make()` returns, built in place: a source's load writes
  // its value straight into the record. Its storage bytes and keys are set
  // once the value has been checked (Transitions::install).
  template <std::invocable Make>
  Materialization(ResidencyLocation location, Make&& make)
      : location(location), value(std::forward<Make>(make)()) {}

  bool is_protected() const { return use_count > 0 || hold_count > 0 || pending_count > 0; }
};

// A record keeps its handle's serial only: the manager id is the table's and
// the type is the spec's, so the handle is rebuilt where one is handed out
// (ValueTable::handle_of), and the fields a snapshot reads stay few lines.
struct ValueRecord {
  // A constructor, not aggregate initialization: emplace_back() of an
  // aggregate needs C++20's parenthesized initialization, which not every
  // supported compiler has (clang before 16).
  ValueRecord(std::uint64_t serial, ResidencyValueSpec&& spec, std::shared_ptr<ResidencySource>&& source,
              std::optional<ResidencyLocation> source_location)
      : serial(serial), spec(std::move(spec)), source(std::move(source)), source_location(source_location) {}

  std::uint64_t serial;
  ResidencyValueSpec spec;
  std::shared_ptr<ResidencySource> source;
  std::optional<ResidencyLocation> source_location;
  bool discarded = false;
  InlineVector<Materialization, 1> materializations;  // insertion order
  // Scratch of the dry run (explain) in progress, under the state lock:
  // where its plan has left this value so far. Valid only while
  // `shadow_run` is that run's number, so no run has to clear it.
  mutable std::uint64_t shadow_run = 0;
  mutable InlineVector<ResidencyLocation, 3> shadow_locations;
  // The one-handle list every lease or hold of this value alone shares
  // (ResidencyLease::handles): built at the first (ValueTable::handle_list).
  // Lifetimes that outlive the record keep their share.
  std::shared_ptr<const std::vector<ResidencyHandle>> handle_list;

  // The materialization at `location`, or nullptr. Inline: most records
  // have one, and every transition and lifetime asks.
  Materialization* at(const ResidencyLocation& location) {
    for (auto& item : materializations) {
      if (item.location == location) return &item;
    }
    return nullptr;
  }
  const Materialization* at(const ResidencyLocation& location) const {
    return const_cast<ValueRecord*>(this)->at(location);
  }
};

class ValueTable {
 public:
  explicit ValueTable(std::string manager_id) : manager_id_(std::move(manager_id)) {}

  // Creates a record with a fresh handle (never reissued, even after rollback).
  // Takes the spec and source by rvalue reference: each move of a spec copies
  // its type's text, and a by-value chain from the public call moved it four
  // times.
  ValueRecord& add(ResidencyValueSpec&& spec, std::shared_ptr<ResidencySource>&& source,
                   std::optional<ResidencyLocation> source_location);
  // Removes the record most recently added (a failed adopt).
  void remove_last();

  // The live record of `handle`; throws ResidencyHandleError for a foreign,
  // unknown or discarded handle. Inline: every call that names a value
  // resolves it here.
  ValueRecord& lookup(const ResidencyHandle& handle) {
    ValueRecord* record = find_live(handle);
    if (record != nullptr) [[likely]] return *record;
    raise_unresolved(handle);
  }
  // lookup() without the error: nullptr for a foreign, unknown or discarded
  // handle. Only reads the table, so calls may run at once.
  ValueRecord* find_live(const ResidencyHandle& handle) {
    ValueRecord* record = find(handle);
    return record != nullptr && !record->discarded ? record : nullptr;
  }
  // The record of `handle` including discarded ones; nullptr when foreign or unknown.
  ValueRecord* find(const ResidencyHandle& handle) {
    return same_text(handle.manager_id, manager_id_) ? find_issued_here(handle) : nullptr;
  }

  // Every record, discarded ones included, in registration order.
  std::size_t size() const noexcept { return size_; }
  template <class F>
  void for_each(F&& visit) const {
    for (const auto& chunk : chunks_) {
      for (const ValueRecord& record : *chunk) visit(record);
    }
  }

  // The handle issued for `record`, and its id alone: the serial in decimal.
  ResidencyHandle handle_of(const ValueRecord& record) const {
    return ResidencyHandle{manager_id_, std::to_string(record.serial), record.spec.value_type};
  }
  static std::string id_of(const ValueRecord& record) { return std::to_string(record.serial); }
  // `record`'s own one-handle list, built on first use. Each list has cache
  // lines of its own (its reference count included), so lifetimes of
  // different values taken on different threads do not contend on it.
  const std::shared_ptr<const std::vector<ResidencyHandle>>& handle_list(ValueRecord& record) const;

  // Throws ResidencyOwnershipError naming the owner when a key is already managed.
  void check_unaliased(std::span<const StorageKey> keys) const;
  // Records `owner` (a record of this table) at `location` as the owner of
  // each key; throws ResidencyOwnershipError naming the owner when a key is
  // already managed, and then claims none of them.
  void claim(std::span<const StorageKey> keys, const ValueRecord& owner, const ResidencyLocation& location);
  void unclaim(std::span<const StorageKey> keys);

  // Drops every record; lifetimes keep their shares of handle lists.
  void clear();

 private:
  static constexpr std::size_t chunk_records = 256;
  using Chunk = std::vector<ValueRecord>;  // capacity chunk_records, never exceeded

  // find() for a handle whose manager id is already known to be this table's.
  // Handle ids are decimal serials without leading zeros, so an id that
  // parses to a record's serial is that record's id, character for character.
  ValueRecord* find_issued_here(const ResidencyHandle& handle) {
    const std::uint64_t serial = handle_serial(handle.handle_id);
    if (serial == 0 || serial > index_by_serial_.size()) return nullptr;
    const std::size_t slot = index_by_serial_[serial - 1];
    if (slot == 0) return nullptr;
    ValueRecord& record = record_at(slot - 1);
    FHELIUM_CHECK(record.serial == serial, "a record is indexed under another serial");
    return same_text(record.spec.value_type, handle.value_type) ? &record : nullptr;
  }
  // The ResidencyOwnershipError for `key`, owned by `owner`.
  [[noreturn]] static void raise_aliased(const StorageKey& key, const StorageIndex::Owner& owner);
  // The ResidencyHandleError lookup() throws for `handle`: foreign, unknown
  // or discarded.
  [[noreturn]] void raise_unresolved(const ResidencyHandle& handle) const;
  ValueRecord& record_at(std::size_t index) { return (*chunks_[index / chunk_records])[index % chunk_records]; }

  std::string manager_id_;
  std::uint64_t next_serial_ = 1;
  std::vector<std::unique_ptr<Chunk>> chunks_;
  std::size_t size_ = 0;
  // Record index + 1 by serial - 1; 0 for a serial whose adopt was rolled back.
  std::vector<std::size_t> index_by_serial_;
  StorageIndex storage_owners_;
};

}  // namespace fhelium::residency::detail
