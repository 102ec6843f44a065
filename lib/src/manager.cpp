// ResidencyManager is a thin handle over the shared ManagerCore, so that
// lifetimes created by the manager stay valid if they outlive it.
#include "fhelium/residency/manager.hpp"

#include "detail/manager_core.hpp"
#include "fhelium/residency/value.hpp"

namespace fhelium::residency {

ResidencyManager::ResidencyManager(ManagerOptions options)
    : core_(std::make_shared<detail::ManagerCore>(std::move(options))) {}

ResidencyManager::~ResidencyManager() = default;

const std::string& ResidencyManager::manager_id() const noexcept { return core_->manager_id(); }
std::uint64_t ResidencyManager::state_version() const { return core_->state_version(); }
std::vector<ResidencyLocation> ResidencyManager::locations() const { return core_->locations(); }
const std::shared_ptr<DeviceRuntime>& ResidencyManager::runtime() const noexcept { return core_->runtime(); }

ResidencyHandle ResidencyManager::adopt(ResidentValue value, std::optional<ResidencyLocation> at,
                                        ReplicaMode replica_mode) {
  return core_->adopt(std::move(value), at, replica_mode);
}

ResidencyHandle ResidencyManager::register_source(ResidencyValueSpec spec, std::shared_ptr<ResidencySource> source,
                                                  ResidencyLocation source_location) {
  return core_->register_source(std::move(spec), std::move(source), source_location);
}

ResidencyHandle ResidencyManager::register_source(ResidencyValueSpec spec, std::function<ResidentValue()> load,
                                                  ResidencyLocation source_location) {
  return core_->register_source(std::move(spec), make_source(std::move(load)), source_location);
}

ResidencyTransitionReport ResidencyManager::ensure(const ResidencyHandle& handle, const ResidencyLocation& at,
                                                   std::optional<c10::Stream> stream) {
  return core_->run_action(EnsureResident{handle, at}, stream);
}

ResidencyTransitionReport ResidencyManager::copy(const ResidencyHandle& handle, const ResidencyLocation& to,
                                                 std::optional<c10::Stream> stream) {
  return ensure(handle, to, stream);
}

ResidencyTransitionReport ResidencyManager::move(const ResidencyHandle& handle, const ResidencyLocation& to,
                                                 std::optional<ResidencyLocation> from_location,
                                                 std::optional<c10::Stream> stream) {
  return core_->run_action(MoveResident{handle, to, from_location}, stream);
}

ResidencyTransitionReport ResidencyManager::drop(const ResidencyHandle& handle, const ResidencyLocation& at) {
  return core_->run_action(DropResident{handle, at}, std::nullopt);
}

ResidencyTransitionReport ResidencyManager::discard(const ResidencyHandle& handle) {
  return core_->run_action(DiscardValue{handle}, std::nullopt);
}

ResidencyPlanReport ResidencyManager::execute_actions(const std::vector<ResidencyAction>& actions,
                                                      const std::string& name, const TransferStreams& transfer_streams,
                                                      std::optional<std::uint64_t> expected_state_version) {
  return core_->execute_actions(actions, name, transfer_streams, expected_state_version);
}

ResidencyPlanExplanation ResidencyManager::explain(const ResidencyPlan& plan,
                                                   std::optional<std::uint64_t> expected_state_version) const {
  return core_->explain(plan, expected_state_version);
}

ResidencyScope ResidencyManager::scope(ResidencyPlan plan, TransferStreams transfer_streams,
                                       std::optional<std::uint64_t> expected_state_version) {
  return ResidencyScope(core_, std::move(plan), std::move(transfer_streams), expected_state_version);
}

ResidencyLease ResidencyManager::acquire(const std::vector<ResidencyHandle>& handles, const ResidencyLocation& at,
                                         std::optional<c10::Stream> consumer_stream) {
  std::vector<ResidencyHandle> unique = detail::unique_handles(handles, "acquire");
  const std::uint64_t token = core_->acquire(unique, at, consumer_stream);
  return ResidencyLease(core_, token, std::move(unique), at);
}

ResidencyHold ResidencyManager::hold(const std::vector<ResidencyHandle>& handles, const ResidencyLocation& at) {
  std::vector<ResidencyHandle> unique = detail::unique_handles(handles, "hold");
  const std::uint64_t token = core_->hold(unique, at);
  return ResidencyHold(core_, token, std::move(unique), at);
}

ResidencyReservation ResidencyManager::reserve(const ResidencyLocation& location, std::int64_t nbytes,
                                               const std::string& label) {
  const std::uint64_t token = core_->reserve(location, nbytes, label);
  return ResidencyReservation(core_, token, location, nbytes, label);
}

ResidencySnapshot ResidencyManager::snapshot() const { return core_->snapshot(); }
std::vector<ResidencyTransitionReport> ResidencyManager::trace() const { return core_->trace(); }
void ResidencyManager::clear_trace() { core_->clear_trace(); }
std::vector<std::string> ResidencyManager::diagnostics() const { return core_->diagnostics(); }
void ResidencyManager::close(bool wait, bool force) { core_->close(wait, force); }
bool ResidencyManager::closed() const { return core_->closed(); }

}  // namespace fhelium::residency
