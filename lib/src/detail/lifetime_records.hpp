// What the manager keeps per live lifetime: the leases, holds and
// reservations of its lifetime tables (TokenTable, keyed by token).
#pragma once

#include <c10/core/Stream.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "detail/value_table.hpp"
#include "fhelium/residency/inline_vector.hpp"
#include "fhelium/residency/location.hpp"
#include "fhelium/residency/runtime.hpp"

namespace fhelium::residency::detail {

enum class LeaseState { active, pending };

// The values a lease or hold covers: usually one, kept inline.
using CoveredRecords = InlineVector<ValueRecord*, 2>;

// Each record has a constructor, so that the lifetime tables can emplace
// it on compilers without C++20's parenthesized aggregate initialization
// (clang before 16).
struct LeaseRecord {
  LeaseRecord(CoveredRecords&& records, ResidencyLocation location) : records(std::move(records)), location(location) {}

  CoveredRecords records;
  ResidencyLocation location;
  LeaseState state = LeaseState::active;
  std::vector<c10::Stream> streams;
  // Completion events once pending. Empty while pending means recording and the
  // synchronous fallback both failed: protection stays until a forced close.
  std::vector<std::shared_ptr<CompletionEvent>> events;
};

// A lease granted in a lane of the state gate: always an active host lease
// of one value, without streams, so its record keeps no more than that.
struct LaneLease {
  LaneLease() = default;
  LaneLease(ValueRecord* record, ResidencyLocation location) : record(record), location(location) {}

  ValueRecord* record = nullptr;
  ResidencyLocation location;
};

struct HoldRecord {
  HoldRecord(CoveredRecords&& records, ResidencyLocation location) : records(std::move(records)), location(location) {}

  CoveredRecords records;
  ResidencyLocation location;
};

struct ReservationRecord {
  ReservationRecord(ResidencyLocation location, std::int64_t nbytes, std::string label)
      : location(location), nbytes(nbytes), label(std::move(label)) {}

  ResidencyLocation location;
  std::int64_t nbytes = 0;
  std::string label;
};

}  // namespace fhelium::residency::detail
