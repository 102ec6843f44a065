// LifetimeTable: the live leases, holds and reservations, and the protection
// counts they put on materializations.
//
// It issues tokens (unique across the three kinds; ascending, in creation
// order, within each table), grants and releases counts in pairs (each
// release checks the count it undoes), keeps a released CUDA lease
// protecting as "pending" until its completion events are known complete,
// and finishes such leases when they are (reaping). It does not bump the
// state version, charge the ledger or write diagnostics: the manager does
// those from what each call returns. Not synchronized: the manager's state
// gate guards it.
//
// Lane leases. Host leases of one value can also be granted and released in
// a lane of the state gate (state_gate.hpp), concurrently with other lanes.
// Each lane has a table of its own, touched only from that lane or by the
// gate's holder, and a lane writes nothing else: not even the leased
// materialization's use count, which other lanes may share. Instead the
// holder folds each lane in when it enters the gate (fold_lanes): the use
// counts of the lane's leases granted since the last fold, and the state
// versions and lifetime pins its calls counted. A lease taken and released
// between two entries never touches a use count; one released after a fold
// counted it is noted in its lane (up to ended_capacity of them between two
// folds), and the next fold undoes the count, before the holder reads any.
// Released under the gate, each would count every other thread's lease alive
// then, whose release would take the gate in turn, each entry waiting for
// lane holders that may be preempted: with more threads than cores, host
// leases of disjoint values then ran at under half of one thread's rate. A lane
// lease is an active host lease without streams: it never goes pending, so
// reaping and pending protection never look at the lanes. Everything else
// (lookup by token, release under the gate, counts, clear) covers them.
#pragma once

#include <c10/core/Stream.h>

#include <array>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include "detail/lifetime_records.hpp"
#include "detail/line_allocator.hpp"
#include "detail/state_gate.hpp"
#include "detail/token_table.hpp"
#include "fhelium/residency/runtime.hpp"

namespace fhelium::residency::detail {

// An active lease as the gate's holder sees it, wherever it was granted:
// under the gate (a LeaseRecord) or in a lane (a LaneLease: one value, at a
// host location, without streams). Valid until the lifetime table changes.
class ActiveLease {
 public:
  explicit ActiveLease(LeaseRecord& lease) noexcept
      : gate_(&lease), records_(lease.records.data()), count_(lease.records.size()), location_(lease.location) {}
  explicit ActiveLease(LaneLease& lease) noexcept : records_(&lease.record), count_(1), location_(lease.location) {}

  std::span<ValueRecord* const> records() const noexcept { return {records_, count_}; }
  const ResidencyLocation& location() const noexcept { return location_; }
  // Its consumer streams: none for a lane lease.
  std::span<const c10::Stream> streams() const noexcept {
    return gate_ == nullptr ? std::span<const c10::Stream>{} : std::span<const c10::Stream>(gate_->streams);
  }
  // The record of a lease granted under the gate; nullptr for a lane lease.
  LeaseRecord* gate_record() const noexcept { return gate_; }

 private:
  LeaseRecord* gate_ = nullptr;
  ValueRecord* const* records_;
  std::size_t count_;
  ResidencyLocation location_;
};

class LifetimeTable {
 public:
  // Grants one read (lease) or hold on each record's materialization at `at`,
  // which must exist; returns the new token.
  std::uint64_t grant_lease(CoveredRecords&& records, const ResidencyLocation& at,
                            const std::optional<c10::Stream>& consumer_stream);
  std::uint64_t grant_hold(CoveredRecords&& records, const ResidencyLocation& at);
  std::uint64_t add_reservation(const ResidencyLocation& location, std::int64_t nbytes, const std::string& label);

  // In lane `lane`: grants a lease on `record`'s materialization at the host
  // location `at`, which must exist, and counts a state version and a pin
  // for it. Its use count is counted at the next fold.
  std::uint64_t grant_lane_lease(unsigned lane, ValueRecord& record, const ResidencyLocation& at);
  // In lane `lane`: ends lane lease `token` of that lane, and counts a state
  // version and a dropped pin; a lease already counted in its
  // materialization's use count is noted for the next fold to undo. False,
  // changing nothing, when it is not there (cleared by a close), or when it
  // was counted and the lane has noted ended_capacity such leases since the
  // last fold (then it is released under the gate).
  bool end_lane_lease(unsigned lane, std::uint64_t token);
  // In lane `lane`: its lease `token`, or nullptr.
  const LaneLease* lane_lease(unsigned lane, std::uint64_t token) const { return lanes_[lane].leases.get(token); }
  // The lane `token` was granted in; lane_count for a token granted under the gate.
  static unsigned lane_of(std::uint64_t token) noexcept {
    const auto tag = static_cast<unsigned>(token & tag_mask);
    return tag == 0 ? lane_count : tag - 1;
  }
  // Under the gate: counts the use of every lease the lanes in `used` (a bit
  // per lane) granted since they were last folded, undoes the count of every
  // counted lease they ended meanwhile, and returns the state versions and
  // pins they counted meanwhile; those restart from zero.
  struct LaneCounts {
    std::uint64_t versions = 0;
    std::int64_t pins = 0;
  };
  LaneCounts fold_lanes(std::uint32_t used) noexcept;

  // The active lease `token`, granted under the gate or in a lane; nothing
  // once released (or cleared) or pending.
  std::optional<ActiveLease> active_lease(std::uint64_t token);
  const HoldRecord* hold(std::uint64_t token) const;
  const ReservationRecord* reservation(std::uint64_t token) const;

  // Ends the reads of `lease`, the active lease `token`, at once (host
  // leases, and leases with nothing to wait for): its protection ends and its
  // record goes.
  void end_reads(std::uint64_t token, const ActiveLease& lease);
  // Ends the reads of the active `lease` but keeps it protecting, pending on
  // `events` (which may be empty: then nothing ever proves completion, and it
  // protects until a forced close).
  void end_reads_pending(LeaseRecord& lease, std::vector<std::shared_ptr<CompletionEvent>> events);
  // Finishes the pending lease `token`: its protection ends.
  void finish_pending(std::uint64_t token);
  // Undo a hold / reservation; false / nothing when `token` is not live.
  bool release_hold(std::uint64_t token);
  std::optional<ReservationRecord> release_reservation(std::uint64_t token);

  // Whether every completion event of `lease` is known complete; a failed
  // query proves nothing. A lease without events never completes this way.
  static bool events_complete(const LeaseRecord& lease, DeviceRuntime& runtime);
  // Finishes every pending lease whose events completed; returns how many.
  // Inline: the manager reaps on nearly every call, and usually nothing is pending.
  std::size_t reap(DeviceRuntime& runtime) { return pending_leases_ == 0 ? 0 : reap_pending(runtime); }
  // Waits for every pending lease (its events, or its streams when it has
  // none) and finishes it; a lease whose wait fails stays pending and is
  // reported to `failed`. Returns how many finished.
  std::size_t synchronize_pending(DeviceRuntime& runtime,
                                  const std::function<void(const LeaseRecord&, const std::exception&)>& failed);
  // Whether `item`'s protection would still stand after reaping: reads and
  // holds, or a pending lease whose events have not all completed.
  // Inline: a dry run asks for every value it drops or moves, and nearly
  // all are unprotected.
  bool still_protects(const Materialization& item, DeviceRuntime& runtime) const {
    if (item.use_count > 0 || item.hold_count > 0) return true;
    return item.pending_count > 0 && pending_protects(item, runtime);
  }

  // The leases granted under the gate (lane leases are never pending and
  // have no streams), and the number of all leases.
  const TokenTable<LeaseRecord>& gate_leases() const { return leases_; }
  std::size_t lease_count() const;
  const TokenTable<HoldRecord>& holds() const { return holds_; }
  const TokenTable<ReservationRecord>& reservations() const { return reservations_; }
  std::size_t active_lease_count() const;
  std::size_t pending_lease_count() const { return pending_leases_; }
  bool empty() const { return lease_count() == 0 && holds_.empty() && reservations_.empty(); }
  // Drops every lifetime without touching counts (the manager is closing and
  // drops its records too).
  void clear();

 private:
  // still_protects() for an item with pending leases and no reads or holds.
  bool pending_protects(const Materialization& item, DeviceRuntime& runtime) const;
  static constexpr unsigned lane_count = StateGate::lane_count;
  // A token's low bits say where it was granted: 0 under the gate, lane + 1 in a lane.
  static constexpr unsigned tag_bits = 4;
  static constexpr std::uint64_t tag_mask = (std::uint64_t{1} << tag_bits) - 1;
  static_assert(lane_count < tag_mask);

  static constexpr std::size_t ended_capacity = 8;
  struct alignas(cache_line_bytes) Lane {
    TokenTable<LaneLease> leases;
    // Leases with tokens up to this one are counted in their use counts.
    std::uint64_t counted_through = 0;
    std::uint64_t versions = 0;  // since the last fold
    std::int64_t pins = 0;       // taken minus dropped, since the last fold
    // Counted leases ended since the last fold, whose use the fold uncounts:
    // the value and location of each (the records stay put until then: only
    // the gate's holder removes materializations, after folding).
    std::array<LaneLease, ended_capacity> ended{};
    std::size_t ended_count = 0;
  };

  std::size_t reap_pending(DeviceRuntime& runtime);
  std::uint64_t next_gate_token() { return next_serial_++ << tag_bits; }
  static std::uint64_t lane_token(unsigned lane, std::uint64_t serial) { return (serial << tag_bits) | (lane + 1); }

  std::uint64_t next_serial_ = 1;
  std::size_t pending_leases_ = 0;
  TokenTable<LeaseRecord> leases_;
  TokenTable<HoldRecord> holds_;
  TokenTable<ReservationRecord> reservations_;
  std::array<Lane, lane_count> lanes_;
};

}  // namespace fhelium::residency::detail
