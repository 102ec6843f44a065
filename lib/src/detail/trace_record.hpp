// TraceRecord: what the manager's trace ring keeps of one transition report.
//
// A report holds its action, and with it a handle of three strings, and an
// optional reason string; copying each report into the ring cost about as
// much as deciding the action. The ring keeps this compact form instead: the
// value's serial and type (its handle is the manager id, the serial in
// decimal and the type), the action's kind and locations, and the reason as
// the transition rules' static text. trace() rebuilds the public reports,
// equal field for field to the ones the calls returned.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "fhelium/residency/location.hpp"
#include "fhelium/residency/plan.hpp"
#include "fhelium/residency/snapshot.hpp"

namespace fhelium::residency::detail {

struct TraceRecord {
  std::uint64_t serial = 0;
  std::string value_type;
  std::size_t action_index = 0;  // ResidencyAction::index()
  // EnsureResident's and DropResident's location, MoveResident's `to`.
  ResidencyLocation location;
  std::optional<ResidencyLocation> from_location;  // MoveResident's
  bool no_op = false;
  std::optional<ResidencyLocation> source;
  std::optional<ResidencyLocation> destination;
  std::int64_t logical_nbytes = 0;
  std::int64_t storage_nbytes = 0;
  std::int64_t started_at_ns = 0;
  std::int64_t completed_at_ns = 0;
  std::optional<c10::Device> allocator_device;
  std::optional<std::int64_t> allocator_allocated_bytes_before;
  std::optional<std::int64_t> allocator_reserved_bytes_before;
  std::optional<std::int64_t> allocator_allocated_bytes_after;
  std::optional<std::int64_t> allocator_reserved_bytes_after;
  const char* reason = nullptr;  // static text; nullptr for none

  // Overwrites this record with `report`, of the value whose serial is
  // `serial`; `reason` is the static text the report's reason was made from
  // (nullptr when it has none). Reuses the record's own type buffer.
  void assign(const ResidencyTransitionReport& report, std::uint64_t serial, const char* reason);
  // The report this record was made of, for the manager `manager_id`.
  ResidencyTransitionReport report(const std::string& manager_id) const;
};

}  // namespace fhelium::residency::detail
