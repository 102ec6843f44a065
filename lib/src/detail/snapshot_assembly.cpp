#include "detail/snapshot_assembly.hpp"

#include <array>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "detail/check.hpp"
#include "detail/record_assembly.hpp"

namespace fhelium::residency::detail {

namespace {

struct Aggregate {
  std::int64_t values = 0, reservations = 0, uses = 0, holds = 0, pending = 0, used = 0;
};

using Aggregates = std::array<Aggregate, ResidencyLocation::ordinal_count>;

Aggregate& aggregate_of(Aggregates& aggregates, const ResidencyLocation& location) {
  return aggregates[static_cast<std::size_t>(location.ordinal())];
}

// The decimal text of each record's serial. Records come in registration
// order, so a serial is nearly always the previous one plus one, and its
// text is the previous text counted up in place instead of converted anew.
class SerialText {
 public:
  std::string_view of(std::uint64_t serial) {
    if (length_ == 0 || serial != serial_ + 1) {
      const auto written = std::to_chars(digits_, digits_ + sizeof digits_, serial);
      FHELIUM_CHECK(written.ec == std::errc{}, "a serial does not fit its buffer");
      length_ = static_cast<std::size_t>(written.ptr - digits_);
    } else {
      count_up();
    }
    serial_ = serial;
    return {digits_, length_};
  }

 private:
  void count_up() {
    std::size_t at = length_;
    while (at > 0 && digits_[at - 1] == '9') digits_[--at] = '0';
    if (at > 0) {
      ++digits_[at - 1];
      return;
    }
    // All nines: one digit more. The longest serial, 2^64 - 1, has 20 digits
    // and follows no all-nines serial, so the buffer never overflows.
    FHELIUM_CHECK(length_ < sizeof digits_, "a serial does not fit its buffer");
    std::memmove(digits_ + 1, digits_, length_);
    digits_[0] = '1';
    ++length_;
  }

  char digits_[20];
  std::size_t length_ = 0;
  std::uint64_t serial_ = 0;
};

// Appends the record of `record` to `values`, built in place.
void add_value_snapshot(std::vector<ResidencyValueSnapshot>& values, const std::string& manager_id,
                        SerialText& ids, const ValueRecord& record, Aggregates& aggregates) {
  // Large tables do not fit in cache: ask for the record a few ahead (its
  // hot fields: serial, spec, first materialization's counts) and for its
  // output slot. Addresses only, computed as integers: past the end of a
  // chunk or of the output they are never read, and a prefetch does not fault.
  constexpr std::size_t ahead = 8;
  constexpr std::uintptr_t hot_bytes = offsetof(ValueRecord, materializations) + sizeof(record.materializations) -
                                       sizeof(Materialization) + offsetof(Materialization, value);
  static_assert(hot_bytes > offsetof(ValueRecord, materializations) && hot_bytes < sizeof(ValueRecord));
  const std::uintptr_t next = reinterpret_cast<std::uintptr_t>(&record) + ahead * sizeof(ValueRecord);
  for (std::uintptr_t offset = 0; offset < hot_bytes; offset += 64) {  // a constant count: unrolled
    __builtin_prefetch(reinterpret_cast<const void*>(next + offset));
  }
  __builtin_prefetch(reinterpret_cast<const void*>(next + hot_bytes - 1));
  __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(values.data() + values.size()) +
                                                   ahead * sizeof(ResidencyValueSnapshot)),
                     1);
  FHELIUM_CHECK(!record.discarded || (record.materializations.empty() && record.source == nullptr),
                "a discarded value keeps a materialization or a source");
  FHELIUM_CHECK((record.source != nullptr) == record.source_location.has_value(),
                "source and source location disagree");
  ResidencyValueSnapshot& value =
      values.emplace_back(RecordAssembly::key(), manager_id, ids.of(record.serial), record.spec,
                          record.source != nullptr, record.source_location, record.discarded);
  // The materializations go straight into the record.
  const std::int64_t charge = record.spec.storage_nbytes;
  value.materializations.reserve(record.materializations.size());
  for (const auto& item : record.materializations) {
    // What the checked constructor would refuse, the manager never records.
    FHELIUM_CHECK(item.storage_nbytes <= charge && record.spec.logical_nbytes <= charge,
                  "materialization charge does not cover its bytes");
    value.materializations.emplace_back(RecordAssembly::key(), item.location, record.spec.logical_nbytes,
                                        item.storage_nbytes, charge, item.use_count, item.hold_count,
                                        item.pending_count);
    Aggregate& aggregate = aggregate_of(aggregates, item.location);
    aggregate.values += 1;
    aggregate.uses += item.use_count;
    aggregate.holds += item.hold_count;
    aggregate.pending += item.pending_count;
    aggregate.used += charge;
  }
}

}  // namespace

ResidencySnapshot assemble_snapshot(const SnapshotSources& sources,
                                    const std::function<AllocatorSample(const c10::Device&)>& sample,
                                    const std::function<std::int64_t()>& clock) {
  Aggregates aggregates{};
  std::vector<ResidencyValueSnapshot> values;
  values.reserve(sources.values.size());
  SerialText ids;
  sources.values.for_each(
      [&](const ValueRecord& record) { add_value_snapshot(values, sources.manager_id, ids, record, aggregates); });

  std::vector<ResidencyReservationSnapshot> reservations;
  reservations.reserve(sources.reservations.size());
  for (const auto& [token, reservation] : sources.reservations) {
    reservations.emplace_back(reservation.location, reservation.nbytes, reservation.label);
    aggregate_of(aggregates, reservation.location).reservations += 1;
  }

  // Few locations: their records keep the checked constructor.
  std::vector<ResidencyLocationSnapshot> locations;
  locations.reserve(sources.ledger.accounts().size());
  for (const auto& account : sources.ledger.accounts()) {
    const Aggregate& aggregate = aggregate_of(aggregates, account.location);
    FHELIUM_CHECK(aggregate.used == account.used_bytes, "ledger used bytes disagree with materializations");
    const AllocatorSample allocator =
        account.location.is_cuda() ? sample(account.location.device()) : AllocatorSample{};
    locations.emplace_back(account.location, account.budget_bytes, account.used_bytes, account.reserved_bytes,
                           account.remaining_bytes(), account.peak_used_bytes, account.peak_charged_bytes,
                           aggregate.values, aggregate.reservations, aggregate.uses, aggregate.holds,
                           aggregate.pending, allocator.first, allocator.second);
  }
  return ResidencySnapshot(RecordAssembly::key(), sources.manager_id, sources.state_version, std::move(values),
                           std::move(locations), std::move(reservations), clock());
}

}  // namespace fhelium::residency::detail
