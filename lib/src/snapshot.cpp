#include "fhelium/residency/snapshot.hpp"

#include <algorithm>
#include <bitset>
#include <stdexcept>
#include <unordered_set>

#include "detail/blank_text.hpp"

namespace fhelium::residency {

namespace {

[[noreturn]] void invalid(const char* record, const std::string& message) {
  throw std::invalid_argument(std::string(record) + " " + message);
}

void require_nonnegative(const char* record, const char* field, std::int64_t value) {
  if (value < 0) invalid(record, std::string(field) + " must be non-negative, got " + std::to_string(value));
}

void require_nonnegative(const char* record, const char* field, const std::optional<std::int64_t>& value) {
  if (value) require_nonnegative(record, field, *value);
}

void require_nonempty(const char* record, const char* field, const std::string& value) {
  if (detail::is_blank(value)) invalid(record, std::string(field) + " must be non-empty");
}

void require_reason(const char* record, const std::optional<std::string>& reason) {
  if (reason && detail::is_blank(*reason)) invalid(record, "reason must be absent or non-empty");
}

void require_storage_covers_logical(const char* record, std::int64_t logical, std::int64_t storage) {
  if (storage < logical) invalid(record, "storage_nbytes must be greater than or equal to logical_nbytes");
}

// Open-addressing table of value indices: linear in the number of values and
// far cheaper than a node-based set for large snapshots.
bool handles_unique(const std::vector<ResidencyValueSnapshot>& values) {
  std::size_t capacity = 16;
  while (capacity < values.size() * 2) capacity *= 2;
  std::vector<std::size_t> slots(capacity, 0);  // index + 1; 0 is empty
  // Equal handles have equal ids: hashing the id alone is enough, and cheaper.
  const std::hash<std::string> hash;
  for (std::size_t i = 0; i < values.size(); ++i) {
    for (std::size_t slot = hash(values[i].handle.handle_id) & (capacity - 1);; slot = (slot + 1) & (capacity - 1)) {
      if (slots[slot] == 0) {
        slots[slot] = i + 1;
        break;
      }
      if (values[slots[slot] - 1].handle == values[i].handle) return false;
    }
  }
  return true;
}

}  // namespace

MaterializationSnapshot::MaterializationSnapshot(ResidencyLocation location_, std::int64_t logical_nbytes_,
                                                 std::int64_t storage_nbytes_, std::int64_t charged_nbytes_,
                                                 std::int64_t use_count_, std::int64_t hold_count_,
                                                 std::int64_t pending_event_count_)
    : location(location_),
      logical_nbytes(logical_nbytes_),
      storage_nbytes(storage_nbytes_),
      charged_nbytes(charged_nbytes_),
      use_count(use_count_),
      hold_count(hold_count_),
      pending_event_count(pending_event_count_) {
  constexpr const char* record = "MaterializationSnapshot";
  require_nonnegative(record, "logical_nbytes", logical_nbytes);
  require_nonnegative(record, "storage_nbytes", storage_nbytes);
  require_nonnegative(record, "charged_nbytes", charged_nbytes);
  require_nonnegative(record, "use_count", use_count);
  require_nonnegative(record, "hold_count", hold_count);
  require_nonnegative(record, "pending_event_count", pending_event_count);
  if (charged_nbytes < std::max(logical_nbytes, storage_nbytes)) {
    invalid(record, "charged_nbytes must cover logical and actual storage bytes");
  }
}

ResidencyValueSnapshot::ResidencyValueSnapshot(ResidencyHandle handle_, ResidencyValueSpec spec_,
                                               InlineVector<MaterializationSnapshot, 1> materializations_,
                                               bool has_source_, std::optional<ResidencyLocation> source_location_,
                                               bool discarded_)
    : handle(std::move(handle_)),
      spec(std::move(spec_)),
      materializations(std::move(materializations_)),
      has_source(has_source_),
      source_location(source_location_),
      discarded(discarded_) {
  constexpr const char* record = "ResidencyValueSnapshot";
  // At most one entry per location: a bitmap over location ordinals.
  std::bitset<ResidencyLocation::ordinal_count> seen;
  for (const auto& item : materializations) {
    const auto ordinal = static_cast<std::size_t>(item.location.ordinal());
    if (seen.test(ordinal)) invalid(record, "materialization locations must be unique");
    seen.set(ordinal);
  }
  if (has_source != source_location.has_value()) invalid(record, "source presence and location must agree");
  if (discarded && (has_source || !materializations.empty())) {
    invalid(record, "a discarded value cannot retain a source or materializations");
  }
}

const MaterializationSnapshot* ResidencyValueSnapshot::at(const ResidencyLocation& where) const noexcept {
  for (const auto& item : materializations) {
    if (item.location == where) return &item;
  }
  return nullptr;
}

ResidencyReservationSnapshot::ResidencyReservationSnapshot(ResidencyLocation location_, std::int64_t nbytes_,
                                                           std::string label_)
    : location(location_), nbytes(nbytes_), label(std::move(label_)) {
  require_nonnegative("ResidencyReservationSnapshot", "nbytes", nbytes);
  require_nonempty("ResidencyReservationSnapshot", "label", label);
}

ResidencyLocationSnapshot::ResidencyLocationSnapshot(
    ResidencyLocation location_, std::optional<std::int64_t> budget_bytes_, std::int64_t used_bytes_,
    std::int64_t reserved_bytes_, std::optional<std::int64_t> remaining_budget_bytes_,
    std::int64_t peak_used_bytes_, std::int64_t peak_charged_bytes_, std::int64_t value_count_,
    std::int64_t reservation_count_, std::int64_t use_count_, std::int64_t hold_count_,
    std::int64_t pending_event_count_, std::optional<std::int64_t> allocator_allocated_bytes_,
    std::optional<std::int64_t> allocator_reserved_bytes_)
    : location(location_),
      budget_bytes(budget_bytes_),
      used_bytes(used_bytes_),
      reserved_bytes(reserved_bytes_),
      remaining_budget_bytes(remaining_budget_bytes_),
      peak_used_bytes(peak_used_bytes_),
      peak_charged_bytes(peak_charged_bytes_),
      value_count(value_count_),
      reservation_count(reservation_count_),
      use_count(use_count_),
      hold_count(hold_count_),
      pending_event_count(pending_event_count_),
      allocator_allocated_bytes(allocator_allocated_bytes_),
      allocator_reserved_bytes(allocator_reserved_bytes_) {
  constexpr const char* record = "ResidencyLocationSnapshot";
  require_nonnegative(record, "used_bytes", used_bytes);
  require_nonnegative(record, "reserved_bytes", reserved_bytes);
  require_nonnegative(record, "peak_used_bytes", peak_used_bytes);
  require_nonnegative(record, "peak_charged_bytes", peak_charged_bytes);
  require_nonnegative(record, "value_count", value_count);
  require_nonnegative(record, "reservation_count", reservation_count);
  require_nonnegative(record, "use_count", use_count);
  require_nonnegative(record, "hold_count", hold_count);
  require_nonnegative(record, "pending_event_count", pending_event_count);
  require_nonnegative(record, "budget_bytes", budget_bytes);
  require_nonnegative(record, "remaining_budget_bytes", remaining_budget_bytes);
  require_nonnegative(record, "allocator_allocated_bytes", allocator_allocated_bytes);
  require_nonnegative(record, "allocator_reserved_bytes", allocator_reserved_bytes);
  if (peak_used_bytes < used_bytes) invalid(record, "peak_used_bytes cannot be less than used_bytes");
  if (peak_charged_bytes < std::max(peak_used_bytes, used_bytes + reserved_bytes)) {
    invalid(record, "peak_charged_bytes cannot be less than current or peak materialization charges");
  }
  if (!budget_bytes) {
    if (remaining_budget_bytes) invalid(record, "an unbudgeted location must have no remaining_budget_bytes");
    return;
  }
  if (used_bytes + reserved_bytes > *budget_bytes) invalid(record, "charges cannot exceed budget_bytes");
  if (remaining_budget_bytes != *budget_bytes - used_bytes - reserved_bytes) {
    invalid(record, "remaining_budget_bytes must equal budget_bytes - used_bytes - reserved_bytes");
  }
  if (peak_charged_bytes > *budget_bytes) invalid(record, "peak_charged_bytes cannot exceed budget_bytes");
}

ResidencySnapshot::ResidencySnapshot(std::string manager_id_, std::uint64_t state_version_,
                                     std::vector<ResidencyValueSnapshot> values_,
                                     std::vector<ResidencyLocationSnapshot> locations_,
                                     std::vector<ResidencyReservationSnapshot> reservations_,
                                     std::int64_t captured_at_ns_)
    : manager_id(std::move(manager_id_)),
      state_version(state_version_),
      values(std::move(values_)),
      locations(std::move(locations_)),
      reservations(std::move(reservations_)),
      captured_at_ns(captured_at_ns_) {
  constexpr const char* record = "ResidencySnapshot";
  require_nonempty(record, "manager_id", manager_id);
  require_nonnegative(record, "captured_at_ns", captured_at_ns);
  if (!handles_unique(values)) invalid(record, "value handles must be unique");
  std::bitset<ResidencyLocation::ordinal_count> seen;
  for (const auto& item : locations) {
    const auto ordinal = static_cast<std::size_t>(item.location.ordinal());
    if (seen.test(ordinal)) invalid(record, "location identities must be unique");
    seen.set(ordinal);
  }
}

const ResidencyLocationSnapshot* ResidencySnapshot::location(const ResidencyLocation& where) const noexcept {
  for (const auto& item : locations) {
    if (item.location == where) return &item;
  }
  return nullptr;
}

const ResidencyValueSnapshot* ResidencySnapshot::value(const ResidencyHandle& handle) const noexcept {
  for (const auto& item : values) {
    if (item.handle == handle) return &item;
  }
  return nullptr;
}

ResidencyTransitionReport::ResidencyTransitionReport(
    ResidencyAction action_, bool no_op_, std::optional<ResidencyLocation> source_,
    std::optional<ResidencyLocation> destination_, std::int64_t logical_nbytes_, std::int64_t storage_nbytes_,
    std::int64_t started_at_ns_, std::int64_t completed_at_ns_, std::optional<c10::Device> allocator_device_,
    std::optional<std::int64_t> allocated_before, std::optional<std::int64_t> reserved_before,
    std::optional<std::int64_t> allocated_after, std::optional<std::int64_t> reserved_after,
    std::optional<std::string> reason_)
    : action(std::move(action_)),
      no_op(no_op_),
      source(source_),
      destination(destination_),
      logical_nbytes(logical_nbytes_),
      storage_nbytes(storage_nbytes_),
      started_at_ns(started_at_ns_),
      completed_at_ns(completed_at_ns_),
      allocator_device(allocator_device_),
      allocator_allocated_bytes_before(allocated_before),
      allocator_reserved_bytes_before(reserved_before),
      allocator_allocated_bytes_after(allocated_after),
      allocator_reserved_bytes_after(reserved_after),
      reason(std::move(reason_)) {
  constexpr const char* record = "ResidencyTransitionReport";
  require_nonnegative(record, "logical_nbytes", logical_nbytes);
  require_nonnegative(record, "storage_nbytes", storage_nbytes);
  require_nonnegative(record, "started_at_ns", started_at_ns);
  require_nonnegative(record, "completed_at_ns", completed_at_ns);
  if (allocator_device && (!allocator_device->is_cuda() || !allocator_device->has_index())) {
    invalid(record, "allocator_device must be an indexed CUDA device");
  }
  require_storage_covers_logical(record, logical_nbytes, storage_nbytes);
  if (completed_at_ns < started_at_ns) invalid(record, "completed_at_ns cannot precede started_at_ns");
  require_nonnegative(record, "allocator_allocated_bytes_before", allocator_allocated_bytes_before);
  require_nonnegative(record, "allocator_reserved_bytes_before", allocator_reserved_bytes_before);
  require_nonnegative(record, "allocator_allocated_bytes_after", allocator_allocated_bytes_after);
  require_nonnegative(record, "allocator_reserved_bytes_after", allocator_reserved_bytes_after);
  require_reason(record, reason);
}

ResidencyActionExplanation::ResidencyActionExplanation(ResidencyAction action_, bool executable_, bool no_op_,
                                                       std::optional<ResidencyLocation> source_,
                                                       std::optional<ResidencyLocation> destination_,
                                                       std::int64_t logical_nbytes_, std::int64_t storage_nbytes_,
                                                       std::optional<std::string> reason_)
    : action(std::move(action_)),
      executable(executable_),
      no_op(no_op_),
      source(source_),
      destination(destination_),
      logical_nbytes(logical_nbytes_),
      storage_nbytes(storage_nbytes_),
      reason(std::move(reason_)) {
  constexpr const char* record = "ResidencyActionExplanation";
  require_nonnegative(record, "logical_nbytes", logical_nbytes);
  require_nonnegative(record, "storage_nbytes", storage_nbytes);
  require_storage_covers_logical(record, logical_nbytes, storage_nbytes);
  require_reason(record, reason);
}

ResidencyPlanExplanation::ResidencyPlanExplanation(
    std::string plan_name_, std::vector<ResidencyActionExplanation> actions_,
    std::vector<MemoryReservation> reservations_,
    std::vector<std::pair<ResidencyLocation, std::int64_t>> predicted_peak_bytes_, bool feasible_,
    std::optional<std::string> reason_)
    : plan_name(std::move(plan_name_)),
      actions(std::move(actions_)),
      reservations(std::move(reservations_)),
      predicted_peak_bytes(std::move(predicted_peak_bytes_)),
      feasible(feasible_),
      reason(std::move(reason_)) {
  constexpr const char* record = "ResidencyPlanExplanation";
  require_nonempty(record, "plan_name", plan_name);
  std::unordered_set<ResidencyLocation> seen;
  for (const auto& [location, nbytes] : predicted_peak_bytes) {
    require_nonnegative(record, "predicted peak byte count", nbytes);
    if (!seen.insert(location).second) invalid(record, "predicted peak locations must be unique");
  }
  require_reason(record, reason);
}

std::optional<std::int64_t> ResidencyPlanExplanation::predicted_peak(const ResidencyLocation& where) const noexcept {
  for (const auto& [location, nbytes] : predicted_peak_bytes) {
    if (location == where) return nbytes;
  }
  return std::nullopt;
}

ResidencyPlanReport::ResidencyPlanReport(std::string plan_name_, std::vector<ResidencyTransitionReport> transitions_,
                                         std::int64_t started_at_ns_, std::int64_t completed_at_ns_)
    : plan_name(std::move(plan_name_)),
      transitions(std::move(transitions_)),
      started_at_ns(started_at_ns_),
      completed_at_ns(completed_at_ns_) {
  constexpr const char* record = "ResidencyPlanReport";
  require_nonempty(record, "plan_name", plan_name);
  require_nonnegative(record, "started_at_ns", started_at_ns);
  require_nonnegative(record, "completed_at_ns", completed_at_ns);
  if (completed_at_ns < started_at_ns) invalid(record, "completed_at_ns cannot precede started_at_ns");
}

}  // namespace fhelium::residency
