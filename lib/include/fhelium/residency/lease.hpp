// Lifetimes that protect materializations: leases, holds and reservations.
//
// All three are move-only RAII objects created by a ResidencyManager. A lease
// borrows already-resident values for reading; on release it records one
// completion event per consumer stream and keeps the materializations
// protected ("pending") until those events complete. A hold protects
// materializations without exposing them. A reservation charges bytes against
// a location's budget without allocating.
//
// Destroying an active lifetime releases it safely (a lease first waits for its
// consumer streams) and reports the abandonment through the manager's
// diagnostics; destructors never throw. A lifetime object is not itself
// synchronized: use each one from one thread at a time. It may outlive its
// manager object; after the manager is closed, releasing it does nothing.
#pragma once

#include <c10/core/Stream.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fhelium/residency/location.hpp"
#include "fhelium/residency/model.hpp"

namespace fhelium::residency {

class ResidentValue;
class ResidencyManager;
namespace detail {
class ManagerCore;

// The list of a moved-from lifetime: empty.
const std::vector<ResidencyHandle>& no_handles() noexcept;

// The handles a lease or hold covers, immutable and shared. A lifetime over
// one value shares that value's own list, which the manager core builds at the
// value's first such lifetime; a lifetime over several values has a list of
// its own. Either way the list lives as long as the last lifetime object that
// covers it, so handles() stays readable after a release, a discard, a close
// and the manager's destruction. A moved-from list is empty.
class HandleList {
 public:
  HandleList() noexcept = default;
  explicit HandleList(std::shared_ptr<const std::vector<ResidencyHandle>> list) noexcept : list_(std::move(list)) {}

  explicit operator bool() const noexcept { return list_ != nullptr; }
  const std::vector<ResidencyHandle>& get() const noexcept { return list_ != nullptr ? *list_ : no_handles(); }

 private:
  std::shared_ptr<const std::vector<ResidencyHandle>> list_;
};

// The part every lifetime object shares: its manager core, its token, and
// whether it is still active. An active lifetime pins its core (the core stays
// alive while any lifetime it granted is active, even after the manager object
// is gone); the pin is taken when the core grants the lifetime and dropped
// when the core ends it, both under the core's state lock, so neither costs an
// atomic operation of its own. An inactive lifetime never touches its core.
// Moving transfers the lifetime; destroying or overwriting an active one
// abandons it through the core, which releases it safely and records a
// diagnostic.
class LifetimeToken {
 public:
  // Ends the lifetime `token` for good; hands back the core's last pin when
  // this was the last lifetime of a core whose manager is gone, for the caller
  // to drop once it is done with the core.
  using Abandon = void (ManagerCore::*)(std::uint64_t token, std::shared_ptr<ManagerCore>& last_pin) noexcept;

  LifetimeToken() noexcept = default;
  // `core` has already pinned itself for this lifetime.
  LifetimeToken(ManagerCore& core, std::uint64_t token, Abandon abandon) noexcept;
  LifetimeToken(LifetimeToken&& other) noexcept;
  LifetimeToken& operator=(LifetimeToken&& other) noexcept;
  LifetimeToken(const LifetimeToken&) = delete;
  LifetimeToken& operator=(const LifetimeToken&) = delete;
  ~LifetimeToken();

  bool active() const noexcept { return active_; }
  ManagerCore& core() const noexcept { return *core_; }
  std::uint64_t token() const noexcept { return token_; }
  // By the core, under its state lock, as it ends the lifetime and drops its
  // pin: the two never part.
  void deactivate() noexcept { active_ = false; }

 private:
  void abandon() noexcept;

  ManagerCore* core_ = nullptr;
  std::uint64_t token_ = 0;
  Abandon abandon_ = nullptr;
  bool active_ = false;
};

}  // namespace detail

class ResidencyLease {
 public:
  const std::vector<ResidencyHandle>& handles() const noexcept { return handles_.get(); }
  ResidencyLocation location() const noexcept { return location_; }
  bool active() const noexcept { return lifetime_.active(); }

  // The borrowed materialization of `handle`. Do not mutate it or keep its
  // tensors past release(). Throws ResidencyLifetimeClosedError after release
  // (or after the manager closed) and std::invalid_argument for a handle this
  // lease does not cover.
  ResidentValue value(const ResidencyHandle& handle) const;

  // Registers another CUDA stream whose reads this lease protects; must be
  // called before release. Throws std::invalid_argument for a host lease or a
  // stream on another device, ResidencyLifetimeClosedError after release.
  void add_consumer_stream(const c10::Stream& stream);

  // Ends the borrow. On a CUDA location records an event on every consumer
  // stream; with wait=false protection stays pending until the events complete,
  // with wait=true this call synchronizes them first. Idempotent. If event
  // recording fails the consumer streams are synchronized instead; if that
  // fails too the materializations stay protected until a forced close.
  void release(bool wait = false);

 private:
  friend class ResidencyManager;
  ResidencyLease(detail::ManagerCore& core, std::uint64_t token, detail::HandleList handles,
                 ResidencyLocation location);

  detail::LifetimeToken lifetime_;
  detail::HandleList handles_;
  ResidencyLocation location_;
};

class ResidencyHold {
 public:
  const std::vector<ResidencyHandle>& handles() const noexcept { return handles_.get(); }
  ResidencyLocation location() const noexcept { return location_; }
  bool active() const noexcept { return lifetime_.active(); }
  // Ends the protection. Idempotent.
  void release();

 private:
  friend class ResidencyManager;
  ResidencyHold(detail::ManagerCore& core, std::uint64_t token, detail::HandleList handles,
                ResidencyLocation location);

  detail::LifetimeToken lifetime_;
  detail::HandleList handles_;
  ResidencyLocation location_;
};

class ResidencyReservation {
 public:
  ResidencyLocation location() const noexcept { return location_; }
  std::int64_t nbytes() const noexcept { return nbytes_; }
  const std::string& label() const noexcept { return label_; }
  bool active() const noexcept { return lifetime_.active(); }
  // Returns the reserved bytes to the location budget. Idempotent.
  void release();

 private:
  friend class ResidencyManager;
  ResidencyReservation(detail::ManagerCore& core, std::uint64_t token, ResidencyLocation location,
                       std::int64_t nbytes, std::string label);

  detail::LifetimeToken lifetime_;
  ResidencyLocation location_;
  std::int64_t nbytes_ = 0;
  std::string label_;
};

}  // namespace fhelium::residency
