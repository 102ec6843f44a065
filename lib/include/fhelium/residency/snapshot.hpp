// Immutable, tensor-free observations and reports of a residency manager.
//
// These are the nine records of fhelium.residency.snapshot, field for field and
// in the same order. Each constructor validates its record's rules and throws
// std::invalid_argument naming the record and field that broke one, so a
// record that exists is internally consistent. Bytes are std::int64_t,
// timestamps are Unix (or, under a simulated runtime, virtual) nanoseconds.
// Records are plain values: copy them freely and read them from any thread.
//
// The constructors that take a TrustedRecordKey skip those checks. Only the
// manager can make the key: it builds records from state whose rules it
// keeps (and asserts) itself, so checking them again per record would only
// repeat, per value and per action, what holds by construction.
#pragma once

#include <c10/core/Device.h>

#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "fhelium/residency/inline_vector.hpp"
#include "fhelium/residency/location.hpp"
#include "fhelium/residency/model.hpp"
#include "fhelium/residency/plan.hpp"

namespace fhelium::residency {

namespace detail {
struct RecordAssembly;
}

// Opens the unchecked record constructors to the manager's record assembly.
class TrustedRecordKey {
  friend struct detail::RecordAssembly;
  TrustedRecordKey() = default;
};

// Protection and byte state of one value at one location. charged_nbytes is the
// fixed admission charge; storage_nbytes the actual unique backing storage.
// pending_event_count counts released leases whose CUDA work has not yet
// reached its completion event: such a materialization is still protected.
struct MaterializationSnapshot {
  ResidencyLocation location;
  std::int64_t logical_nbytes;
  std::int64_t storage_nbytes;
  std::int64_t charged_nbytes;
  std::int64_t use_count;
  std::int64_t hold_count;
  std::int64_t pending_event_count;

  MaterializationSnapshot(ResidencyLocation location, std::int64_t logical_nbytes, std::int64_t storage_nbytes,
                          std::int64_t charged_nbytes, std::int64_t use_count, std::int64_t hold_count,
                          std::int64_t pending_event_count);
  MaterializationSnapshot(TrustedRecordKey, ResidencyLocation location, std::int64_t logical_nbytes,
                          std::int64_t storage_nbytes, std::int64_t charged_nbytes, std::int64_t use_count,
                          std::int64_t hold_count, std::int64_t pending_event_count) noexcept
      : location(location),
        logical_nbytes(logical_nbytes),
        storage_nbytes(storage_nbytes),
        charged_nbytes(charged_nbytes),
        use_count(use_count),
        hold_count(hold_count),
        pending_event_count(pending_event_count) {}
  bool is_protected() const noexcept { return use_count + hold_count + pending_event_count > 0; }
  friend bool operator==(const MaterializationSnapshot&, const MaterializationSnapshot&) = default;
};

// Public state of one registered or discarded value.
struct ResidencyValueSnapshot {
  ResidencyHandle handle;
  ResidencyValueSpec spec;
  // Nearly every value has at most one: it is kept inside the record.
  InlineVector<MaterializationSnapshot, 1> materializations;
  bool has_source;
  std::optional<ResidencyLocation> source_location;
  bool discarded;

  ResidencyValueSnapshot(ResidencyHandle handle, ResidencyValueSpec spec,
                         InlineVector<MaterializationSnapshot, 1> materializations, bool has_source,
                         std::optional<ResidencyLocation> source_location, bool discarded);
  // The handle is built in place from its parts: the manager's id, the
  // value's id and the spec's type. The materializations start empty; the
  // manager appends them to the record in place.
  ResidencyValueSnapshot(TrustedRecordKey, const std::string& manager_id, std::string_view handle_id,
                         const ResidencyValueSpec& spec, bool has_source,
                         std::optional<ResidencyLocation> source_location, bool discarded)
      : handle{manager_id, std::string(handle_id), spec.value_type},
        spec(spec),
        has_source(has_source),
        source_location(source_location),
        discarded(discarded) {}
  // The materialization at `location`, or nullptr.
  const MaterializationSnapshot* at(const ResidencyLocation& location) const noexcept;
  friend bool operator==(const ResidencyValueSnapshot&, const ResidencyValueSnapshot&) = default;
};

// One active named reservation.
struct ResidencyReservationSnapshot {
  ResidencyLocation location;
  std::int64_t nbytes;
  std::string label;

  ResidencyReservationSnapshot(ResidencyLocation location, std::int64_t nbytes, std::string label);
  friend bool operator==(const ResidencyReservationSnapshot&, const ResidencyReservationSnapshot&) = default;
};

// Budget, usage and protection accounting of one location. Without a budget,
// budget_bytes and remaining_budget_bytes are both absent. peak_used_bytes
// excludes reservations and temporary charges; peak_charged_bytes includes
// them. Allocator metrics are process-wide samples for CUDA locations.
struct ResidencyLocationSnapshot {
  ResidencyLocation location;
  std::optional<std::int64_t> budget_bytes;
  std::int64_t used_bytes;
  std::int64_t reserved_bytes;
  std::optional<std::int64_t> remaining_budget_bytes;
  std::int64_t peak_used_bytes;
  std::int64_t peak_charged_bytes;
  std::int64_t value_count;
  std::int64_t reservation_count;
  std::int64_t use_count;
  std::int64_t hold_count;
  std::int64_t pending_event_count;
  std::optional<std::int64_t> allocator_allocated_bytes;
  std::optional<std::int64_t> allocator_reserved_bytes;

  ResidencyLocationSnapshot(ResidencyLocation location, std::optional<std::int64_t> budget_bytes,
                            std::int64_t used_bytes, std::int64_t reserved_bytes,
                            std::optional<std::int64_t> remaining_budget_bytes, std::int64_t peak_used_bytes,
                            std::int64_t peak_charged_bytes, std::int64_t value_count,
                            std::int64_t reservation_count, std::int64_t use_count, std::int64_t hold_count,
                            std::int64_t pending_event_count, std::optional<std::int64_t> allocator_allocated_bytes,
                            std::optional<std::int64_t> allocator_reserved_bytes);
  friend bool operator==(const ResidencyLocationSnapshot&, const ResidencyLocationSnapshot&) = default;
};

// One manager at one instant, captured under its state lock.
struct ResidencySnapshot {
  std::string manager_id;
  std::uint64_t state_version;
  std::vector<ResidencyValueSnapshot> values;
  std::vector<ResidencyLocationSnapshot> locations;
  std::vector<ResidencyReservationSnapshot> reservations;
  std::int64_t captured_at_ns;

  ResidencySnapshot(std::string manager_id, std::uint64_t state_version, std::vector<ResidencyValueSnapshot> values,
                    std::vector<ResidencyLocationSnapshot> locations,
                    std::vector<ResidencyReservationSnapshot> reservations, std::int64_t captured_at_ns);
  ResidencySnapshot(TrustedRecordKey, const std::string& manager_id, std::uint64_t state_version,
                    std::vector<ResidencyValueSnapshot>&& values, std::vector<ResidencyLocationSnapshot>&& locations,
                    std::vector<ResidencyReservationSnapshot>&& reservations, std::int64_t captured_at_ns)
      : manager_id(manager_id),
        state_version(state_version),
        values(std::move(values)),
        locations(std::move(locations)),
        reservations(std::move(reservations)),
        captured_at_ns(captured_at_ns) {}
  // Lookups; nullptr when absent.
  const ResidencyLocationSnapshot* location(const ResidencyLocation& location) const noexcept;
  const ResidencyValueSnapshot* value(const ResidencyHandle& handle) const noexcept;
  friend bool operator==(const ResidencySnapshot&, const ResidencySnapshot&) = default;
};

// Measured result of one completed action. source is the resolved source where
// the action left it implicit; allocator_device names the CUDA device whose
// allocator was sampled (a cross-device move samples its destination).
struct ResidencyTransitionReport {
  ResidencyAction action;
  bool no_op;
  std::optional<ResidencyLocation> source;
  std::optional<ResidencyLocation> destination;
  std::int64_t logical_nbytes;
  std::int64_t storage_nbytes;
  std::int64_t started_at_ns;
  std::int64_t completed_at_ns;
  std::optional<c10::Device> allocator_device;
  std::optional<std::int64_t> allocator_allocated_bytes_before;
  std::optional<std::int64_t> allocator_reserved_bytes_before;
  std::optional<std::int64_t> allocator_allocated_bytes_after;
  std::optional<std::int64_t> allocator_reserved_bytes_after;
  std::optional<std::string> reason;

  ResidencyTransitionReport(ResidencyAction action, bool no_op, std::optional<ResidencyLocation> source,
                            std::optional<ResidencyLocation> destination, std::int64_t logical_nbytes,
                            std::int64_t storage_nbytes, std::int64_t started_at_ns, std::int64_t completed_at_ns,
                            std::optional<c10::Device> allocator_device = std::nullopt,
                            std::optional<std::int64_t> allocator_allocated_bytes_before = std::nullopt,
                            std::optional<std::int64_t> allocator_reserved_bytes_before = std::nullopt,
                            std::optional<std::int64_t> allocator_allocated_bytes_after = std::nullopt,
                            std::optional<std::int64_t> allocator_reserved_bytes_after = std::nullopt,
                            std::optional<std::string> reason = std::nullopt);
  // `action`: copied or moved in (a ResidencyAction).
  template <class Action>
    requires std::same_as<std::remove_cvref_t<Action>, ResidencyAction>
  ResidencyTransitionReport(TrustedRecordKey, Action&& action, bool no_op,
                            std::optional<ResidencyLocation> source, std::optional<ResidencyLocation> destination,
                            std::int64_t logical_nbytes, std::int64_t storage_nbytes, std::int64_t started_at_ns,
                            std::int64_t completed_at_ns, std::optional<c10::Device> allocator_device,
                            std::optional<std::int64_t> allocator_allocated_bytes_before,
                            std::optional<std::int64_t> allocator_reserved_bytes_before,
                            std::optional<std::int64_t> allocator_allocated_bytes_after,
                            std::optional<std::int64_t> allocator_reserved_bytes_after,
                            std::optional<std::string> reason)
      : action(std::forward<Action>(action)),
        no_op(no_op),
        source(source),
        destination(destination),
        logical_nbytes(logical_nbytes),
        storage_nbytes(storage_nbytes),
        started_at_ns(started_at_ns),
        completed_at_ns(completed_at_ns),
        allocator_device(allocator_device),
        allocator_allocated_bytes_before(allocator_allocated_bytes_before),
        allocator_reserved_bytes_before(allocator_reserved_bytes_before),
        allocator_allocated_bytes_after(allocator_allocated_bytes_after),
        allocator_reserved_bytes_after(allocator_reserved_bytes_after),
        reason(std::move(reason)) {}
  // The manager's own while an action runs: `action_args` construct the
  // action in place (or copy it); the other fields are filled in once it has.
  template <class... ActionArgs>
  ResidencyTransitionReport(TrustedRecordKey, std::in_place_t, ActionArgs&&... action_args)
      : action(std::forward<ActionArgs>(action_args)...),
        no_op(false),
        logical_nbytes(0),
        storage_nbytes(0),
        started_at_ns(0),
        completed_at_ns(0) {}
  friend bool operator==(const ResidencyTransitionReport&, const ResidencyTransitionReport&) = default;
};

// Dry-run explanation of how one action would be resolved.
struct ResidencyActionExplanation {
  ResidencyAction action;
  bool executable;
  bool no_op;
  std::optional<ResidencyLocation> source;
  std::optional<ResidencyLocation> destination;
  std::int64_t logical_nbytes;
  std::int64_t storage_nbytes;
  std::optional<std::string> reason;

  ResidencyActionExplanation(ResidencyAction action, bool executable, bool no_op,
                             std::optional<ResidencyLocation> source, std::optional<ResidencyLocation> destination,
                             std::int64_t logical_nbytes, std::int64_t storage_nbytes,
                             std::optional<std::string> reason = std::nullopt);
  ResidencyActionExplanation(TrustedRecordKey, const ResidencyAction& action, bool executable, bool no_op,
                             std::optional<ResidencyLocation> source, std::optional<ResidencyLocation> destination,
                             std::int64_t logical_nbytes, std::int64_t storage_nbytes,
                             std::optional<std::string>&& reason)
      : action(action),
        executable(executable),
        no_op(no_op),
        source(source),
        destination(destination),
        logical_nbytes(logical_nbytes),
        storage_nbytes(storage_nbytes),
        reason(std::move(reason)) {}
  friend bool operator==(const ResidencyActionExplanation&, const ResidencyActionExplanation&) = default;
};

// Dry-run feasibility and predicted peak charge per location: the manager's
// tracked locations in registration order, then locations first referenced by
// the plan in reservation/action order.
struct ResidencyPlanExplanation {
  std::string plan_name;
  std::vector<ResidencyActionExplanation> actions;
  std::vector<MemoryReservation> reservations;
  std::vector<std::pair<ResidencyLocation, std::int64_t>> predicted_peak_bytes;
  bool feasible;
  std::optional<std::string> reason;

  ResidencyPlanExplanation(std::string plan_name, std::vector<ResidencyActionExplanation> actions,
                           std::vector<MemoryReservation> reservations,
                           std::vector<std::pair<ResidencyLocation, std::int64_t>> predicted_peak_bytes, bool feasible,
                           std::optional<std::string> reason = std::nullopt);
  // Predicted peak at `location`, or nullopt when the plan and manager never touch it.
  std::optional<std::int64_t> predicted_peak(const ResidencyLocation& location) const noexcept;
  friend bool operator==(const ResidencyPlanExplanation&, const ResidencyPlanExplanation&) = default;
};

// Transitions completed by one plan operation (complete on success, the
// committed prefix inside ResidencyPlanExecutionError on failure).
struct ResidencyPlanReport {
  std::string plan_name;
  std::vector<ResidencyTransitionReport> transitions;
  std::int64_t started_at_ns;
  std::int64_t completed_at_ns;

  ResidencyPlanReport(std::string plan_name, std::vector<ResidencyTransitionReport> transitions,
                      std::int64_t started_at_ns, std::int64_t completed_at_ns);
  friend bool operator==(const ResidencyPlanReport&, const ResidencyPlanReport&) = default;
};

}  // namespace fhelium::residency
