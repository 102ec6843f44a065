#include "fhelium/harness/invariant_checker.hpp"

#include <algorithm>

namespace fhelium::harness {

using namespace residency;

namespace {

std::string at(const ResidencyLocation& location) { return " at " + location.name(); }
std::string n(std::int64_t value) { return std::to_string(value); }

}  // namespace

void InvariantChecker::expect(bool holds, const char* invariant, const std::string& detail,
                              std::vector<InvariantViolation>& violations) {
  ++checks_;
  if (!holds) violations.push_back({invariant, detail});
}

std::vector<InvariantViolation> InvariantChecker::check(const ResidencySnapshot& snapshot) {
  std::vector<InvariantViolation> violations;
  struct Totals {
    std::int64_t used = 0, reserved = 0, values = 0, reservations = 0, uses = 0, holds = 0, pending = 0;
  };
  std::map<ResidencyLocation, Totals> totals;
  for (const auto& value : snapshot.values) {
    const std::string who = "value '" + value.handle.handle_id + "'";
    expect(value.has_source == value.source_location.has_value(), "source-consistency",
           who + ": has_source=" + (value.has_source ? "true" : "false") + " but source_location is " +
               (value.source_location ? value.source_location->name() : "absent"),
           violations);
    if (value.discarded) {
      expect(value.materializations.empty() && !value.has_source, "discarded-empty",
             who + " is discarded but keeps " + n(static_cast<std::int64_t>(value.materializations.size())) +
                 " materialization(s)" + (value.has_source ? " and a source" : ""),
             violations);
    } else if (value.spec.recoverability == Recoverability::must_preserve) {
      expect(!value.materializations.empty(), "must-preserve-kept", who + " is MUST_PRESERVE and has no materialization",
             violations);
    }
    if (value.spec.replica_mode == ReplicaMode::exclusive) {
      expect(value.materializations.size() <= 1, "exclusive-single",
             who + " is EXCLUSIVE with " + n(static_cast<std::int64_t>(value.materializations.size())) +
                 " materializations",
             violations);
    }
    for (const auto& item : value.materializations) {
      expect(item.charged_nbytes >= std::max(item.logical_nbytes, item.storage_nbytes) &&
                 item.charged_nbytes == value.spec.storage_nbytes,
             "charge-covers",
             who + at(item.location) + ": charged " + n(item.charged_nbytes) + ", logical " + n(item.logical_nbytes) +
                 ", storage " + n(item.storage_nbytes) + ", spec " + n(value.spec.storage_nbytes),
             violations);
      Totals& total = totals[item.location];
      total.used += item.charged_nbytes;
      total.values += 1;
      total.uses += item.use_count;
      total.holds += item.hold_count;
      total.pending += item.pending_event_count;
    }
  }
  for (const auto& reservation : snapshot.reservations) {
    totals[reservation.location].reserved += reservation.nbytes;
    totals[reservation.location].reservations += 1;
  }
  for (const auto& [location, total] : totals) {
    expect(snapshot.location(location) != nullptr, "locations-registered",
           location.name() + " holds materializations or reservations but is not a registered location", violations);
  }
  for (const auto& location : snapshot.locations) {
    const ResidencyLocation where = location.location;
    const Totals total = totals.count(where) ? totals[where] : Totals{};
    if (location.budget_bytes) {
      expect(location.remaining_budget_bytes.has_value() &&
                 *location.remaining_budget_bytes ==
                     *location.budget_bytes - location.used_bytes - location.reserved_bytes &&
                 *location.remaining_budget_bytes >= 0,
             "budget-arithmetic",
             "remaining " + (location.remaining_budget_bytes ? n(*location.remaining_budget_bytes) : "absent") +
                 " != budget " + n(*location.budget_bytes) + " - used " + n(location.used_bytes) + " - reserved " +
                 n(location.reserved_bytes) + at(where),
             violations);
    } else {
      expect(!location.remaining_budget_bytes.has_value(), "budget-arithmetic",
             "unbudgeted" + at(where) + " reports a remaining budget", violations);
    }
    expect(location.used_bytes == total.used, "used-sum",
           "used " + n(location.used_bytes) + " != sum of charges " + n(total.used) + at(where), violations);
    expect(location.reserved_bytes == total.reserved, "reserved-sum",
           "reserved " + n(location.reserved_bytes) + " != sum of named reservations " + n(total.reserved) + at(where),
           violations);
    expect(location.peak_used_bytes >= location.used_bytes, "peak-used",
           "peak_used " + n(location.peak_used_bytes) + " < used " + n(location.used_bytes) + at(where), violations);
    expect(location.peak_charged_bytes >=
               std::max(location.peak_used_bytes, location.used_bytes + location.reserved_bytes),
           "peak-charged",
           "peak_charged " + n(location.peak_charged_bytes) + " < max(peak_used " + n(location.peak_used_bytes) +
               ", used + reserved " + n(location.used_bytes + location.reserved_bytes) + ")" + at(where),
           violations);
    expect(location.value_count == total.values && location.reservation_count == total.reservations &&
               location.use_count == total.uses && location.hold_count == total.holds &&
               location.pending_event_count == total.pending,
           "counts",
           "counts" + at(where) + " (values " + n(location.value_count) + "/" + n(total.values) + ", reservations " +
               n(location.reservation_count) + "/" + n(total.reservations) + ", uses " + n(location.use_count) + "/" +
               n(total.uses) + ", holds " + n(location.hold_count) + "/" + n(total.holds) + ", pending " +
               n(location.pending_event_count) + "/" + n(total.pending) + ")",
           violations);
    const auto previous = last_peaks_.find(where);
    if (previous != last_peaks_.end()) {
      expect(location.peak_used_bytes >= previous->second.first && location.peak_charged_bytes >= previous->second.second,
             "peaks-monotonic",
             "peaks" + at(where) + " fell from " + n(previous->second.first) + "/" + n(previous->second.second) +
                 " to " + n(location.peak_used_bytes) + "/" + n(location.peak_charged_bytes),
             violations);
    }
    last_peaks_[where] = {location.peak_used_bytes, location.peak_charged_bytes};
  }
  if (last_version_) {
    expect(snapshot.state_version >= *last_version_, "version-monotonic",
           "state_version fell from " + std::to_string(*last_version_) + " to " + std::to_string(snapshot.state_version),
           violations);
  }
  if (last_captured_ns_) {
    expect(snapshot.captured_at_ns >= *last_captured_ns_, "clock-monotonic",
           "captured_at_ns fell from " + n(*last_captured_ns_) + " to " + n(snapshot.captured_at_ns), violations);
  }
  last_version_ = snapshot.state_version;
  last_captured_ns_ = snapshot.captured_at_ns;
  return violations;
}

}  // namespace fhelium::harness
