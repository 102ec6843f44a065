// ResidencyScope: single-use execution of one plan around a body of work.
//
// enter() preflights the whole plan, then runs reclaim actions, admits the
// reservations and runs enter actions; close() runs exit actions and releases
// the reservations. Completed transitions are never rolled back. A failed
// entry releases the reservations it admitted and consumes the scope; closing
// such a scope does nothing. Destroying an entered scope without close()
// releases its reservations, skips its exit actions and reports the
// abandonment through the manager's diagnostics. Move-only; use one scope from
// one thread at a time.
#pragma once

#include <c10/core/Stream.h>

#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "fhelium/residency/errors.hpp"
#include "fhelium/residency/plan.hpp"
#include "fhelium/residency/snapshot.hpp"

namespace fhelium::residency {

namespace detail {
class ManagerCore;
}

class ResidencyScope {
 public:
  ResidencyScope(ResidencyScope&& other) noexcept;
  ResidencyScope& operator=(ResidencyScope&& other) noexcept;
  ResidencyScope(const ResidencyScope&) = delete;
  ResidencyScope& operator=(const ResidencyScope&) = delete;
  ~ResidencyScope();

  const ResidencyPlan& plan() const noexcept { return plan_; }
  std::optional<std::uint64_t> expected_state_version() const noexcept { return expected_state_version_; }
  // Entered successfully and not yet closed.
  bool active() const noexcept { return entered_ && !closed_; }

  // Runs reclaim -> reservations -> enter. Throws ResidencyStaleStateError or
  // ResidencyPlanError (nothing changed) or ResidencyPlanExecutionError (phase
  // reclaim, reserve or enter; committed transitions stay). Throws
  // std::logic_error when called a second time.
  void enter();

  // Runs exit actions and releases reservations; returns the complete report
  // (enter and exit transitions). Idempotent: later calls return the same
  // report. Returns nullopt for a scope whose entry failed or whose exit failed
  // earlier. Throws std::logic_error before enter(), and
  // ResidencyPlanExecutionError (phase exit, also kept in exit_error()) when an
  // exit action fails; the reservations are released either way.
  std::optional<ResidencyPlanReport> close();

  // enter(), body(), close(). If the body throws, the scope still closes; the
  // body's exception stays primary and an exit failure is kept in exit_error().
  template <class Body>
  ResidencyPlanReport run(Body&& body) {
    enter();
    try {
      std::forward<Body>(body)();
    } catch (...) {
      try {
        close();
      } catch (...) {
      }
      throw;
    }
    return *close();
  }

  const std::optional<ResidencyPlanReport>& report() const noexcept { return report_; }
  const std::optional<ResidencyPlanExecutionError>& exit_error() const noexcept { return exit_error_; }

 private:
  friend class ResidencyManager;
  ResidencyScope(std::shared_ptr<detail::ManagerCore> core, ResidencyPlan plan,
                 std::map<ResidencyLocation, c10::Stream> transfer_streams,
                 std::optional<std::uint64_t> expected_state_version);
  // Releases the reservations of an entered, unclosed scope (destruction, reassignment).
  void abandon() noexcept;

  std::shared_ptr<detail::ManagerCore> core_;
  std::uint64_t id_ = 0;  // names the scope to operation observers
  ResidencyPlan plan_;
  std::map<ResidencyLocation, c10::Stream> transfer_streams_;
  std::optional<std::uint64_t> expected_state_version_;
  std::vector<std::uint64_t> reservation_tokens_;
  std::vector<ResidencyTransitionReport> enter_transitions_;
  std::int64_t started_at_ns_ = 0;
  bool entered_ = false;
  bool closed_ = false;
  std::optional<ResidencyPlanReport> report_;
  std::optional<ResidencyPlanExecutionError> exit_error_;
};

}  // namespace fhelium::residency
