// Per-location byte accounting: budgets, used and reserved charges, peaks, and
// the registration order that snapshots and explanations report.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "detail/check.hpp"
#include "fhelium/residency/location.hpp"

namespace fhelium::residency::detail {

struct LocationAccount {
  ResidencyLocation location;
  std::optional<std::int64_t> budget_bytes;
  std::int64_t used_bytes = 0;
  std::int64_t reserved_bytes = 0;
  std::int64_t peak_used_bytes = 0;
  std::int64_t peak_charged_bytes = 0;

  std::optional<std::int64_t> remaining_bytes() const {
    if (!budget_bytes) return std::nullopt;
    return *budget_bytes - used_bytes - reserved_bytes;
  }
};

class LocationLedger {
 public:
  LocationLedger();

  // Registers `location` with a budget. Called only at construction.
  void add_budget(const ResidencyLocation& location, std::int64_t budget_bytes);
  // Registers an unbudgeted location on first use; returns true when new.
  bool register_location(const ResidencyLocation& location) {
    std::int32_t& slot = slot_[static_cast<std::size_t>(location.ordinal())];
    if (slot >= 0) return false;
    return add_location(location, slot);
  }
  const LocationAccount* find(const ResidencyLocation& location) const {
    const std::int32_t slot = slot_[static_cast<std::size_t>(location.ordinal())];
    return slot < 0 ? nullptr : &accounts_[static_cast<std::size_t>(slot)];
  }

  // Throws ResidencyBudgetError when admitting `bytes` more would exceed the
  // budget of `location`, or would push its used + reserved bytes past
  // INT64_MAX (budgeted or not). Unregistered locations always admit.
  void check_admission(const ResidencyLocation& location, std::int64_t bytes) const {
    FHELIUM_CHECK(bytes >= 0, "negative charge requested");
    const LocationAccount* state = find(location);
    if (state == nullptr) return;
    if (!admits(*state, bytes)) [[unlikely]] refuse_admission(*state, bytes);
  }
  // How admit_charge() charges: as used or reserved bytes, or transiently:
  // reserved and returned at once, so that only the peaks show it (a dry
  // run's reconstruction charge).
  enum class ChargeKind { used, reserved, transient };
  // check_admission() and the charge together, for a registered `location`:
  // false, charging nothing, where check_admission() would throw. One
  // lookup of the account: a dry run charges every action this way.
  bool admit_charge(const ResidencyLocation& location, std::int64_t bytes, ChargeKind kind) {
    FHELIUM_CHECK(bytes >= 0, "negative charge requested");
    LocationAccount& state = account(location);
    if (!admits(state, bytes)) return false;
    (kind == ChargeKind::used ? state.used_bytes : state.reserved_bytes) += bytes;
    raise_peaks(state);
    if (kind == ChargeKind::transient) state.reserved_bytes -= bytes;
    return true;
  }

  // Charges of a registered location. Removing more than was added is a bug.
  void add_used(const ResidencyLocation& location, std::int64_t bytes) {
    add<&LocationAccount::used_bytes>(location, bytes);
  }
  void remove_used(const ResidencyLocation& location, std::int64_t bytes) {
    remove<&LocationAccount::used_bytes>(location, bytes, "used bytes released twice");
  }
  void add_reserved(const ResidencyLocation& location, std::int64_t bytes) {
    add<&LocationAccount::reserved_bytes>(location, bytes);
  }
  void remove_reserved(const ResidencyLocation& location, std::int64_t bytes) {
    remove<&LocationAccount::reserved_bytes>(location, bytes, "reserved bytes released twice");
  }
  // Turns `bytes` reserved at `location` into used bytes there, in one step:
  // the charge stays admitted (used + reserved does not change), and the
  // used peak may rise.
  void use_reserved(const ResidencyLocation& location, std::int64_t bytes) {
    LocationAccount& state = account(location);
    FHELIUM_CHECK(bytes >= 0 && state.reserved_bytes >= bytes, "used bytes taken from a reservation not held");
    state.reserved_bytes -= bytes;
    state.used_bytes += bytes;
    state.peak_used_bytes = std::max(state.peak_used_bytes, state.used_bytes);
  }

  // Zeroes used and reserved charges (manager close); peaks stay.
  void clear_charges();

  // A copy for dry runs (explain): the same budgets and charges, with each
  // peak lowered to the current charge, so that its peaks afterwards are
  // what the dry run would reach from now on.
  LocationLedger shadow() const;
  // Raises the charged peak of `location` to its charge plus `bytes`, for a
  // dry-run charge that is not kept: one refused, or a temporary one returned
  // at once. Nothing when that sum is unrepresentable.
  void note_transient_charge(const ResidencyLocation& location, std::int64_t bytes) {
    LocationAccount& state = account(location);
    std::int64_t total = 0;
    if (__builtin_add_overflow(state.used_bytes + state.reserved_bytes, bytes, &total)) return;
    state.peak_charged_bytes = std::max(state.peak_charged_bytes, total);
  }

  const std::vector<LocationAccount>& accounts() const { return accounts_; }

 private:
  LocationAccount& account(const ResidencyLocation& location) {
    const std::int32_t slot = slot_[static_cast<std::size_t>(location.ordinal())];
    FHELIUM_CHECK(slot >= 0, "charge at an unregistered location");
    return accounts_[static_cast<std::size_t>(slot)];
  }
  // Whether `state` has room for `bytes` more. Admitted charges never exceed
  // INT64_MAX in total, and a budget is at most INT64_MAX, so neither bound
  // below can overflow.
  static bool admits(const LocationAccount& state, std::int64_t bytes) {
    const std::int64_t room = state.budget_bytes ? *state.remaining_bytes()
                                                 : std::numeric_limits<std::int64_t>::max() - state.used_bytes -
                                                       state.reserved_bytes;
    return bytes <= room;
  }
  // One charge (used or reserved), chosen at compile time.
  using Charge = std::int64_t LocationAccount::*;
  template <Charge charge>
  void add(const ResidencyLocation& location, std::int64_t bytes) {
    LocationAccount& state = account(location);
    state.*charge += bytes;
    raise_peaks(state);
  }
  template <Charge charge>
  void remove(const ResidencyLocation& location, std::int64_t bytes, const char* twice) {
    LocationAccount& state = account(location);
    FHELIUM_CHECK(state.*charge >= bytes, twice);
    state.*charge -= bytes;
  }
  static void raise_peaks(LocationAccount& state) {
    state.peak_used_bytes = std::max(state.peak_used_bytes, state.used_bytes);
    state.peak_charged_bytes = std::max(state.peak_charged_bytes, state.used_bytes + state.reserved_bytes);
    FHELIUM_CHECK(!state.budget_bytes || state.used_bytes + state.reserved_bytes <= *state.budget_bytes,
                  "charge admitted past a strict budget");
  }
  // The registration of a new location into `slot`; out of line (rare).
  bool add_location(const ResidencyLocation& location, std::int32_t& slot);
  // Throws the ResidencyBudgetError that refuses `bytes` more at `state`.
  [[noreturn]] static void refuse_admission(const LocationAccount& state, std::int64_t bytes);

  std::vector<LocationAccount> accounts_;
  std::array<std::int32_t, ResidencyLocation::ordinal_count> slot_{};
};

}  // namespace fhelium::residency::detail
