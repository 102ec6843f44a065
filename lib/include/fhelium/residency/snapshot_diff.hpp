// What changed between two snapshots of one manager, tensor-free: values
// added, discarded or removed; materializations added or removed and their
// byte and protection counts; per-location accounting; reservations added or
// released; the state version. Pure functions over records, safe from any
// thread.
#pragma once

#include <string>
#include <vector>

#include "fhelium/residency/snapshot.hpp"

namespace fhelium::residency {

// One difference. `path` is a JSON-pointer-like path into the snapshot, with
// handles by id and locations by name, e.g. "/values/3/materializations/cuda:0"
// or "/locations/cuda:0/used_bytes"; `before` / `after` are the values as
// text, "absent" where the path does not exist on that side.
struct SnapshotDifference {
  std::string path;
  std::string before;
  std::string after;
  friend bool operator==(const SnapshotDifference&, const SnapshotDifference&) = default;
};

// Differences from `before` to `after` in snapshot order (values, then
// locations, then reservations, then state_version); captured_at_ns is
// ignored. Empty when the two describe the same state.
std::vector<SnapshotDifference> diff(const ResidencySnapshot& before, const ResidencySnapshot& after);

// "/locations/cuda:0/used_bytes: 4096 -> 8192".
std::string describe(const SnapshotDifference& difference);

}  // namespace fhelium::residency
