#include "detail/ledger.hpp"

#include "fhelium/residency/errors.hpp"

namespace fhelium::residency::detail {

LocationLedger::LocationLedger() { slot_.fill(-1); }

void LocationLedger::add_budget(const ResidencyLocation& location, std::int64_t budget_bytes) {
  FHELIUM_CHECK(register_location(location), "budgeted location registered twice");
  accounts_.back().budget_bytes = budget_bytes;
}

bool LocationLedger::add_location(const ResidencyLocation& location, std::int32_t& slot) {
  slot = static_cast<std::int32_t>(accounts_.size());
  accounts_.push_back(LocationAccount{location, std::nullopt});
  return true;
}

void LocationLedger::refuse_admission(const LocationAccount& state, std::int64_t bytes) {
  if (!state.budget_bytes) {
    throw ResidencyBudgetError::unrepresentable(state.location, state.used_bytes, state.reserved_bytes, bytes);
  }
  throw ResidencyBudgetError(state.location, *state.budget_bytes, state.used_bytes, state.reserved_bytes, bytes);
}

LocationLedger LocationLedger::shadow() const {
  LocationLedger copy = *this;
  for (auto& state : copy.accounts_) {
    state.peak_used_bytes = state.used_bytes;
    state.peak_charged_bytes = state.used_bytes + state.reserved_bytes;
  }
  return copy;
}

void LocationLedger::clear_charges() {
  for (auto& state : accounts_) {
    state.used_bytes = 0;
    state.reserved_bytes = 0;
  }
}

}  // namespace fhelium::residency::detail
