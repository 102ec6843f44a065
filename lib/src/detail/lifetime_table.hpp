// LifetimeTable: the live leases, holds and reservations, and the protection
// counts they put on materializations.
//
// It issues tokens (one sequence for all three kinds, in creation order),
// grants and releases counts in pairs (each release checks the count it
// undoes), keeps a released CUDA lease protecting as "pending" until its
// completion events are known complete, and finishes such leases when they
// are (reaping). It does not bump the state version, charge the ledger or
// write diagnostics: the manager does those from what each call returns.
// Not synchronized: the manager's state gate guards it.
#pragma once

#include <c10/core/Stream.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <string>

#include "detail/lifetime_records.hpp"
#include "detail/token_table.hpp"
#include "fhelium/residency/runtime.hpp"

namespace fhelium::residency::detail {

class LifetimeTable {
 public:
  // Grants one read (lease) or hold on each record's materialization at `at`,
  // which must exist; returns the new token.
  std::uint64_t grant_lease(CoveredRecords&& records, const ResidencyLocation& at,
                            const std::optional<c10::Stream>& consumer_stream);
  std::uint64_t grant_hold(CoveredRecords&& records, const ResidencyLocation& at);
  std::uint64_t add_reservation(const ResidencyLocation& location, std::int64_t nbytes, const std::string& label);

  // The live record of `token`, or nullptr once released (or cleared).
  LeaseRecord* active_lease(std::uint64_t token);
  const HoldRecord* hold(std::uint64_t token) const;
  const ReservationRecord* reservation(std::uint64_t token) const;

  // Ends the reads of `lease`, the active lease `token`, at once (host
  // leases, and leases with nothing to wait for): its protection ends and its
  // record goes.
  void end_reads(std::uint64_t token, LeaseRecord& lease);
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
  bool still_protects(const Materialization& item, DeviceRuntime& runtime) const;

  const TokenTable<LeaseRecord>& leases() const { return leases_; }
  const TokenTable<HoldRecord>& holds() const { return holds_; }
  const TokenTable<ReservationRecord>& reservations() const { return reservations_; }
  std::size_t active_lease_count() const;
  std::size_t pending_lease_count() const { return pending_leases_; }
  bool empty() const { return leases_.empty() && holds_.empty() && reservations_.empty(); }
  // Drops every lifetime without touching counts (the manager is closing and
  // drops its records too).
  void clear();

 private:
  std::size_t reap_pending(DeviceRuntime& runtime);

  std::uint64_t next_token_ = 1;
  std::size_t pending_leases_ = 0;
  TokenTable<LeaseRecord> leases_;
  TokenTable<HoldRecord> holds_;
  TokenTable<ReservationRecord> reservations_;
};

}  // namespace fhelium::residency::detail
