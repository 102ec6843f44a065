// Snapshot assembly: the tensor-free public picture of the manager's state.
//
// It reads the value table, the location ledger and the reservations (under
// the state lock, which the caller holds), counts each location's aggregates
// from the entries and checks them against the ledger, and builds the records
// through the trusted constructors: one pass over the values in registration
// order, one allocation per value for its materialization list and none for
// the handle or spec strings beyond their copies.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "detail/ledger.hpp"
#include "detail/lifetime_records.hpp"
#include "detail/token_table.hpp"
#include "detail/value_table.hpp"
#include "fhelium/residency/snapshot.hpp"

namespace fhelium::residency::detail {

// Allocated and reserved bytes of one CUDA device's allocator, each absent
// when unknown.
using AllocatorSample = std::pair<std::optional<std::int64_t>, std::optional<std::int64_t>>;

struct SnapshotSources {
  const std::string& manager_id;
  std::uint64_t state_version;
  const ValueTable& values;
  const LocationLedger& ledger;
  const TokenTable<ReservationRecord>& reservations;
};

// `sample` is asked once per CUDA location, in ledger order; `clock` once,
// last, for captured_at_ns.
ResidencySnapshot assemble_snapshot(const SnapshotSources& sources,
                                    const std::function<AllocatorSample(const c10::Device&)>& sample,
                                    const std::function<std::int64_t()>& clock);

}  // namespace fhelium::residency::detail
