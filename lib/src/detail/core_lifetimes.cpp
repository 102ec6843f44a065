// The manager's lifetime calls: argument and state checks, then the lifetime
// table (lifetime_table.hpp) grants or releases the counts, and the manager
// charges the ledger, bumps the state version and writes diagnostics.
#include <algorithm>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>

#include "detail/blank_text.hpp"
#include "detail/check.hpp"
#include "detail/handle_check.hpp"
#include "detail/first_seen.hpp"
#include "detail/manager_core.hpp"
#include "detail/scope_exit.hpp"
#include "fhelium/residency/errors.hpp"

namespace fhelium::residency::detail {

namespace {

// `handles` without repeats, first occurrences in order (the reference's
// lifetime normalization), in a list of their own; empty for one handle,
// since a one-value lifetime shares the value's own list. Throws std::invalid_argument naming
// `what` for an empty list or a malformed handle.
HandleList unique_handles(const std::vector<ResidencyHandle>& handles, const char* what) {
  if (handles.size() == 1) {  // the common case: nothing to collapse or own
    require_well_formed(handles.front());
    return {};
  }
  if (handles.empty()) throw std::invalid_argument(std::string(what) + " needs at least one handle");
  for (const auto& handle : handles) require_well_formed(handle);
  // As in the reference, repeats collapse onto the first occurrence.
  struct Hash {
    std::size_t operator()(const ResidencyHandle* handle) const noexcept { return std::hash<ResidencyHandle>{}(*handle); }
  };
  struct Equal {
    bool operator()(const ResidencyHandle* a, const ResidencyHandle* b) const noexcept { return *a == *b; }
  };
  FirstSeen<const ResidencyHandle*, Hash, Equal> seen(handles.size());
  std::vector<ResidencyHandle> unique;
  unique.reserve(handles.size());
  for (const auto& handle : handles) {
    if (seen.insert(&handle)) unique.push_back(handle);
  }
  return HandleList(std::make_shared<const std::vector<ResidencyHandle>>(std::move(unique)));
}

}  // namespace

ManagerCore::Covered ManagerCore::cover_locked(const std::vector<ResidencyHandle>& requested, HandleList unique,
                                               const ResidencyLocation& at) {
  Covered covered;
  for (const auto& handle : unique ? unique.get() : requested) {
    ValueRecord& record = values_.lookup(handle);
    if (record.at(at) == nullptr) {
      throw ResidencyUnavailableError("value '" + handle.handle_id + "' (" + record.spec.value_type +
                                      ") is not resident at " + at.name());
    }
    covered.records.push_back(&record);
  }
  if (unique) {
    covered.handles = std::move(unique);
    return covered;
  }
  FHELIUM_CHECK(covered.records.size() == 1, "a lifetime over several values without their list");
  covered.handles = HandleList(values_.handle_list(*covered.records.front()));
  return covered;
}

std::optional<LifetimeGrant> ManagerCore::acquire_in_lane(const ResidencyHandle& handle, const ResidencyLocation& at) {
  const unsigned lane = gate_.enter_own_lane();
  if (lane == StateGate::lane_count) return std::nullopt;
  ScopeExit leave([&] { gate_.leave_lane(lane); });
  // Written under the gate only, so stable here. The first pin and a
  // value's first handle list are written by the call under the gate.
  if (closed_ || !pins_.holds_itself() || lifetimes_.pending_lease_count() != 0) return std::nullopt;
  ValueRecord* record = values_.find_live(handle);
  if (record == nullptr || !record->handle_list) return std::nullopt;
  if (record->at(at) == nullptr) return std::nullopt;
  const std::uint64_t token = lifetimes_.grant_lane_lease(lane, *record, at);
  return LifetimeGrant{token, HandleList(record->handle_list)};
}

bool ManagerCore::release_in_lane(LifetimeToken& lifetime) noexcept {
  const unsigned lane = LifetimeTable::lane_of(lifetime.token());
  if (lane == StateGate::lane_count || !gate_.enter_lane_soon(lane)) return false;
  ScopeExit leave([&] { gate_.leave_lane(lane); });
  // Once the manager is disowned, every lease is released under the gate
  // (the pins are written under the gate only, so stable here), so the
  // release that drops a disowned core's last pin is always the gate's,
  // which lets the core go. Otherwise the lane ends the lease, and a count a
  // fold made of it is undone at the next fold.
  if (pins_.orphaned() || !lifetimes_.end_lane_lease(lane, lifetime.token())) return false;
  lifetime.deactivate();  // its pin went with the lease (folded at the next entry)
  return true;
}

LifetimeGrant ManagerCore::acquire(const std::vector<ResidencyHandle>& handles, const ResidencyLocation& at,
                                   const std::optional<c10::Stream>& consumer_stream) {
  if (handles.size() == 1 && !consumer_stream && at.is_host()) {
    if (std::optional<LifetimeGrant> grant = acquire_in_lane(handles.front(), at)) return std::move(*grant);
  }
  HandleList unique = unique_handles(handles, "acquire");
  StateAccess access(*this);
  require_open_locked();
  runtime_->check_location(at);
  if (at.is_cuda() && !consumer_stream) {
    throw std::invalid_argument("a lease at " + at.name() + " needs an explicit consumer stream");
  }
  reap_locked();  // before the stream check, as in the reference
  if (consumer_stream) runtime_->check_stream(at, *consumer_stream);
  Covered covered = cover_locked(handles, std::move(unique), at);  // before the grant: may throw
  const std::uint64_t token = lifetimes_.grant_lease(std::move(covered.records), at, consumer_stream);
  pins_.pin(*this);
  bump_locked();
  return {token, std::move(covered.handles)};
}

LifetimeGrant ManagerCore::hold(const std::vector<ResidencyHandle>& handles, const ResidencyLocation& at) {
  HandleList unique = unique_handles(handles, "hold");
  StateAccess access(*this);
  require_open_locked();
  runtime_->check_location(at);
  reap_locked();
  Covered covered = cover_locked(handles, std::move(unique), at);
  const std::uint64_t token = lifetimes_.grant_hold(std::move(covered.records), at);
  pins_.pin(*this);
  bump_locked();
  return {token, std::move(covered.handles)};
}

std::uint64_t ManagerCore::reserve(const ResidencyLocation& location, std::int64_t nbytes, const std::string& label) {
  if (nbytes < 0) throw std::invalid_argument("reservation nbytes must be non-negative, got " + std::to_string(nbytes));
  if (is_blank(label)) {
    throw std::invalid_argument("reservation label must be non-empty");
  }
  StateAccess access(*this);
  require_open_locked();
  // No reaping here: the reference's reserve() leaves completed pending leases
  // for the next transition, so state_version moves at the same calls.
  const std::uint64_t token = reserve_locked(location, nbytes, label);  // checks the location first
  pins_.pin(*this);
  return token;
}

std::uint64_t ManagerCore::reserve_locked(const ResidencyLocation& location, std::int64_t nbytes,
                                          const std::string& label) {
  runtime_->check_location(location);
  ledger_.check_admission(location, nbytes);
  transitions_.register_location(location);
  const std::uint64_t token = lifetimes_.add_reservation(location, nbytes, label);
  ledger_.add_reserved(location, nbytes);
  bump_locked();
  return token;
}

void ManagerCore::release_reservation_locked(std::uint64_t token) {
  const auto released = lifetimes_.release_reservation(token);
  if (!released) return;  // released already, or cleared by close
  ledger_.remove_reserved(released->location, released->nbytes);
  bump_locked();
}

void ManagerCore::release_reservation(LifetimeToken& lifetime, std::shared_ptr<ManagerCore>& last_pin) {
  StateAccess access(*this);
  ScopeExit end([&] { end_lifetime_locked(lifetime, last_pin); });
  release_reservation_locked(lifetime.token());
}

void ManagerCore::release_hold(LifetimeToken& lifetime, std::shared_ptr<ManagerCore>& last_pin) {
  StateAccess access(*this);
  ScopeExit end([&] { end_lifetime_locked(lifetime, last_pin); });
  if (lifetimes_.release_hold(lifetime.token())) bump_locked();
}

std::optional<ResidentValue> ManagerCore::leased_value_in_lane(std::uint64_t token, const ResidencyHandle& handle) {
  const unsigned lane = LifetimeTable::lane_of(token);
  if (lane == StateGate::lane_count || !gate_.enter_lane_soon(lane)) return std::nullopt;
  ScopeExit leave([&] { gate_.leave_lane(lane); });
  const LaneLease* lease = closed_ ? nullptr : lifetimes_.lane_lease(lane, token);
  if (lease == nullptr || lease->record != values_.find(handle)) return std::nullopt;  // errors: the gate's
  const Materialization* item = lease->record->at(lease->location);
  FHELIUM_CHECK(item != nullptr, "leased materialization is gone");
  return item->value;
}

ResidentValue ManagerCore::leased_value(std::uint64_t token, const ResidencyHandle& handle) {
  if (std::optional<ResidentValue> value = leased_value_in_lane(token, handle)) return std::move(*value);
  StateAccess access(*this);
  const std::optional<ActiveLease> lease = closed_ ? std::nullopt : lifetimes_.active_lease(token);
  if (!lease) {
    throw ResidencyLifetimeClosedError("borrowed residency values cannot be read after the lease was released");
  }
  const ValueRecord* wanted = values_.find(handle);
  for (ValueRecord* record : lease->records()) {
    if (record != wanted) continue;
    const Materialization* item = record->at(lease->location());
    FHELIUM_CHECK(item != nullptr && item->use_count > 0, "leased materialization is not in use");
    return item->value;
  }
  throw std::invalid_argument("handle '" + handle.handle_id + "' is not covered by this lease");
}

void ManagerCore::add_consumer_stream(std::uint64_t token, const c10::Stream& stream) {
  StateAccess access(*this);
  const std::optional<ActiveLease> lease = closed_ ? std::nullopt : lifetimes_.active_lease(token);
  if (!lease) {
    throw ResidencyLifetimeClosedError("consumer streams cannot be added after the lease was released");
  }
  if (!lease->location().is_cuda()) {
    throw std::invalid_argument("a lease at " + lease->location().name() + " does not use CUDA streams");
  }
  runtime_->check_stream(lease->location(), stream);
  LeaseRecord* record = lease->gate_record();
  FHELIUM_CHECK(record != nullptr, "a CUDA lease granted in a lane");
  for (const auto& existing : record->streams) {
    if (existing == stream) return;
  }
  record->streams.push_back(stream);
}

void ManagerCore::release_lease(LifetimeToken& lifetime, bool wait, std::shared_ptr<ManagerCore>& last_pin) {
  if (release_in_lane(lifetime)) return;
  StateAccess access(*this);
  // The borrow ends even when waiting for its events fails.
  ScopeExit end([&] { end_lifetime_locked(lifetime, last_pin); });
  release_lease_locked(lifetime.token(), wait);
}

void ManagerCore::release_lease_locked(std::uint64_t token, bool wait) {
  const std::optional<ActiveLease> active = lifetimes_.active_lease(token);
  if (!active) return;
  if (!active->location().is_cuda() || active->streams().empty()) {
    // Host reads are complete when the borrower says so.
    lifetimes_.end_reads(token, *active);
    bump_locked();
    return;
  }
  LeaseRecord* lease = active->gate_record();  // a lane lease has no streams
  const std::string where = lease->location.name();
  std::vector<std::shared_ptr<CompletionEvent>> events;
  try {
    for (const auto& stream : lease->streams) events.push_back(runtime_->record_event(stream));
  } catch (const std::exception& record_error) {
    // Without events there is no proof of completion: wait for the streams instead.
    try {
      for (const auto& stream : lease->streams) runtime_->synchronize_stream(stream);
    } catch (const std::exception& sync_error) {
      lifetimes_.end_reads_pending(*lease, {});
      bump_locked();
      diagnose_locked("lease at " + where + ": event recording failed (" + record_error.what() +
                      ") and stream synchronization failed (" + sync_error.what() +
                      "); its materializations stay protected until a forced close");
      return;
    }
    lifetimes_.end_reads(token, *active);
    bump_locked();
    diagnose_locked("lease at " + where + ": event recording failed (" + record_error.what() +
                    "); released after synchronizing its consumer streams");
    return;
  }
  lifetimes_.end_reads_pending(*lease, std::move(events));  // the record stays where `lease` points
  bump_locked();
  if (!wait) return;
  for (const auto& event : lease->events) runtime_->synchronize_event(*event);  // on failure: stays pending
  lifetimes_.finish_pending(token);
  bump_locked();
}

void ManagerCore::synchronize_pending_locked() {
  state_version_ += lifetimes_.synchronize_pending(*runtime_, [this](const LeaseRecord& lease,
                                                                     const std::exception& error) {
    diagnose_locked("pending lease at " + lease.location.name() + " could not be synchronized: " + error.what());
  });
}

template <class Body>
void ManagerCore::abandon_with(std::shared_ptr<ManagerCore>& last_pin, Body body) noexcept {
  bool entered = false;
  try {
    StateAccess access(*this);
    entered = true;
    ScopeExit unpin([&] { last_pin = pins_.unpin(); });
    body();
  } catch (...) {
    if (entered) return;  // the body failed; the pin dropped on the way out
    // Written before looking at the gate again, so that either this thread
    // gets in and settles the pin, or the call holding the gate sees it when
    // it leaves (see StateGate::set_loading).
    pins_.add_stray();
    try {
      if (gate_.enter() != StateGate::Entry::entered) return;
    } catch (...) {
      return;  // waiting failed: the stray stays for the next call to settle
    }
    fold_lanes_locked();
    last_pin = pins_.settle();
    gate_.leave();
  }
}

void ManagerCore::abandon_lease(std::uint64_t token, std::shared_ptr<ManagerCore>& last_pin) noexcept {
  abandon_with(last_pin, [&] {
    const std::optional<ActiveLease> lease = lifetimes_.active_lease(token);
    if (!lease) return;
    const std::string where = lease->location().name();
    try {
      release_lease_locked(token, true);
      diagnose_locked("an active lease at " + where + " was abandoned; released after waiting for its consumer streams");
    } catch (const std::exception& error) {
      diagnose_locked("an active lease at " + where + " was abandoned and could not be released safely (" +
                      error.what() + "); its materializations stay protected");
    }
  });
}

void ManagerCore::abandon_hold(std::uint64_t token, std::shared_ptr<ManagerCore>& last_pin) noexcept {
  abandon_with(last_pin, [&] {
    const HoldRecord* hold = lifetimes_.hold(token);
    if (hold == nullptr) return;
    diagnose_locked("an active hold at " + hold->location.name() + " was abandoned; released");
    if (lifetimes_.release_hold(token)) bump_locked();
  });
}

void ManagerCore::abandon_reservation(std::uint64_t token, std::shared_ptr<ManagerCore>& last_pin) noexcept {
  abandon_with(last_pin, [&] {
    const ReservationRecord* reservation = lifetimes_.reservation(token);
    if (reservation == nullptr) return;
    diagnose_locked("an active reservation '" + reservation->label + "' was abandoned; released");
    release_reservation_locked(token);
  });
}

void ManagerCore::disown() noexcept {
  std::shared_ptr<ManagerCore> last_pin;  // dropped after the gate is left
  if (gate_.held_here()) {  // the manager destroyed from within one of its own calls
    last_pin = pins_.orphan();
    return;
  }
  for (;;) {
    const StateGate::Entry entry = gate_.enter();
    if (entry == StateGate::Entry::entered) break;
    // Another thread's source load (through a scope or a lifetime, or racing
    // the manager's destruction): wait it out.
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  fold_lanes_locked();
  last_pin = pins_.orphan();
  gate_.leave();
}

}  // namespace fhelium::residency::detail
