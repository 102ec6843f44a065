// ResidencyManager is a thin handle over the shared ManagerCore, so that
// lifetimes created by the manager stay valid if they outlive it.
#include "fhelium/residency/manager.hpp"

#include "detail/manager_core.hpp"
#include "detail/observation.hpp"
#include "fhelium/residency/value.hpp"

namespace fhelium::residency {

using detail::observe_call;
using detail::observed;

namespace {

ObservedOperation transition(ObservedCall call, const ResidencyHandle& handle, std::optional<ResidencyLocation> at,
                             const std::optional<c10::Stream>& stream) {
  ObservedOperation operation = observed(call);
  operation.handles = {handle};
  operation.location = at;
  operation.stream = stream;
  return operation;
}

ObservedOperation borrowing(ObservedCall call, const std::vector<ResidencyHandle>& handles,
                            const ResidencyLocation& at, const std::optional<c10::Stream>& stream) {
  ObservedOperation operation = observed(call);
  operation.handles = handles;
  operation.location = at;
  operation.stream = stream;
  return operation;
}

void note_report(ObservedOperation& operation, const ResidencyTransitionReport& report) { operation.no_op = report.no_op; }

}  // namespace

ResidencyManager::ResidencyManager(ManagerOptions options)
    : core_(std::make_shared<detail::ManagerCore>(std::move(options))) {}

ResidencyManager::~ResidencyManager() { core_->disown(); }

const std::string& ResidencyManager::manager_id() const noexcept { return core_->manager_id(); }
std::uint64_t ResidencyManager::state_version() const { return core_->state_version(); }
std::vector<ResidencyLocation> ResidencyManager::locations() const { return core_->locations(); }
const std::shared_ptr<DeviceRuntime>& ResidencyManager::runtime() const noexcept { return core_->runtime(); }

ResidencyHandle ResidencyManager::adopt(ResidentValue value, std::optional<ResidencyLocation> at,
                                        ReplicaMode replica_mode) {
  return observe_call(
      *core_,
      [&] {
        ObservedOperation operation = observed(ObservedCall::adopt);
        operation.location = at ? at : core_->runtime()->locate(value);
        operation.replica_mode = replica_mode;
        operation.nbytes = value.logical_nbytes();
        try {  // the spec the manager records
          operation.spec.emplace(value.type_name(), value.logical_nbytes(),
                                 std::max(value.logical_nbytes(), value.storage_nbytes()), replica_mode,
                                 Recoverability::must_preserve);
        } catch (const std::exception&) {
          // Not a valid spec: the adoption fails, and says why.
        }
        return operation;
      },
      [&] { return core_->adopt(std::move(value), at, replica_mode); },
      [](ObservedOperation& operation, const ResidencyHandle& handle) { operation.handles = {handle}; });
}

ResidencyHandle ResidencyManager::register_source(ResidencyValueSpec spec, std::shared_ptr<ResidencySource> source,
                                                  ResidencyLocation source_location) {
  return observe_call(
      *core_,
      [&] {
        ObservedOperation operation = observed(ObservedCall::register_source);
        operation.spec = spec;
        operation.location = source_location;
        return operation;
      },
      [&] { return core_->register_source(std::move(spec), std::move(source), source_location); },
      [](ObservedOperation& operation, const ResidencyHandle& handle) { operation.handles = {handle}; });
}

ResidencyHandle ResidencyManager::register_source(ResidencyValueSpec spec, std::function<ResidentValue()> load,
                                                  ResidencyLocation source_location) {
  return register_source(std::move(spec), make_source(std::move(load)), source_location);
}

// [[gnu::hot]] marks the functions that ensure, drop and execute_actions run
// in this library (these three, the core's transition steps, the dry run, the
// value table's claims, the storage index, the clock, the runtimes' checks):
// GCC places them side by side in .text.hot instead of among the cold code of
// their files, so the code a plan runs between two loads spans fewer cache
// lines. Under callgrind's cache simulation (tools/instruction-counts.sh
// --cache) execute_actions went from 48.5 to 29.9 instruction-cache misses
// per action above the loads and an ensure from 147.9 to 140.2, at the same
// instruction counts.
[[gnu::hot]]
ResidencyTransitionReport ResidencyManager::ensure(const ResidencyHandle& handle, const ResidencyLocation& at,
                                                   std::optional<c10::Stream> stream) {
  return observe_call(
      *core_, [&] { return transition(ObservedCall::ensure, handle, at, stream); },
      [&] { return core_->run_action<EnsureResident>(stream, handle, at); }, note_report);
}

ResidencyTransitionReport ResidencyManager::copy(const ResidencyHandle& handle, const ResidencyLocation& to,
                                                 std::optional<c10::Stream> stream) {
  return ensure(handle, to, stream);
}

ResidencyTransitionReport ResidencyManager::move(const ResidencyHandle& handle, const ResidencyLocation& to,
                                                 std::optional<ResidencyLocation> from_location,
                                                 std::optional<c10::Stream> stream) {
  return observe_call(
      *core_,
      [&] {
        ObservedOperation operation = transition(ObservedCall::move, handle, to, stream);
        operation.from = from_location;
        return operation;
      },
      [&] { return core_->run_action<MoveResident>(stream, handle, to, from_location); }, note_report);
}

[[gnu::hot]]
ResidencyTransitionReport ResidencyManager::drop(const ResidencyHandle& handle, const ResidencyLocation& at) {
  return observe_call(
      *core_, [&] { return transition(ObservedCall::drop, handle, at, std::nullopt); },
      [&] { return core_->run_action<DropResident>(std::nullopt, handle, at); }, note_report);
}

ResidencyTransitionReport ResidencyManager::discard(const ResidencyHandle& handle) {
  return observe_call(
      *core_, [&] { return transition(ObservedCall::discard, handle, std::nullopt, std::nullopt); },
      [&] { return core_->run_action<DiscardValue>(std::nullopt, handle); }, note_report);
}

[[gnu::hot]]
ResidencyPlanReport ResidencyManager::execute_actions(const std::vector<ResidencyAction>& actions,
                                                      const std::string& name, const TransferStreams& transfer_streams,
                                                      std::optional<std::uint64_t> expected_state_version) {
  return observe_call(
      *core_,
      [&] {
        ObservedOperation operation = observed(ObservedCall::execute_actions);
        operation.actions = actions;
        operation.name = name;
        operation.transfer_streams = transfer_streams;
        operation.expected_state_version = expected_state_version;
        return operation;
      },
      [&] { return core_->execute_actions(actions, name, transfer_streams, expected_state_version); });
}

ResidencyPlanExplanation ResidencyManager::explain(const ResidencyPlan& plan,
                                                   std::optional<std::uint64_t> expected_state_version) const {
  return observe_call(
      *core_,
      [&] {
        ObservedOperation operation = observed(ObservedCall::explain);
        operation.plan = plan;
        operation.expected_state_version = expected_state_version;
        return operation;
      },
      [&] { return core_->explain(plan, expected_state_version); });
}

ResidencyScope ResidencyManager::scope(ResidencyPlan plan, TransferStreams transfer_streams,
                                       std::optional<std::uint64_t> expected_state_version) {
  return ResidencyScope(core_, std::move(plan), std::move(transfer_streams), expected_state_version);
}

ResidencyLease ResidencyManager::acquire(const std::vector<ResidencyHandle>& handles, const ResidencyLocation& at,
                                         std::optional<c10::Stream> consumer_stream) {
  return observe_call(
      *core_,
      [&] { return borrowing(ObservedCall::acquire, handles, at, consumer_stream); },
      [&] {
        detail::LifetimeGrant grant = core_->acquire(handles, at, consumer_stream);
        return ResidencyLease(*core_, grant.token, std::move(grant.handles), at);
      },
      [](ObservedOperation& operation, const ResidencyLease& lease) { operation.lifetime = lease.lifetime_.token(); });
}

ResidencyHold ResidencyManager::hold(const std::vector<ResidencyHandle>& handles, const ResidencyLocation& at) {
  return observe_call(
      *core_,
      [&] { return borrowing(ObservedCall::hold, handles, at, std::nullopt); },
      [&] {
        detail::LifetimeGrant grant = core_->hold(handles, at);
        return ResidencyHold(*core_, grant.token, std::move(grant.handles), at);
      },
      [](ObservedOperation& operation, const ResidencyHold& hold) { operation.lifetime = hold.lifetime_.token(); });
}

ResidencyReservation ResidencyManager::reserve(const ResidencyLocation& location, std::int64_t nbytes,
                                               const std::string& label) {
  return observe_call(
      *core_,
      [&] {
        ObservedOperation operation = observed(ObservedCall::reserve);
        operation.location = location;
        operation.nbytes = nbytes;
        operation.name = label;
        return operation;
      },
      [&] {
        const std::uint64_t token = core_->reserve(location, nbytes, label);
        return ResidencyReservation(*core_, token, location, nbytes, label);
      },
      [](ObservedOperation& operation, const ResidencyReservation& reservation) {
        operation.lifetime = reservation.lifetime_.token();
      });
}

ResidencySnapshot ResidencyManager::snapshot() const { return core_->snapshot(); }
std::vector<ResidencyTransitionReport> ResidencyManager::trace() const { return core_->trace(); }
void ResidencyManager::clear_trace() { core_->clear_trace(); }
std::vector<std::string> ResidencyManager::diagnostics() const { return core_->diagnostics(); }
void ResidencyManager::close(bool wait, bool force) {
  observe_call(
      *core_,
      [&] {
        ObservedOperation operation = observed(ObservedCall::close);
        operation.wait = wait;
        operation.force = force;
        return operation;
      },
      [&] { core_->close(wait, force); });
}
bool ResidencyManager::closed() const { return core_->closed(); }

}  // namespace fhelium::residency
