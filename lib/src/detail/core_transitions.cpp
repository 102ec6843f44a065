// Values and primitive transitions: adopt, register_source, ensure, move, drop,
// discard, and the install/remove/reconstruct steps they share.
#include <stdexcept>

#include "detail/check.hpp"
#include "detail/manager_core.hpp"
#include "detail/record_assembly.hpp"
#include "detail/transition_rules.hpp"
#include "fhelium/residency/errors.hpp"

namespace fhelium::residency::detail {

namespace {

std::string value_name(const ValueRecord& record) {
  return "value '" + record.handle.handle_id + "' (" + record.spec.value_type + ")";
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

ResidencyHandle ManagerCore::adopt(ResidentValue value, std::optional<ResidencyLocation> at,
                                   ReplicaMode replica_mode) {
  validate(replica_mode, "adopt replica_mode");
  StateAccess access(*this);
  require_open_locked();
  reap_locked();
  if (!at) {
    at = runtime_->locate(value);
    if (!at) {
      throw ResidencyMaterializationError("cannot infer the location of " + value.type_name() +
                                          " value: it has no tensors or they are not all at one location; pass `at`");
    }
  }
  runtime_->check_location(*at);
  const std::int64_t logical = value.logical_nbytes();
  ResidencyValueSpec spec(value.type_name(), logical, std::max(logical, value.storage_nbytes()), replica_mode,
                          Recoverability::must_preserve);
  ValueRecord& record = values_.add(std::move(spec), nullptr, std::nullopt);
  try {
    install_locked(record, *at, std::move(value), false);
  } catch (...) {
    values_.remove_last();
    throw;
  }
  return record.handle;
}

ResidencyHandle ManagerCore::register_source(ResidencyValueSpec spec, std::shared_ptr<ResidencySource> source,
                                             ResidencyLocation source_location) {
  if (!source) throw std::invalid_argument("register_source needs a non-null ResidencySource");
  spec.validate();  // its fields are public and may have changed since construction
  if (spec.recoverability != Recoverability::reconstructible) {
    throw std::invalid_argument("a registered ResidencySource requires a RECONSTRUCTIBLE spec");
  }
  StateAccess access(*this);
  require_open_locked();
  reap_locked();
  runtime_->check_location(source_location);
  register_location_locked(source_location);
  ValueRecord& record = values_.add(std::move(spec), std::move(source), source_location);
  bump_locked();
  return record.handle;
}

ResidencyTransitionReport ManagerCore::run_action(const ResidencyAction& action,
                                                  const std::optional<c10::Stream>& stream) {
  validate_handle(action_handle(action));
  StateAccess access(*this);
  require_open_locked();
  return execute_action_locked(action, stream);
}

ResidencyTransitionReport ManagerCore::execute_action_locked(const ResidencyAction& action,
                                                             const std::optional<c10::Stream>& stream,
                                                             ValueRecord* resolved) {
  reap_locked();
  const std::int64_t started = clock_locked();
  ValueRecord& record = resolved != nullptr ? *resolved : values_.lookup(action_handle(action));
  FHELIUM_CHECK(!record.discarded, "a plan acts on a value discarded before its action");
  // Every argument is checked before any state is read for no-op detection.
  std::visit(
      [&](const auto& typed) {
        using T = std::decay_t<decltype(typed)>;
        if constexpr (std::is_same_v<T, EnsureResident>) {
          runtime_->check_location(typed.location);
          if (stream) runtime_->check_stream(typed.location, *stream);
        } else if constexpr (std::is_same_v<T, MoveResident>) {
          runtime_->check_location(typed.to);
          if (typed.from_location) runtime_->check_location(*typed.from_location);
          if (stream) runtime_->check_stream(typed.to, *stream);
        } else {
          if constexpr (std::is_same_v<T, DropResident>) runtime_->check_location(typed.location);
          if (stream) throw std::invalid_argument("only ensure and move accept a CUDA transfer stream");
        }
      },
      action);
  const auto allocator_device = allocator_device_for(action, record);
  const auto before = sample_allocator_locked(allocator_device);
  const TransitionDecision decision = decide_transition(action, RecordView(record));
  if (decision.refused()) raise_refusal_locked(record, decision);
  if (!decision.changes_nothing()) apply_locked(record, decision, stream);
  const auto after = sample_allocator_locked(allocator_device);
  ResidencyTransitionReport report(RecordAssembly::key(), action, decision.changes_nothing(), decision.source,
                                   decision.destination, record.spec.logical_nbytes, record.spec.storage_nbytes,
                                   started, clock_locked(), allocator_device, before.first, before.second,
                                   after.first, after.second,
                                   decision.no_op ? std::optional<std::string>(decision.no_op) : std::nullopt);
  trace_.push(report);
  return report;
}

void ManagerCore::raise_refusal_locked(const ValueRecord& record, const TransitionDecision& decision) const {
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
      require_removable_locked(record, *record.at(*decision.refused_at));
  }
  FHELIUM_CHECK(false, "a refused transition raised nothing");
}

void ManagerCore::apply_locked(ValueRecord& record, const TransitionDecision& decision,
                               const std::optional<c10::Stream>& stream) {
  if (decision.discard) {
    discard_locked(record);
    return;
  }
  if (decision.install) {
    TransferSource from = decision.load
                              ? load_locked(record)
                              : TransferSource{*decision.source, record.at(*decision.source)->value, false, {}};
    materialize_locked(record, std::move(from), *decision.destination, stream, decision.exclusive_transition);
  }
  if (decision.remove) remove_materialization_locked(record, *decision.remove);
}

void ManagerCore::discard_locked(ValueRecord& record) {
  while (!record.materializations.empty()) {
    remove_materialization_locked(record, record.materializations.back().location);
  }
  record.source.reset();
  record.source_location.reset();
  record.discarded = true;
  bump_locked();
}

void ManagerCore::materialize_locked(ValueRecord& record, TransferSource from, const ResidencyLocation& destination,
                                     const std::optional<c10::Stream>& stream, bool allow_exclusive_transition) {
  const std::int64_t charge = record.spec.storage_nbytes;
  auto release_temporary = [&] {
    if (from.temporary) {
      from.temporary = false;
      ledger_.remove_reserved(from.location, charge);
    }
  };
  ScopeExit guard(release_temporary);
  if (from.temporary && from.location == destination) {
    // The loaded value already lives at the destination: one charge serves both.
    release_temporary();
    install_locked(record, destination, std::move(from.value), allow_exclusive_transition, std::move(from.keys));
    return;
  }
  ledger_.check_admission(destination, charge);
  ResidentValue copy = runtime_->copy_to(from.value, destination, stream);
  install_locked(record, destination, std::move(copy), allow_exclusive_transition);
}

void ManagerCore::install_locked(ValueRecord& record, const ResidencyLocation& location, ResidentValue value,
                                 bool allow_exclusive_transition, std::optional<std::vector<StorageKey>> checked_keys) {
  FHELIUM_CHECK(record.at(location) == nullptr, "materialization installed twice");
  if (record.spec.replica_mode == ReplicaMode::exclusive && !record.materializations.empty() &&
      !allow_exclusive_transition) {
    throw ResidencyOwnershipError("EXCLUSIVE " + value_name(record) + " cannot have simultaneous replicas");
  }
  // A freshly loaded value was validated and checked for aliasing at this
  // very location by load_locked, under the same lock: not twice.
  if (!checked_keys) validate_materialization_locked(record.spec, value, location);
  ledger_.check_admission(location, record.spec.storage_nbytes);
  std::vector<StorageKey> keys = checked_keys ? std::move(*checked_keys) : runtime_->storage_keys(value);
  if (!checked_keys) values_.check_unaliased(keys);
  register_location_locked(location);
  values_.claim(keys, record, location);
  const std::int64_t storage = value.storage_nbytes();
  record.materializations.emplace_back(location, std::move(value), storage, std::move(keys));
  ledger_.add_used(location, record.spec.storage_nbytes);
  bump_locked();
}

void ManagerCore::remove_materialization_locked(ValueRecord& record, const ResidencyLocation& location) {
  auto& items = record.materializations;
  for (auto it = items.begin(); it != items.end(); ++it) {
    if (it->location != location) continue;
    FHELIUM_CHECK(!it->is_protected(), "protected materialization removed");
    values_.unclaim(it->storage_keys);
    ledger_.remove_used(location, record.spec.storage_nbytes);
    items.erase(it);
    bump_locked();
    return;
  }
  FHELIUM_CHECK(false, "removing a materialization that does not exist");
}

void ManagerCore::require_removable_locked(const ValueRecord& record, const Materialization& item) const {
  if (!item.is_protected()) return;
  throw ResidencyInUseError(value_name(record) + " at " + item.location.name() +
                            " is protected: active_reads=" + std::to_string(item.use_count) +
                            ", holds=" + std::to_string(item.hold_count) +
                            ", pending_events=" + std::to_string(item.pending_count));
}

TransferSource ManagerCore::load_locked(ValueRecord& record) {
  const ResidencyLocation location = *record.source_location;
  const std::int64_t charge = record.spec.storage_nbytes;
  ledger_.check_admission(location, charge);
  ledger_.add_reserved(location, charge);
  ScopeExit release([&] { ledger_.remove_reserved(location, charge); });
  std::optional<ResidentValue> loaded;
  {
    set_loading(true);
    ScopeExit done([&] { set_loading(false); });
    loaded = record.source->load();
  }
  validate_materialization_locked(record.spec, *loaded, location);
  // A load must return fresh storage: one that aliases a managed
  // materialization would hand another value's bytes to this one, even when
  // only copied from (the copy itself is fresh).
  std::vector<StorageKey> keys = runtime_->storage_keys(*loaded);
  values_.check_unaliased(keys);
  release.dismiss();
  return TransferSource{location, std::move(*loaded), true, std::move(keys)};
}

void ManagerCore::validate_materialization_locked(const ResidencyValueSpec& spec, const ResidentValue& value,
                                                  const ResidencyLocation& location) const {
  if (value.type_name() != spec.value_type) {
    throw ResidencyMaterializationError("Expected " + spec.value_type + ", got " + value.type_name() +
                                        " (a source or copy returned the wrong value type)");
  }
  if (!runtime_->occupies(value, location)) {
    const auto actual = runtime_->locate(value);
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

std::optional<c10::Device> ManagerCore::allocator_device_for(const ResidencyAction& action,
                                                             const ValueRecord& record) const {
  // The first CUDA location among the action's destination, then its source(s).
  const auto first_cuda_materialization = [&]() -> std::optional<c10::Device> {
    for (const auto& item : record.materializations) {
      if (item.location.is_cuda()) return item.location.device();
    }
    return std::nullopt;
  };
  if (const auto* ensure = std::get_if<EnsureResident>(&action)) {
    if (ensure->location.is_cuda()) return ensure->location.device();
  } else if (const auto* move = std::get_if<MoveResident>(&action)) {
    if (move->to.is_cuda()) return move->to.device();
    if (move->from_location) {
      if (move->from_location->is_cuda()) return move->from_location->device();
    } else {
      return first_cuda_materialization();
    }
  } else if (const auto* drop = std::get_if<DropResident>(&action)) {
    if (drop->location.is_cuda()) return drop->location.device();
  } else {
    return first_cuda_materialization();
  }
  return std::nullopt;
}

}  // namespace fhelium::residency::detail
