// Transitions: the steps that carry out a decided transition (transitions.hpp).
#include "detail/transitions.hpp"

#include <stdexcept>
#include <type_traits>

#include "detail/check.hpp"
#include "detail/handle_text.hpp"
#include "detail/scope_exit.hpp"
#include "fhelium/residency/errors.hpp"

namespace fhelium::residency::detail {

namespace {

std::string value_name(const ValueRecord& record) {
  return "value '" + ValueTable::id_of(record) + "' (" + record.spec.value_type + ")";
}

// A value's real state, as the transition rules see it (after reaping, so
// protection is exactly the counts).
class RecordView {
  static const ResidencyLocation& location_of(const Materialization& item) { return item.location; }

 public:
  explicit RecordView(const ValueRecord& record) : record_(record) {}
  const ValueRecord& record() const { return record_; }
  bool resident(const ResidencyLocation& location) const { return record_.at(location) != nullptr; }
  std::size_t count() const { return record_.materializations.size(); }
  std::optional<ResidencyLocation> first(const std::optional<ResidencyLocation>& exclude) const {
    return smallest_location(record_.materializations, exclude, location_of);
  }
  bool protected_at(const ResidencyLocation& location) const {
    const Materialization* item = record_.at(location);
    return item != nullptr && item->is_protected();
  }
  std::vector<ResidencyLocation> protected_locations() const {
    return protected_locations_of(record_.materializations, location_of,
                                  [](const Materialization& item) { return item.is_protected(); });
  }

 private:
  const ValueRecord& record_;
};

}  // namespace

template <class Action>
[[gnu::hot]]
void Transitions::check_arguments(const Action& action, const std::optional<c10::Stream>& stream) const {
  if constexpr (std::is_same_v<Action, EnsureResident>) {
    runtime_.check_location(action.location);
    if (stream) runtime_.check_stream(action.location, *stream);
  } else if constexpr (std::is_same_v<Action, MoveResident>) {
    runtime_.check_location(action.to);
    if (action.from_location) runtime_.check_location(*action.from_location);
    if (stream) runtime_.check_stream(action.to, *stream);
  } else {
    // No call of these types takes a stream (drop and discard have no stream
    // parameter, and a plan gives its drops and discards none).
    FHELIUM_CHECK(!stream, "a drop or discard given a transfer stream");
    if constexpr (std::is_same_v<Action, DropResident>) runtime_.check_location(action.location);
  }
}

template <class Action>
[[gnu::hot]]
TransitionDecision Transitions::decide_and_apply(const Action& action, ValueRecord& record,
                                                 const std::optional<c10::Stream>& stream) {
  TransitionDecision decision = decide_transition(action, RecordView(record));
  if (decision.refused()) raise_refusal(record, decision);
  apply(record, decision, stream);
  return decision;
}

template <class Action>
[[gnu::hot]]
TransitionDecision Transitions::apply_planned(const TransitionDecision& planned, const Action& action,
                                              ValueRecord& record, const std::optional<c10::Stream>& stream) {
  FHELIUM_CHECK(!planned.refused(), "a refused action passed its preflight");
  // Protection only ever refuses, and between the preflight and the action
  // it can only have ended (events complete; nothing new is leased or held
  // under the lock), so against an unprotected record the plan's decision is
  // the one the rules would make now. A protected one is decided again: the
  // preflight may have seen an event complete that the action's own reaping
  // could not prove (a failed query keeps protection), and the action must
  // then be refused, not carried out over a protected materialization.
  for (const Materialization& item : record.materializations) {
    if (item.is_protected()) [[unlikely]] return decide_and_apply(action, record, stream);
  }
  apply(record, planned, stream);
  return planned;
}

[[gnu::hot]]
void Transitions::register_location(const ResidencyLocation& location) {
  if (ledger_.register_location(location)) bump();
}

void Transitions::raise_refusal(const ValueRecord& record, const TransitionDecision& decision) const {
  switch (decision.refusal) {
    case Refusal::none: return;
    case Refusal::exclusive_replica:
      throw ResidencyOwnershipError("EnsureResident would replicate EXCLUSIVE " + value_name(record) + " at " +
                                    decision.destination->name() + "; use MoveResident");
    case Refusal::no_source:
      throw ResidencyUnavailableError(value_name(record) + " has no materialization and no reconstruction source");
    case Refusal::explicit_source_absent:
      throw ResidencyUnavailableError("Explicit source " + decision.refused_at->name() + " of " + value_name(record) +
                                      " is not resident");
    case Refusal::final_must_preserve:
      throw ResidencyOwnershipError("cannot drop the final MUST_PRESERVE materialization of " + value_name(record) +
                                    " at " + decision.refused_at->name() + "; discard the value instead");
    case Refusal::source_protected:
    case Refusal::target_protected:
    case Refusal::discard_protected:
      require_removable(record, *record.at(*decision.refused_at));
  }
  FHELIUM_CHECK(false, "a refused transition raised nothing");
}

// Inline in its two callers, as load_in, require_new and run_source are in
// theirs: steps every transition takes, called from this file only, whose
// calls cost more than their bodies save in code size.
[[gnu::always_inline]] inline void Transitions::apply(ValueRecord& record, const TransitionDecision& decision,
                                                      const std::optional<c10::Stream>& stream) {
  if (decision.changes_nothing()) return;
  if (decision.discard) {
    discard(record);
    return;
  }
  if (decision.install) {
    if (decision.load) {
      load_in(record, *decision.destination, stream, decision.exclusive_transition);
    } else {
      // By reference: the copy is made before anything is installed.
      copy_in(record, record.at(*decision.source)->value, *decision.destination, stream,
              decision.exclusive_transition);
    }
  }
  if (decision.remove) remove(record, *decision.remove);
}

void Transitions::discard(ValueRecord& record) {
  while (!record.materializations.empty()) {
    remove(record, record.materializations.back().location);
  }
  record.source.reset();
  record.source_location.reset();
  record.discarded = true;
  bump();
}

void Transitions::copy_in(ValueRecord& record, const ResidentValue& from, const ResidencyLocation& destination,
                          const std::optional<c10::Stream>& stream, bool allow_exclusive_transition) {
  ledger_.check_admission(destination, record.spec.storage_nbytes);
  ResidentValue copy = runtime_.copy_to(from, destination, stream);
  install(record, destination, std::move(copy), allow_exclusive_transition);
}

[[gnu::always_inline]] inline void Transitions::load_in(ValueRecord& record, const ResidencyLocation& destination,
                          const std::optional<c10::Stream>& stream, bool allow_exclusive_transition) {
  const ResidencyLocation location = *record.source_location;
  const std::int64_t charge = record.spec.storage_nbytes;
  ledger_.check_admission(location, charge);
  ledger_.add_reserved(location, charge);
  ScopeExit release([&] { ledger_.remove_reserved(location, charge); });
  if (location != destination) {
    // A load must return fresh storage: one that aliases a managed
    // materialization would hand another value's bytes to this one, even
    // when only copied from (the copy itself is fresh).
    const Loaded loaded = load(record, location);
    values_.check_unaliased(loaded.keys);
    copy_in(record, loaded.value, destination, stream, allow_exclusive_transition);
    return;
  }
  // The value is loaded where it stays, straight into its new
  // materialization (not moved there afterwards), and install() checks it
  // there: its storage claim refuses a load that aliases managed storage.
  // One charge serves the load and the materialization: install() turns the
  // reservation into the used charge, and a refusal returns it.
  require_new(record, destination, allow_exclusive_transition);
  Materialization& item = record.materializations.emplace_back(destination, [&] { return run_source(record); });
  install<true>(record, item);
  release.dismiss();
}

[[gnu::hot]]
void Transitions::install(ValueRecord& record, const ResidencyLocation& location, ResidentValue&& value,
                          bool allow_exclusive_transition) {
  require_new(record, location, allow_exclusive_transition);
  install(record, record.materializations.emplace_back(location, [&] { return std::move(value); }));
}

[[gnu::always_inline]] inline void Transitions::require_new(const ValueRecord& record, const ResidencyLocation& location,
                              bool allow_exclusive_transition) const {
  FHELIUM_CHECK(record.at(location) == nullptr, "materialization installed twice");
  if (record.spec.replica_mode == ReplicaMode::exclusive && !record.materializations.empty() &&
      !allow_exclusive_transition) {
    throw ResidencyOwnershipError("EXCLUSIVE " + value_name(record) + " cannot have simultaneous replicas");
  }
}

template <bool reserved>
[[gnu::hot]]
void Transitions::install(ValueRecord& record, Materialization& item) {
  // Until every check has passed, a refusal takes the materialization out
  // again (the last one: nothing was added after it).
  ScopeExit withdraw([&] { record.materializations.pop_back(); });
  validate(record.spec, item.value, item.location);
  item.storage_keys = runtime_.storage_keys(item.value);
  item.storage_nbytes = item.value.storage_nbytes();
  // Claimed first, so that storage already under management is refused
  // before the budget is consulted; released again if the budget refuses.
  values_.claim(item.storage_keys, record, item.location);
  if constexpr (reserved) {
    // Nothing can refuse it from here: the reservation admitted the charge.
    withdraw.dismiss();
    ledger_.use_reserved(item.location, record.spec.storage_nbytes);
  } else {
    ScopeExit unclaim([&] { values_.unclaim(item.storage_keys); });
    ledger_.check_admission(item.location, record.spec.storage_nbytes);
    register_location(item.location);
    unclaim.dismiss();
    withdraw.dismiss();
    ledger_.add_used(item.location, record.spec.storage_nbytes);
  }
  bump();
}

[[gnu::hot]]
void Transitions::remove(ValueRecord& record, const ResidencyLocation& location) {
  auto& items = record.materializations;
  for (auto it = items.begin(); it != items.end(); ++it) {
    if (it->location != location) continue;
    FHELIUM_CHECK(!it->is_protected(), "protected materialization removed");
    values_.unclaim(it->storage_keys);
    ledger_.remove_used(location, record.spec.storage_nbytes);
    items.erase(it);
    bump();
    return;
  }
  FHELIUM_CHECK(false, "removing a materialization that does not exist");
}

void Transitions::require_removable(const ValueRecord& record, const Materialization& item) {
  if (!item.is_protected()) return;
  throw ResidencyInUseError(value_name(record) + " at " + item.location.name() +
                            " is protected: active_reads=" + std::to_string(item.use_count) +
                            ", holds=" + std::to_string(item.hold_count) +
                            ", pending_events=" + std::to_string(item.pending_count));
}

[[gnu::always_inline]] inline ResidentValue Transitions::run_source(ValueRecord& record) {
  gate_.set_loading(true);
  ScopeExit done([&] { gate_.set_loading(false); });
  return record.source->load();
}

[[gnu::hot]]
Transitions::Loaded Transitions::load(ValueRecord& record, const ResidencyLocation& location) {
  Loaded loaded{run_source(record), {}};
  validate(record.spec, loaded.value, location);
  loaded.keys = runtime_.storage_keys(loaded.value);
  return loaded;
}

[[gnu::hot]]
void Transitions::validate(const ResidencyValueSpec& spec, const ResidentValue& value,
                                                  const ResidencyLocation& location) const {
  if (!same_text(value.type_name(), spec.value_type)) {
    throw ResidencyMaterializationError("Expected " + spec.value_type + ", got " + value.type_name() +
                                        " (a source or copy returned the wrong value type)");
  }
  if (!runtime_.occupies(value, location)) {
    const auto actual = runtime_.locate(value);
    throw ResidencyMaterializationError(spec.value_type + " value lives at " +
                                        (actual ? actual->name() : std::string("mixed or unknown locations")) +
                                        ", not at " + location.name());
  }
  if (value.logical_nbytes() != spec.logical_nbytes) {
    throw ResidencyMaterializationError("Logical payload size mismatch for " + spec.value_type +
                                        ": expected=" + std::to_string(spec.logical_nbytes) +
                                        ", actual=" + std::to_string(value.logical_nbytes()));
  }
  const std::int64_t actual_storage = std::max(value.logical_nbytes(), value.storage_nbytes());
  if (actual_storage > spec.storage_nbytes) {
    throw ResidencyMaterializationError("Backing-storage charge mismatch: registered charge exceeded by " +
                                        spec.value_type + "; charge=" + std::to_string(spec.storage_nbytes) +
                                        ", actual=" + std::to_string(actual_storage));
  }
}

// The four action types' instances (transitions.hpp declares them).
#define FHELIUM_TRANSITIONS_FOR(Action)                                                                         \
  template void Transitions::check_arguments<Action>(const Action&, const std::optional<c10::Stream>&) const;   \
  template TransitionDecision Transitions::decide_and_apply<Action>(const Action&, ValueRecord&,                \
                                                                    const std::optional<c10::Stream>&);         \
  template TransitionDecision Transitions::apply_planned<Action>(const TransitionDecision&, const Action&,      \
                                                                 ValueRecord&, const std::optional<c10::Stream>&);
FHELIUM_TRANSITIONS_FOR(EnsureResident)
FHELIUM_TRANSITIONS_FOR(MoveResident)
FHELIUM_TRANSITIONS_FOR(DropResident)
FHELIUM_TRANSITIONS_FOR(DiscardValue)
#undef FHELIUM_TRANSITIONS_FOR

}  // namespace fhelium::residency::detail
