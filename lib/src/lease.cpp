#include "fhelium/residency/lease.hpp"

#include <utility>

#include "detail/manager_core.hpp"
#include "detail/observation.hpp"
#include "fhelium/residency/errors.hpp"
#include "fhelium/residency/value.hpp"

namespace fhelium::residency {

namespace detail {

const std::vector<ResidencyHandle>& no_handles() noexcept {
  static const std::vector<ResidencyHandle> empty;
  return empty;
}

LifetimeToken::LifetimeToken(ManagerCore& core, std::uint64_t token, Abandon abandon) noexcept
    : core_(&core), token_(token), abandon_(abandon), active_(true) {}

LifetimeToken::LifetimeToken(LifetimeToken&& other) noexcept
    : core_(other.core_),
      token_(other.token_),
      abandon_(other.abandon_),
      active_(std::exchange(other.active_, false)) {}

LifetimeToken& LifetimeToken::operator=(LifetimeToken&& other) noexcept {
  if (this != &other) {
    abandon();
    core_ = other.core_;
    token_ = other.token_;
    abandon_ = other.abandon_;
    active_ = std::exchange(other.active_, false);
  }
  return *this;
}

LifetimeToken::~LifetimeToken() { abandon(); }

void LifetimeToken::abandon() noexcept {
  if (!active_) return;
  active_ = false;
  std::shared_ptr<ManagerCore> last_pin;  // dropped last: the core may go with it
  (core_->*abandon_)(token_, last_pin);
  if (core_->observed()) {
    ObservedOperation operation;
    operation.call = abandon_ == &ManagerCore::abandon_lease  ? ObservedCall::lease_abandon
                     : abandon_ == &ManagerCore::abandon_hold ? ObservedCall::hold_abandon
                                                              : ObservedCall::reservation_abandon;
    operation.lifetime = token_;
    core_->observe(std::move(operation));
  }
}

}  // namespace detail

namespace {

using detail::observe_call;
using detail::observed;

ObservedOperation ended(ObservedCall call, const detail::LifetimeToken& lifetime) {
  ObservedOperation operation = observed(call);
  operation.lifetime = lifetime.token();
  return operation;
}

void require_active(const detail::LifetimeToken& lifetime) {
  if (!lifetime.active()) throw ResidencyLifetimeClosedError("residency lease has been released");
}

}  // namespace

ResidencyLease::ResidencyLease(detail::ManagerCore& core, std::uint64_t token, detail::HandleList handles,
                               ResidencyLocation location)
    : lifetime_(core, token, &detail::ManagerCore::abandon_lease),
      handles_(std::move(handles)),
      location_(location) {}

ResidentValue ResidencyLease::value(const ResidencyHandle& handle) const {
  require_active(lifetime_);
  return lifetime_.core().leased_value(lifetime_.token(), handle);
}

void ResidencyLease::add_consumer_stream(const c10::Stream& stream) {
  require_active(lifetime_);
  observe_call(
      lifetime_.core(),
      [&] {
        ObservedOperation operation = ended(ObservedCall::add_consumer_stream, lifetime_);
        operation.stream = stream;
        return operation;
      },
      [&] { lifetime_.core().add_consumer_stream(lifetime_.token(), stream); });
}

void ResidencyLease::release(bool wait) {
  if (!lifetime_.active()) return;
  std::shared_ptr<detail::ManagerCore> last_pin;  // dropped after the observer has seen the release
  observe_call(
      lifetime_.core(),
      [&] {
        ObservedOperation operation = ended(ObservedCall::lease_release, lifetime_);
        operation.wait = wait;
        return operation;
      },
      [&] { lifetime_.core().release_lease(lifetime_, wait, last_pin); });
}

ResidencyHold::ResidencyHold(detail::ManagerCore& core, std::uint64_t token, detail::HandleList handles,
                             ResidencyLocation location)
    : lifetime_(core, token, &detail::ManagerCore::abandon_hold),
      handles_(std::move(handles)),
      location_(location) {}

void ResidencyHold::release() {
  if (!lifetime_.active()) return;
  std::shared_ptr<detail::ManagerCore> last_pin;
  observe_call(
      lifetime_.core(), [&] { return ended(ObservedCall::hold_release, lifetime_); },
      [&] { lifetime_.core().release_hold(lifetime_, last_pin); });
}

ResidencyReservation::ResidencyReservation(detail::ManagerCore& core, std::uint64_t token,
                                           ResidencyLocation location, std::int64_t nbytes, std::string label)
    : lifetime_(core, token, &detail::ManagerCore::abandon_reservation),
      location_(location),
      nbytes_(nbytes),
      label_(std::move(label)) {}

void ResidencyReservation::release() {
  if (!lifetime_.active()) return;
  std::shared_ptr<detail::ManagerCore> last_pin;
  observe_call(
      lifetime_.core(), [&] { return ended(ObservedCall::reservation_release, lifetime_); },
      [&] { lifetime_.core().release_reservation(lifetime_, last_pin); });
}

}  // namespace fhelium::residency
