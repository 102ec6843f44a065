#include "fhelium/residency/scope.hpp"

#include <stdexcept>
#include <utility>

#include "detail/manager_core.hpp"

namespace fhelium::residency {

ResidencyScope::ResidencyScope(std::shared_ptr<detail::ManagerCore> core, ResidencyPlan plan,
                               std::map<ResidencyLocation, c10::Stream> transfer_streams,
                               std::optional<std::uint64_t> expected_state_version)
    : core_(std::move(core)),
      plan_(std::move(plan)),
      transfer_streams_(std::move(transfer_streams)),
      expected_state_version_(expected_state_version) {}

ResidencyScope::ResidencyScope(ResidencyScope&& other) noexcept
    : core_(std::move(other.core_)),
      plan_(std::move(other.plan_)),
      transfer_streams_(std::move(other.transfer_streams_)),
      expected_state_version_(other.expected_state_version_),
      reservation_tokens_(std::move(other.reservation_tokens_)),
      enter_transitions_(std::move(other.enter_transitions_)),
      started_at_ns_(other.started_at_ns_),
      entered_(other.entered_),
      closed_(std::exchange(other.closed_, true)),
      report_(std::move(other.report_)),
      exit_error_(std::move(other.exit_error_)) {}

ResidencyScope& ResidencyScope::operator=(ResidencyScope&& other) noexcept {
  if (this != &other) {
    abandon();
    core_ = std::move(other.core_);
    plan_ = std::move(other.plan_);
    transfer_streams_ = std::move(other.transfer_streams_);
    expected_state_version_ = other.expected_state_version_;
    reservation_tokens_ = std::move(other.reservation_tokens_);
    enter_transitions_ = std::move(other.enter_transitions_);
    started_at_ns_ = other.started_at_ns_;
    entered_ = other.entered_;
    closed_ = std::exchange(other.closed_, true);
    report_ = std::move(other.report_);
    exit_error_ = std::move(other.exit_error_);
  }
  return *this;
}

ResidencyScope::~ResidencyScope() { abandon(); }

void ResidencyScope::abandon() noexcept {
  if (entered_ && !closed_ && core_) core_->abandon_scope(reservation_tokens_, plan_.name);
  closed_ = true;
}

void ResidencyScope::enter() {
  if (entered_) throw std::logic_error("ResidencyScope for plan '" + plan_.name + "' cannot be entered twice");
  entered_ = true;
  try {
    detail::ScopeEntry entry = core_->enter_scope(plan_, transfer_streams_, expected_state_version_);
    reservation_tokens_ = std::move(entry.reservation_tokens);
    enter_transitions_ = std::move(entry.transitions);
    started_at_ns_ = entry.started_at_ns;
  } catch (...) {
    closed_ = true;  // a failed entry consumes the scope
    throw;
  }
}

std::optional<ResidencyPlanReport> ResidencyScope::close() {
  if (!entered_) throw std::logic_error("ResidencyScope for plan '" + plan_.name + "' must be entered before close");
  if (closed_) return report_;
  closed_ = true;
  try {
    report_ = core_->exit_scope(plan_, transfer_streams_, reservation_tokens_, std::move(enter_transitions_),
                                started_at_ns_);
  } catch (const ResidencyPlanExecutionError& error) {
    exit_error_.emplace(error);
    throw;
  }
  return report_;
}

}  // namespace fhelium::residency
