// Construction, locking, control state and observation of the manager core.
#include <atomic>
#include <chrono>
#include <stdexcept>

#include "detail/check.hpp"
#include "detail/manager_core.hpp"
#include "detail/snapshot_assembly.hpp"
#include "fhelium/residency/errors.hpp"

namespace fhelium::residency::detail {

namespace {

constexpr std::size_t diagnostics_capacity = 256;

std::string new_manager_id() {
  static std::atomic<std::uint64_t> next{1};
  return "manager-" + std::to_string(next.fetch_add(1));
}

std::size_t checked_trace_capacity(std::int64_t capacity) {
  if (capacity < 0) throw std::invalid_argument("ManagerOptions trace_capacity must be non-negative");
  return static_cast<std::size_t>(capacity);
}

std::shared_ptr<DeviceRuntime> runtime_or_default(std::shared_ptr<DeviceRuntime> runtime) {
  return runtime ? std::move(runtime) : default_runtime();
}

}  // namespace

ManagerCore::ManagerCore(ManagerOptions options)
    : manager_id_(new_manager_id()),
      runtime_(runtime_or_default(std::move(options.runtime))),
      diagnostic_sink_(std::move(options.diagnostic_sink)),
      observer_(std::move(options.operation_observer)),
      values_(manager_id_),
      trace_(checked_trace_capacity(options.trace_capacity)),
      diagnostics_(diagnostics_capacity) {
  for (const auto& [location, budget] : options.budgets) {
    runtime_->check_location(location);
    if (budget < 0) {
      throw std::invalid_argument("budget for " + location.name() + " must be non-negative, got " +
                                  std::to_string(budget));
    }
    if (ledger_.find(location) != nullptr) {
      throw std::invalid_argument("ManagerOptions budgets list " + location.name() + " more than once");
    }
    ledger_.add_budget(location, budget);
  }
}

void ManagerCore::StateAccess::refuse(StateGate::Entry entry) const {
  // StateGate::Entry has three values; the constructor handles `entered`.
  if (entry == StateGate::Entry::refused_loading) {
    throw ResidencyReentrancyError("residency manager '" + core_.manager_id_ +
                                   "' rejects calls while a source callback is active (a source load() is "
                                   "running)");
  }
  throw ResidencyReentrancyError("residency manager '" + core_.manager_id_ +
                                 "' was re-entered from a callback of one of its own operations");
}

[[gnu::hot]]
void ManagerCore::require_open_locked() const {
  if (closed_) throw ResidencyClosedError("residency manager '" + manager_id_ + "' is closed");
}

void ManagerCore::diagnose_locked(std::string message) {
  if (diagnostic_sink_) {
    try {
      diagnostic_sink_(message);
    } catch (...) {
      // A failing sink must not turn a cleanup path into a failure.
    }
  }
  diagnostics_.push(std::move(message));
}

std::uint64_t ManagerCore::state_version() {
  StateAccess access(*this);
  require_open_locked();
  reap_locked();
  return state_version_;
}

std::vector<ResidencyLocation> ManagerCore::locations() {
  StateAccess access(*this);
  std::vector<ResidencyLocation> result;
  for (const auto& account : ledger_.accounts()) result.push_back(account.location);
  return result;
}

std::pair<std::optional<std::int64_t>, std::optional<std::int64_t>> ManagerCore::sample_allocator_locked(
    const std::optional<c10::Device>& device) {
  if (!device) return {};
  try {
    const auto stats = runtime_->allocator_stats(*device);
    if (!stats || stats->allocated_bytes < 0 || stats->reserved_bytes < 0) return {};
    return {stats->allocated_bytes, stats->reserved_bytes};
  } catch (...) {
    return {};  // telemetry is best effort
  }
}

ResidencySnapshot ManagerCore::snapshot() {
  StateAccess access(*this);
  require_open_locked();
  reap_locked();
  return assemble_snapshot({manager_id_, state_version_, values_, ledger_, lifetimes_.reservations()},
                           [this](const c10::Device& device) { return sample_allocator_locked(device); },
                           [this] { return clock_locked(); });
}

std::vector<ResidencyTransitionReport> ManagerCore::trace() {
  StateAccess access(*this);
  std::vector<ResidencyTransitionReport> reports;
  reports.reserve(trace_.size());
  trace_.for_each([&](const TraceRecord& record) { reports.push_back(record.report(manager_id_)); });
  return reports;
}

void ManagerCore::clear_trace() {
  StateAccess access(*this);
  trace_.clear();
}

void ManagerCore::observe(ObservedOperation operation) noexcept {
  try {
    operation.manager_id = manager_id_;
    std::string failure;
    try {
      observer_(operation);
      return;
    } catch (const std::exception& error) {
      failure = error.what();
    } catch (...) {
      failure = "an exception of unknown type";
    }
    StateAccess access(*this);
    diagnose_locked(std::string("operation observer failed on ") + to_string(operation.call) + ": " + failure);
  } catch (...) {
    // Reentered (a source load is running) or out of memory: the diagnostic
    // is lost; the observed call's outcome stands.
  }
}

std::vector<std::string> ManagerCore::diagnostics() {
  StateAccess access(*this);
  return diagnostics_.items();
}

bool ManagerCore::closed() {
  StateAccess access(*this);
  return closed_;
}

void ManagerCore::close(bool wait, bool force) {
  StateAccess access(*this);
  if (closed_) return;
  if (wait) {
    synchronize_pending_locked();
  } else {
    reap_locked();
  }
  const std::size_t leases = lifetimes_.lease_count(), active = lifetimes_.active_lease_count();
  const std::size_t holds = lifetimes_.holds().size(), reservations = lifetimes_.reservations().size();
  if (!force && !lifetimes_.empty()) {
    throw ResidencyInUseError("residency manager '" + manager_id_ +
                              "' cannot close with active or pending lifetimes: active_leases=" +
                              std::to_string(active) + ", pending_leases=" + std::to_string(leases - active) +
                              ", holds=" + std::to_string(holds) + ", reservations=" + std::to_string(reservations));
  }
  if (force) {
    // Best effort: let consumer work finish before storage is returned
    // (leases with streams are granted under the gate).
    for (const auto& [token, lease] : lifetimes_.gate_leases()) {
      for (const auto& stream : lease.streams) {
        try {
          runtime_->synchronize_stream(stream);
        } catch (...) {
          diagnose_locked("forced close could not synchronize stream " + std::to_string(stream.id()) + " on " +
                          stream.device().str());
        }
      }
    }
    if (!lifetimes_.empty()) {
      diagnose_locked("forced close cleared " + std::to_string(leases) + " lease(s), " + std::to_string(holds) +
                      " hold(s) and " + std::to_string(reservations) + " reservation(s)");
    }
  }
  lifetimes_.clear();
  values_.clear();
  ledger_.clear_charges();
  closed_ = true;
  bump_locked();
}

}  // namespace fhelium::residency::detail
