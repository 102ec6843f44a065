#include "fhelium/residency/lease.hpp"

#include <utility>

#include "detail/manager_core.hpp"
#include "fhelium/residency/errors.hpp"
#include "fhelium/residency/value.hpp"

namespace fhelium::residency {

namespace {

template <class Lifetime>
void require_active(const Lifetime& lifetime, const char* what) {
  if (!lifetime.active()) throw ResidencyLifetimeClosedError(std::string(what) + " has been released");
}

}  // namespace

ResidencyLease::ResidencyLease(std::shared_ptr<detail::ManagerCore> core, std::uint64_t token,
                               std::vector<ResidencyHandle> handles, ResidencyLocation location)
    : core_(std::move(core)), token_(token), handles_(std::move(handles)), location_(location), active_(true) {}

ResidencyLease::ResidencyLease(ResidencyLease&& other) noexcept
    : core_(std::move(other.core_)),
      token_(other.token_),
      handles_(std::move(other.handles_)),
      location_(other.location_),
      active_(std::exchange(other.active_, false)) {}

ResidencyLease& ResidencyLease::operator=(ResidencyLease&& other) noexcept {
  if (this != &other) {
    abandon();
    core_ = std::move(other.core_);
    token_ = other.token_;
    handles_ = std::move(other.handles_);
    location_ = other.location_;
    active_ = std::exchange(other.active_, false);
  }
  return *this;
}

ResidencyLease::~ResidencyLease() { abandon(); }

void ResidencyLease::abandon() noexcept {
  if (!active_) return;
  active_ = false;
  core_->abandon_lease(token_, location_);
}

ResidentValue ResidencyLease::value(const ResidencyHandle& handle) const {
  require_active(*this, "residency lease");
  return core_->leased_value(token_, handle);
}

void ResidencyLease::add_consumer_stream(const c10::Stream& stream) {
  require_active(*this, "residency lease");
  core_->add_consumer_stream(token_, stream);
}

void ResidencyLease::release(bool wait) {
  if (!active_) return;
  try {
    core_->release_lease(token_, wait);
  } catch (const ResidencyReentrancyError&) {
    throw;  // rejected before anything changed: the lease is still active
  } catch (...) {
    active_ = false;  // the borrow ended; only the wait for its events failed
    throw;
  }
  active_ = false;
}

ResidencyHold::ResidencyHold(std::shared_ptr<detail::ManagerCore> core, std::uint64_t token,
                             std::vector<ResidencyHandle> handles, ResidencyLocation location)
    : core_(std::move(core)), token_(token), handles_(std::move(handles)), location_(location), active_(true) {}

ResidencyHold::ResidencyHold(ResidencyHold&& other) noexcept
    : core_(std::move(other.core_)),
      token_(other.token_),
      handles_(std::move(other.handles_)),
      location_(other.location_),
      active_(std::exchange(other.active_, false)) {}

ResidencyHold& ResidencyHold::operator=(ResidencyHold&& other) noexcept {
  if (this != &other) {
    abandon();
    core_ = std::move(other.core_);
    token_ = other.token_;
    handles_ = std::move(other.handles_);
    location_ = other.location_;
    active_ = std::exchange(other.active_, false);
  }
  return *this;
}

ResidencyHold::~ResidencyHold() { abandon(); }

void ResidencyHold::abandon() noexcept {
  if (!active_) return;
  active_ = false;
  core_->abandon_hold(token_, location_);
}

void ResidencyHold::release() {
  if (!active_) return;
  core_->release_hold(token_);
  active_ = false;
}

ResidencyReservation::ResidencyReservation(std::shared_ptr<detail::ManagerCore> core, std::uint64_t token,
                                           ResidencyLocation location, std::int64_t nbytes, std::string label)
    : core_(std::move(core)),
      token_(token),
      location_(location),
      nbytes_(nbytes),
      label_(std::move(label)),
      active_(true) {}

ResidencyReservation::ResidencyReservation(ResidencyReservation&& other) noexcept
    : core_(std::move(other.core_)),
      token_(other.token_),
      location_(other.location_),
      nbytes_(other.nbytes_),
      label_(std::move(other.label_)),
      active_(std::exchange(other.active_, false)) {}

ResidencyReservation& ResidencyReservation::operator=(ResidencyReservation&& other) noexcept {
  if (this != &other) {
    abandon();
    core_ = std::move(other.core_);
    token_ = other.token_;
    location_ = other.location_;
    nbytes_ = other.nbytes_;
    label_ = std::move(other.label_);
    active_ = std::exchange(other.active_, false);
  }
  return *this;
}

ResidencyReservation::~ResidencyReservation() { abandon(); }

void ResidencyReservation::abandon() noexcept {
  if (!active_) return;
  active_ = false;
  core_->abandon_reservation(token_, label_);
}

void ResidencyReservation::release() {
  if (!active_) return;
  core_->release_reservation(token_);
  active_ = false;
}

}  // namespace fhelium::residency
