#include "detail/ledger.hpp"

#include <algorithm>
#include <limits>

#include "detail/check.hpp"
#include "fhelium/residency/errors.hpp"

namespace fhelium::residency::detail {

LocationLedger::LocationLedger() { slot_.fill(-1); }

void LocationLedger::add_budget(const ResidencyLocation& location, std::int64_t budget_bytes) {
  FHELIUM_CHECK(register_location(location), "budgeted location registered twice");
  accounts_.back().budget_bytes = budget_bytes;
}

bool LocationLedger::register_location(const ResidencyLocation& location) {
  std::int32_t& slot = slot_[static_cast<std::size_t>(location.ordinal())];
  if (slot >= 0) return false;
  slot = static_cast<std::int32_t>(accounts_.size());
  accounts_.push_back(LocationAccount{location, std::nullopt});
  return true;
}

const LocationAccount* LocationLedger::find(const ResidencyLocation& location) const {
  const std::int32_t slot = slot_[static_cast<std::size_t>(location.ordinal())];
  return slot < 0 ? nullptr : &accounts_[static_cast<std::size_t>(slot)];
}

LocationAccount& LocationLedger::account(const ResidencyLocation& location) {
  const std::int32_t slot = slot_[static_cast<std::size_t>(location.ordinal())];
  FHELIUM_CHECK(slot >= 0, "charge at an unregistered location");
  return accounts_[static_cast<std::size_t>(slot)];
}

void LocationLedger::check_admission(const ResidencyLocation& location, std::int64_t bytes) const {
  FHELIUM_CHECK(bytes >= 0, "negative charge requested");
  const LocationAccount* state = find(location);
  if (state == nullptr) return;
  if (!state->budget_bytes) {
    // Admitted charges never exceed INT64_MAX in total, so this cannot overflow.
    const std::int64_t charged = state->used_bytes + state->reserved_bytes;
    if (bytes > std::numeric_limits<std::int64_t>::max() - charged) {
      throw ResidencyBudgetError::unrepresentable(location, state->used_bytes, state->reserved_bytes, bytes);
    }
    return;
  }
  // A budget is at most INT64_MAX, so passing it also keeps the sum representable.
  if (bytes > *state->remaining_bytes()) {
    throw ResidencyBudgetError(location, *state->budget_bytes, state->used_bytes, state->reserved_bytes, bytes);
  }
}

void LocationLedger::raise_peaks(LocationAccount& state) {
  state.peak_used_bytes = std::max(state.peak_used_bytes, state.used_bytes);
  state.peak_charged_bytes = std::max(state.peak_charged_bytes, state.used_bytes + state.reserved_bytes);
  FHELIUM_CHECK(!state.budget_bytes || state.used_bytes + state.reserved_bytes <= *state.budget_bytes,
                "charge admitted past a strict budget");
}

void LocationLedger::add_used(const ResidencyLocation& location, std::int64_t bytes) {
  LocationAccount& state = account(location);
  state.used_bytes += bytes;
  raise_peaks(state);
}

void LocationLedger::remove_used(const ResidencyLocation& location, std::int64_t bytes) {
  LocationAccount& state = account(location);
  FHELIUM_CHECK(state.used_bytes >= bytes, "used bytes released twice");
  state.used_bytes -= bytes;
}

void LocationLedger::add_reserved(const ResidencyLocation& location, std::int64_t bytes) {
  LocationAccount& state = account(location);
  state.reserved_bytes += bytes;
  raise_peaks(state);
}

void LocationLedger::remove_reserved(const ResidencyLocation& location, std::int64_t bytes) {
  LocationAccount& state = account(location);
  FHELIUM_CHECK(state.reserved_bytes >= bytes, "reserved bytes released twice");
  state.reserved_bytes -= bytes;
}

LocationLedger LocationLedger::shadow() const {
  LocationLedger copy = *this;
  for (auto& state : copy.accounts_) {
    state.peak_used_bytes = state.used_bytes;
    state.peak_charged_bytes = state.used_bytes + state.reserved_bytes;
  }
  return copy;
}

void LocationLedger::note_transient_charge(const ResidencyLocation& location, std::int64_t bytes) {
  LocationAccount& state = account(location);
  std::int64_t total = 0;
  if (__builtin_add_overflow(state.used_bytes + state.reserved_bytes, bytes, &total)) return;
  state.peak_charged_bytes = std::max(state.peak_charged_bytes, total);
}

void LocationLedger::clear_charges() {
  for (auto& state : accounts_) {
    state.used_bytes = 0;
    state.reserved_bytes = 0;
  }
}

}  // namespace fhelium::residency::detail
