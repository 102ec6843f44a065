// Residency actions and plans: the inspectable requests a manager executes.
//
// An action names one transition of one handle. A plan is an ordered list of
// reclaim actions (run first, to free capacity), named memory reservations
// (admitted after reclaim), enter actions and exit actions. Plans are plain
// values; a manager validates them when they are explained or executed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "fhelium/residency/location.hpp"
#include "fhelium/residency/model.hpp"

namespace fhelium::residency {

// Make `handle` resident at `location`, keeping existing replicas.
struct EnsureResident {
  ResidencyHandle handle;
  ResidencyLocation location;
  friend bool operator==(const EnsureResident&, const EnsureResident&) = default;
};

// Materialize at `to` and remove one source replica. Without from_location the
// manager picks pageable host, then pinned host, then CUDA by index.
struct MoveResident {
  ResidencyHandle handle;
  ResidencyLocation to;
  std::optional<ResidencyLocation> from_location;
  friend bool operator==(const MoveResident&, const MoveResident&) = default;
};

// Remove one materialization without ending the value.
struct DropResident {
  ResidencyHandle handle;
  ResidencyLocation location;
  friend bool operator==(const DropResident&, const DropResident&) = default;
};

// End the value and remove every materialization; the handle stays visible
// in snapshots as discarded.
struct DiscardValue {
  ResidencyHandle handle;
  friend bool operator==(const DiscardValue&, const DiscardValue&) = default;
};

using ResidencyAction = std::variant<EnsureResident, MoveResident, DropResident, DiscardValue>;

const ResidencyHandle& action_handle(const ResidencyAction& action) noexcept;
// "ensure", "move", "drop" or "discard".
const char* action_kind(const ResidencyAction& action) noexcept;
// One-line human description, e.g. "move h3 pageable-host -> cuda:0".
std::string describe(const ResidencyAction& action);

// Named accounting headroom: charges `nbytes` at `location` without a tensor.
struct MemoryReservation {
  ResidencyLocation location;
  std::int64_t nbytes = 0;
  std::string label;

  // Throws std::invalid_argument for negative bytes or an empty label.
  MemoryReservation(ResidencyLocation location, std::int64_t nbytes, std::string label);
  friend bool operator==(const MemoryReservation&, const MemoryReservation&) = default;
};

// Members follow the reference's positional order (name, enter, exit,
// reservations, reclaim), so `ResidencyPlan{"p", enter, exit}` means what the
// same positional call means in Python. Execution order is still reclaim ->
// reservations -> enter (scope entry), then exit (scope close).
struct ResidencyPlan {
  std::string name;  // non-empty; checked when the plan is used
  std::vector<ResidencyAction> enter = {};
  std::vector<ResidencyAction> exit = {};
  std::vector<MemoryReservation> reservations = {};
  std::vector<ResidencyAction> reclaim = {};
};

}  // namespace fhelium::residency
