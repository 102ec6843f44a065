#include "detail/lifetime_table.hpp"

#include <span>
#include <utility>

#include "detail/check.hpp"

namespace fhelium::residency::detail {

namespace {

Materialization& covered(ValueRecord* record, const ResidencyLocation& location) {
  Materialization* item = record->at(location);
  FHELIUM_CHECK(item != nullptr, "a lifetime covers a materialization that does not exist");
  return *item;
}

}  // namespace

std::uint64_t LifetimeTable::grant_lease(CoveredRecords&& records, const ResidencyLocation& at,
                                         const std::optional<c10::Stream>& consumer_stream) {
  for (ValueRecord* record : records) covered(record, at).use_count += 1;
  const std::uint64_t token = next_gate_token();
  LeaseRecord& lease = leases_.emplace(token, std::move(records), at);
  if (consumer_stream) lease.streams.push_back(*consumer_stream);
  return token;
}

std::uint64_t LifetimeTable::grant_hold(CoveredRecords&& records, const ResidencyLocation& at) {
  for (ValueRecord* record : records) covered(record, at).hold_count += 1;
  const std::uint64_t token = next_gate_token();
  holds_.emplace(token, std::move(records), at);
  return token;
}

std::uint64_t LifetimeTable::add_reservation(const ResidencyLocation& location, std::int64_t nbytes,
                                             const std::string& label) {
  const std::uint64_t token = next_gate_token();
  reservations_.emplace(token, location, nbytes, label);
  return token;
}

std::uint64_t LifetimeTable::grant_lane_lease(unsigned lane, ValueRecord& record, const ResidencyLocation& at) {
  Lane& own = lanes_[lane];
  const std::uint64_t token = lane_token(lane, (own.leases.last_token() >> tag_bits) + 1);
  own.leases.emplace(token, &record, at);  // may throw: nothing counted yet
  own.versions += 1;
  own.pins += 1;
  return token;
}

bool LifetimeTable::end_lane_lease(unsigned lane, std::uint64_t token) {
  Lane& own = lanes_[lane];
  const auto found = own.leases.find(token);
  if (found == own.leases.end()) return false;
  if (token <= own.counted_through) [[unlikely]] {
    if (own.ended_count == ended_capacity) return false;  // the gate undoes its count
    own.ended[own.ended_count++] = found->second;
  }
  own.leases.erase(found);
  own.versions += 1;
  own.pins -= 1;
  return true;
}

LifetimeTable::LaneCounts LifetimeTable::fold_lanes(std::uint32_t used) noexcept {
  LaneCounts counts;
  for (unsigned lane = 0; lane < lane_count; ++lane) {
    if ((used & (1u << lane)) == 0) continue;
    Lane& own = lanes_[lane];
    own.leases.for_each_after(own.counted_through, [](std::uint64_t, const LaneLease& lease) {
      covered(lease.record, lease.location).use_count += 1;
    });
    own.counted_through = own.leases.last_token();
    for (std::size_t index = 0; index < own.ended_count; ++index) {
      const LaneLease& ended = own.ended[index];
      Materialization& item = covered(ended.record, ended.location);
      FHELIUM_CHECK(item.use_count > 0, "a lane uncounted a use that was not counted");
      item.use_count -= 1;
    }
    own.ended_count = 0;
    counts.versions += std::exchange(own.versions, 0);
    counts.pins += std::exchange(own.pins, 0);
  }
  return counts;
}

std::optional<ActiveLease> LifetimeTable::active_lease(std::uint64_t token) {
  const unsigned lane = lane_of(token);
  if (lane != lane_count) {
    LaneLease* lease = lanes_[lane].leases.get(token);
    return lease == nullptr ? std::nullopt : std::optional<ActiveLease>(*lease);
  }
  LeaseRecord* lease = leases_.get(token);
  return lease == nullptr || lease->state != LeaseState::active ? std::nullopt : std::optional<ActiveLease>(*lease);
}

const HoldRecord* LifetimeTable::hold(std::uint64_t token) const { return holds_.get(token); }

const ReservationRecord* LifetimeTable::reservation(std::uint64_t token) const { return reservations_.get(token); }

namespace {

// Ends the reads the active lease over `records` at `location` counts on
// its materializations; `pending` keeps them protected until the lease finishes.
void end_use(std::span<ValueRecord* const> records, const ResidencyLocation& location, bool pending) {
  for (ValueRecord* record : records) {
    Materialization& item = covered(record, location);
    FHELIUM_CHECK(item.use_count > 0, "lease released on an unused materialization");
    item.use_count -= 1;
    if (pending) item.pending_count += 1;
  }
}

}  // namespace

void LifetimeTable::end_reads(std::uint64_t token, const ActiveLease& lease) {
  end_use(lease.records(), lease.location(), false);
  const unsigned lane = lane_of(token);
  const bool erased = lane == lane_count ? leases_.erase(token) : lanes_[lane].leases.erase(token);
  FHELIUM_CHECK(erased, "ended a lease that is not in the table");
}

void LifetimeTable::end_reads_pending(LeaseRecord& lease, std::vector<std::shared_ptr<CompletionEvent>> events) {
  FHELIUM_CHECK(lease.state == LeaseState::active, "ending a lease that is not active");
  end_use({lease.records.data(), lease.records.size()}, lease.location, true);
  lease.state = LeaseState::pending;
  lease.events = std::move(events);
  ++pending_leases_;
}

void LifetimeTable::finish_pending(std::uint64_t token) {
  const auto found = leases_.find(token);
  FHELIUM_CHECK(found != leases_.end() && found->second.state == LeaseState::pending, "finishing a non-pending lease");
  for (ValueRecord* record : found->second.records) {
    Materialization& item = covered(record, found->second.location);
    FHELIUM_CHECK(item.pending_count > 0, "pending protection released twice");
    item.pending_count -= 1;
  }
  leases_.erase(found);
  --pending_leases_;
}

bool LifetimeTable::release_hold(std::uint64_t token) {
  const auto found = holds_.find(token);
  if (found == holds_.end()) return false;
  for (ValueRecord* record : found->second.records) {
    Materialization& item = covered(record, found->second.location);
    FHELIUM_CHECK(item.hold_count > 0, "hold released on an unheld materialization");
    item.hold_count -= 1;
  }
  holds_.erase(found);
  return true;
}

std::optional<ReservationRecord> LifetimeTable::release_reservation(std::uint64_t token) {
  const auto found = reservations_.find(token);
  if (found == reservations_.end()) return std::nullopt;
  ReservationRecord released = std::move(found->second);
  reservations_.erase(found);
  return released;
}

bool LifetimeTable::events_complete(const LeaseRecord& lease, DeviceRuntime& runtime) {
  if (lease.events.empty()) return false;  // unproven: never released by observation
  try {
    for (const auto& event : lease.events) {
      if (!runtime.query_event(*event)) return false;
    }
  } catch (...) {
    return false;  // a failed query proves nothing; keep the protection
  }
  return true;
}

std::size_t LifetimeTable::reap_pending(DeviceRuntime& runtime) {
  std::size_t finished = 0, pending = 0;
  for (auto it = leases_.begin(); it != leases_.end();) {
    const std::uint64_t token = it->first;
    const bool is_pending = it->second.state == LeaseState::pending;
    const bool done = is_pending && events_complete(it->second, runtime);
    pending += is_pending ? 1 : 0;
    ++it;  // finishing erases the entry; the iterator has moved past it
    if (done) {
      finish_pending(token);
      ++finished;
    }
  }
  // The count that lets reap() skip this walk is kept by hand: check it here.
  FHELIUM_CHECK(pending == pending_leases_ + finished, "pending lease count disagrees with the table");
  return finished;
}

std::size_t LifetimeTable::synchronize_pending(
    DeviceRuntime& runtime, const std::function<void(const LeaseRecord&, const std::exception&)>& failed) {
  if (pending_leases_ == 0) return 0;
  std::size_t finished = 0;
  for (auto it = leases_.begin(); it != leases_.end();) {
    const std::uint64_t token = it->first;
    const LeaseRecord& lease = it->second;
    ++it;
    if (lease.state != LeaseState::pending) continue;
    try {
      if (lease.events.empty()) {
        for (const auto& stream : lease.streams) runtime.synchronize_stream(stream);
      } else {
        for (const auto& event : lease.events) runtime.synchronize_event(*event);
      }
    } catch (const std::exception& error) {
      failed(lease, error);
      continue;
    }
    finish_pending(token);
    ++finished;
  }
  return finished;
}

bool LifetimeTable::pending_protects(const Materialization& item, DeviceRuntime& runtime) const {
  // Pending protection ends only when every covering lease's events are complete.
  for (const auto& [token, lease] : leases_) {
    if (lease.state != LeaseState::pending || lease.location != item.location) continue;
    for (const ValueRecord* record : lease.records) {
      if (record->at(item.location) == &item && !events_complete(lease, runtime)) return true;
    }
  }
  return false;
}

std::size_t LifetimeTable::active_lease_count() const {
  std::size_t active = 0;
  for (const auto& [token, lease] : leases_) active += lease.state == LeaseState::active ? 1 : 0;
  for (const Lane& lane : lanes_) active += lane.leases.size();  // never pending
  return active;
}

std::size_t LifetimeTable::lease_count() const {
  std::size_t count = leases_.size();
  for (const Lane& lane : lanes_) count += lane.leases.size();
  return count;
}

void LifetimeTable::clear() {
  pending_leases_ = 0;
  leases_.clear();
  for (Lane& lane : lanes_) {
    lane.leases.clear();  // their counts were folded when the gate was entered
    lane.ended_count = 0;
  }
  holds_.clear();
  reservations_.clear();
}

}  // namespace fhelium::residency::detail
