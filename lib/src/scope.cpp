#include "fhelium/residency/scope.hpp"

#include <stdexcept>
#include <utility>

#include "detail/manager_core.hpp"
#include "detail/observation.hpp"

namespace fhelium::residency {

ResidencyScope::ResidencyScope(std::shared_ptr<detail::ManagerCore> core, ResidencyPlan plan,
                               std::map<ResidencyLocation, c10::Stream> transfer_streams,
                               std::optional<std::uint64_t> expected_state_version)
    : core_(std::move(core)),
      id_(core_->next_scope_id()),
      plan_(std::move(plan)),
      transfer_streams_(std::move(transfer_streams)),
      expected_state_version_(expected_state_version) {}

ResidencyScope::ResidencyScope(ResidencyScope&& other) noexcept
    : core_(std::move(other.core_)),
      id_(other.id_),
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
    id_ = other.id_;
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
  if (entered_ && !closed_ && core_) {
    core_->abandon_scope(reservation_tokens_, plan_.name);
    if (core_->observed()) {
      ObservedOperation operation = detail::observed(ObservedCall::scope_abandon);
      operation.lifetime = id_;
      core_->observe(std::move(operation));
    }
  }
  closed_ = true;
}

void ResidencyScope::enter() {
  if (entered_) throw std::logic_error("ResidencyScope for plan '" + plan_.name + "' cannot be entered twice");
  entered_ = true;
  detail::observe_call(
      *core_,
      [&] {
        ObservedOperation operation = detail::observed(ObservedCall::scope_enter);
        operation.plan = plan_;
        operation.transfer_streams = transfer_streams_;
        operation.expected_state_version = expected_state_version_;
        operation.lifetime = id_;
        return operation;
      },
      [&] {
        try {
          detail::ScopeEntry entry = core_->enter_scope(plan_, transfer_streams_, expected_state_version_);
          reservation_tokens_ = std::move(entry.reservation_tokens);
          enter_transitions_ = std::move(entry.transitions);
          started_at_ns_ = entry.started_at_ns;
        } catch (...) {
          closed_ = true;  // a failed entry consumes the scope
          throw;
        }
      });
}

std::optional<ResidencyPlanReport> ResidencyScope::close() {
  if (!entered_) throw std::logic_error("ResidencyScope for plan '" + plan_.name + "' must be entered before close");
  return detail::observe_call(
      *core_,
      [&] {
        ObservedOperation operation = detail::observed(ObservedCall::scope_close);
        operation.lifetime = id_;
        return operation;
      },
      [&] {
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
      },
      [](ObservedOperation& operation, const std::optional<ResidencyPlanReport>& report) {
        operation.no_op = !report.has_value();
      });
}

}  // namespace fhelium::residency
