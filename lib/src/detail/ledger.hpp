// Per-location byte accounting: budgets, used and reserved charges, peaks, and
// the registration order that snapshots and explanations report.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

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
  bool register_location(const ResidencyLocation& location);
  const LocationAccount* find(const ResidencyLocation& location) const;

  // Throws ResidencyBudgetError when admitting `bytes` more would exceed the
  // budget of `location`, or would push its used + reserved bytes past
  // INT64_MAX (budgeted or not). Unregistered locations always admit.
  void check_admission(const ResidencyLocation& location, std::int64_t bytes) const;

  // Charges of a registered location. Removing more than was added is a bug.
  void add_used(const ResidencyLocation& location, std::int64_t bytes);
  void remove_used(const ResidencyLocation& location, std::int64_t bytes);
  void add_reserved(const ResidencyLocation& location, std::int64_t bytes);
  void remove_reserved(const ResidencyLocation& location, std::int64_t bytes);

  // Zeroes used and reserved charges (manager close); peaks stay.
  void clear_charges();

  // A copy for dry runs (explain): the same budgets and charges, with each
  // peak lowered to the current charge, so that its peaks afterwards are
  // what the dry run would reach from now on.
  LocationLedger shadow() const;
  // Raises the charged peak of `location` to its charge plus `bytes`, for a
  // dry-run charge that is not kept: one refused, or a temporary one returned
  // at once. Nothing when that sum is unrepresentable.
  void note_transient_charge(const ResidencyLocation& location, std::int64_t bytes);

  const std::vector<LocationAccount>& accounts() const { return accounts_; }

 private:
  LocationAccount& account(const ResidencyLocation& location);
  static void raise_peaks(LocationAccount& account);

  std::vector<LocationAccount> accounts_;
  std::array<std::int32_t, ResidencyLocation::ordinal_count> slot_{};
};

}  // namespace fhelium::residency::detail
