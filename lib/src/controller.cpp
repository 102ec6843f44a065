#include "fhelium/residency/controller.hpp"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <stdexcept>

#include "detail/blank_text.hpp"
#include "detail/victim_search.hpp"
#include "fhelium/residency/value.hpp"

namespace fhelium::residency {

namespace {

std::string names(const std::vector<ResidencyLocation>& locations) {
  std::string text = "[";
  for (std::size_t index = 0; index < locations.size(); ++index) {
    if (index > 0) text += ", ";
    text += locations[index].name();
  }
  return text + "]";
}

// Streams a use hands to the manager: CUDA locations only, each with a CUDA
// stream on its own device.
void check_streams(const std::map<ResidencyLocation, c10::Stream>& streams, const std::string& what,
                   const std::string& request_name) {
  for (const auto& [location, stream] : streams) {
    const std::string prefix = "ResidencyUse '" + request_name + "' " + what + ": ";
    if (!location.is_cuda()) {
      throw std::invalid_argument(prefix + "cannot assign a CUDA stream to host location " + location.name());
    }
    if (!stream.device().is_cuda() || stream.device_index() != location.cuda_index()) {
      throw std::invalid_argument(prefix + "stream device " + stream.device().str() + " does not match " +
                                  location.name());
    }
  }
}

}  // namespace

// ---- records ----------------------------------------------------------------

ResidencyEviction::ResidencyEviction(ResidencyAction action_, std::int64_t rank_, ResidencyLocation released_location_,
                                     std::int64_t released_nbytes_, std::string reason_)
    : action(std::move(action_)),
      rank(rank_),
      released_location(released_location_),
      released_nbytes(released_nbytes_),
      reason(std::move(reason_)) {
  if (!std::holds_alternative<DropResident>(action) && !std::holds_alternative<MoveResident>(action)) {
    throw std::invalid_argument(std::string("ResidencyEviction action must be a drop or a move, got ") +
                                action_kind(action));
  }
  if (rank < 0) throw std::invalid_argument("ResidencyEviction rank must be non-negative");
  if (released_nbytes < 0) throw std::invalid_argument("ResidencyEviction released_nbytes must be non-negative");
  if (detail::is_blank(reason)) throw std::invalid_argument("ResidencyEviction reason must be non-empty");
}

ResidencyDecision::ResidencyDecision(std::string manager_id_, std::uint64_t expected_state_version_,
                                     std::int64_t explored_states_, ResidencyRequest request_, ResidencyPlan plan_,
                                     std::string policy_name_, ResidencyPolicyConfig policy_config_,
                                     std::vector<ResidencyEviction> evictions_,
                                     ResidencyPlanExplanation explanation_)
    : manager_id(std::move(manager_id_)),
      expected_state_version(expected_state_version_),
      explored_states(explored_states_),
      request(std::move(request_)),
      plan(std::move(plan_)),
      policy_name(std::move(policy_name_)),
      policy_config(std::move(policy_config_)),
      evictions(std::move(evictions_)),
      explanation(std::move(explanation_)) {
  if (detail::is_blank(manager_id)) throw std::invalid_argument("ResidencyDecision manager_id must be non-empty");
  if (explored_states < 1) throw std::invalid_argument("ResidencyDecision explored_states must be positive");
  if (detail::is_blank(policy_name)) throw std::invalid_argument("ResidencyDecision policy_name must be non-empty");
  for (const auto& [key, value] : policy_config) {
    if (detail::is_blank(key)) throw std::invalid_argument("ResidencyDecision policy config keys must be non-empty");
  }
  request.validate();
  if (plan.name != request.name) {
    throw std::invalid_argument("ResidencyDecision request and plan names must agree ('" + request.name + "' vs '" +
                                plan.name + "')");
  }
  if (explanation.plan_name != plan.name) {
    throw std::invalid_argument("ResidencyDecision explanation and plan names must agree ('" +
                                explanation.plan_name + "' vs '" + plan.name + "')");
  }
  if (!explanation.feasible) {
    throw std::invalid_argument("ResidencyDecision explanation must describe a feasible plan");
  }
}

// ---- controller -------------------------------------------------------------

ResidencyController::ResidencyController(ResidencyManager& manager, std::shared_ptr<const ResidencyPolicy> policy,
                                         std::int64_t search_state_limit)
    : manager_(&manager),
      policy_(policy ? std::move(policy) : std::make_shared<const DeterministicTieredLRU>()),
      search_state_limit_(search_state_limit) {
  if (detail::is_blank(policy_->name())) throw std::invalid_argument("ResidencyPolicy name must be non-empty");
  if (search_state_limit_ < 1) {
    throw std::invalid_argument("ResidencyController search_state_limit must be positive, got " +
                                std::to_string(search_state_limit_));
  }
}

void ResidencyController::set_policy_metadata(const ResidencyHandle& handle, std::int64_t priority,
                                              std::optional<std::string> stable_key) {
  validate_handle(handle);
  ResidencyPolicyMetadata metadata{priority, std::move(stable_key)};
  metadata.validate();
  std::lock_guard lock(mutex_);
  const ResidencySnapshot snapshot = manager_->snapshot();
  const ResidencyValueSnapshot* value = snapshot.value(handle);
  if (handle.manager_id != snapshot.manager_id || value == nullptr || value->discarded) {
    throw ResidencyHandleError("policy metadata requires a live handle of this manager; value '" +
                               handle.handle_id + "' is " +
                               (handle.manager_id != snapshot.manager_id ? "from another manager"
                                : value == nullptr                      ? "unknown"
                                                                        : "discarded"));
  }
  if (metadata.stable_key) {
    for (const auto& [other, existing] : metadata_) {
      if (!(other == handle) && existing.stable_key == metadata.stable_key) {
        throw std::invalid_argument("residency policy stable_key '" + *metadata.stable_key +
                                    "' is already used by value '" + other.handle_id +
                                    "'; stable keys must be unique within one controller");
      }
    }
  }
  metadata_[handle] = std::move(metadata);
}

ResidencyPolicyMetadata ResidencyController::policy_metadata(const ResidencyHandle& handle) const {
  std::lock_guard lock(mutex_);
  const auto found = metadata_.find(handle);
  return found == metadata_.end() ? ResidencyPolicyMetadata{} : found->second;
}

std::optional<std::int64_t> ResidencyController::last_access_epoch(const ResidencyHandle& handle) const {
  std::lock_guard lock(mutex_);
  const auto found = last_access_.find(handle);
  if (found == last_access_.end()) return std::nullopt;
  return found->second;
}

namespace {

// The request's handles against the manager's state, and its locations
// against the manager's runtime, before any search.
// Position in snapshot.values of every live handle.
std::unordered_map<ResidencyHandle, std::size_t> live_index(const ResidencySnapshot& snapshot) {
  std::unordered_map<ResidencyHandle, std::size_t> index;
  index.reserve(snapshot.values.size());
  for (std::size_t position = 0; position < snapshot.values.size(); ++position) {
    if (!snapshot.values[position].discarded) index.emplace(snapshot.values[position].handle, position);
  }
  return index;
}

void validate_against(const ResidencyManager& manager, const ResidencySnapshot& snapshot,
                      const std::unordered_map<ResidencyHandle, std::size_t>& index, const ResidencyRequest& request) {
  const auto lookup = [&](const ResidencyHandle& handle) -> const ResidencyValueSnapshot* {
    if (const auto found = index.find(handle); found != index.end()) return &snapshot.values[found->second];
    for (const auto& value : snapshot.values) {  // discarded ones only: rare
      if (value.discarded && value.handle == handle) return &value;
    }
    return nullptr;
  };
  std::unordered_map<ResidencyHandle, std::vector<ResidencyLocation>> locations;
  const std::string prefix = "ResidencyRequest '" + request.name + "' ";
  for (const auto& requirement : request.requirements) {
    const ResidencyHandle& handle = requirement.handle;
    if (handle.manager_id != snapshot.manager_id) {
      throw ResidencyHandleError(prefix + "contains value '" + handle.handle_id + "' from another manager ('" +
                                 handle.manager_id + "')");
    }
    const ResidencyValueSnapshot* value = lookup(handle);
    if (value == nullptr) {
      throw ResidencyHandleError(prefix + "contains an unknown handle '" + handle.handle_id + "'");
    }
    if (value->discarded) {
      throw ResidencyHandleError(prefix + "contains a discarded handle '" + handle.handle_id + "'");
    }
    manager.runtime()->check_location(requirement.location);
    locations[handle].push_back(requirement.location);
  }
  for (const auto& reservation : request.reservations) manager.runtime()->check_location(reservation.location);
  for (const auto& requirement : request.requirements) {
    const auto& at = locations[requirement.handle];
    if (at.size() > 1 &&
        snapshot.values[index.at(requirement.handle)].spec.replica_mode == ReplicaMode::exclusive) {
      throw ResidencyOwnershipError(prefix + "requires EXCLUSIVE value '" + requirement.handle.handle_id +
                                    "' at several locations " + names(at) +
                                    "; an EXCLUSIVE value cannot be resident at more than one at once");
    }
  }
}

}  // namespace

ResidencyDecision ResidencyController::decide(const ResidencyRequest& request) {
  request.validate();
  std::lock_guard lock(mutex_);
  const ResidencySnapshot snapshot = manager_->snapshot();
  const std::unordered_map<ResidencyHandle, std::size_t> index = live_index(snapshot);
  validate_against(*manager_, snapshot, index, request);
  const detail::VictimSearchInput input{snapshot, request, *policy_, index, metadata_, last_access_, search_state_limit_};
  detail::VictimSearchResult found = detail::search_victims(input);
  ResidencyPlan plan{request.name, std::move(found.enter), {}, request.reservations, std::move(found.reclaim)};
  ResidencyPlanExplanation explanation = manager_->explain(plan, snapshot.state_version);
  const std::uint64_t actual = manager_->state_version();
  if (actual != snapshot.state_version) throw ResidencyStaleStateError(snapshot.state_version, actual);
  if (!explanation.feasible) {
    throw ResidencyPlanError("automatic residency request '" + request.name + "' is infeasible: " +
                             explanation.reason.value_or("the manager's explanation found it infeasible"));
  }
  return ResidencyDecision(snapshot.manager_id, snapshot.state_version, found.explored_states, request,
                           std::move(plan), policy_->name(), policy_->config_identity(), std::move(found.evictions),
                           std::move(explanation));
}

void ResidencyController::validate_decision(const ResidencyDecision& decision) const {
  if (decision.manager_id != manager_->manager_id()) {
    throw ResidencyHandleError("ResidencyDecision for request '" + decision.request.name +
                               "' belongs to another manager ('" + decision.manager_id + "')");
  }
  if (decision.policy_name != policy_->name() || decision.policy_config != policy_->config_identity()) {
    throw ResidencyPlanError("ResidencyDecision for request '" + decision.request.name +
                             "' was issued under another policy configuration ('" + decision.policy_name +
                             "'), not this controller's ('" + policy_->name() + "')");
  }
}

ResidencyScope ResidencyController::scope(const ResidencyDecision& decision, TransferStreams transfer_streams) {
  validate_decision(decision);
  return manager_->scope(decision.plan, std::move(transfer_streams), decision.expected_state_version);
}

ResidencyUse ResidencyController::use(ResidencyRequest request, ConsumerStreams consumer_streams,
                                      TransferStreams transfer_streams) {
  request.validate();
  check_streams(consumer_streams, "consumer_streams", request.name);
  check_streams(transfer_streams, "transfer_streams", request.name);
  std::vector<ResidencyLocation> missing, unexpected;
  for (const auto& location : request.locations()) {
    if (location.is_cuda() && consumer_streams.count(location) == 0) missing.push_back(location);
  }
  for (const auto& entry : consumer_streams) {
    const ResidencyLocation& location = entry.first;  // a named reference: lambdas may capture it
    const bool required = std::any_of(request.requirements.begin(), request.requirements.end(),
                                      [&](const ResidencyRequirement& r) { return r.location == location; });
    if (!required) unexpected.push_back(location);
  }
  if (!missing.empty() || !unexpected.empty()) {
    throw std::invalid_argument("ResidencyUse '" + request.name +
                                "' consumer_streams must exactly cover the required CUDA locations: missing=" +
                                names(missing) + ", unexpected=" + names(unexpected));
  }
  return ResidencyUse(*this, std::move(request), std::move(consumer_streams), std::move(transfer_streams));
}

void ResidencyController::record_accesses(const std::vector<ResidencyHandle>& handles) {
  std::lock_guard lock(mutex_);
  ++access_epoch_;
  for (const auto& handle : handles) last_access_[handle] = access_epoch_;
}

// ---- use ------------------------------------------------------------------

ResidencyUse::ResidencyUse(ResidencyController& controller, ResidencyRequest request, ConsumerStreams consumer_streams,
                           TransferStreams transfer_streams)
    : controller_(&controller),
      request_(std::move(request)),
      consumer_streams_(std::move(consumer_streams)),
      transfer_streams_(std::move(transfer_streams)) {}

void ResidencyUse::enter() {
  if (entered_) throw std::logic_error("ResidencyUse '" + request_.name + "' cannot be entered twice");
  entered_ = true;
  try {
    decision_.emplace(controller_->decide(request_));
    scope_.emplace(controller_->scope(*decision_, transfer_streams_));
    scope_->enter();
    lease_of_requirement_.assign(request_.requirements.size(), SIZE_MAX);  // none yet
    for (const ResidencyLocation& location : request_.locations()) {
      std::vector<ResidencyHandle> handles;
      for (std::size_t index = 0; index < request_.requirements.size(); ++index) {
        if (request_.requirements[index].location != location) continue;
        handles.push_back(request_.requirements[index].handle);
        lease_of_requirement_[index] = leases_.size();
      }
      const auto stream = consumer_streams_.find(location);
      leases_.push_back(controller_->manager().acquire(
          handles, location,
          stream == consumer_streams_.end() ? std::nullopt : std::optional<c10::Stream>(stream->second)));
    }
    std::vector<ResidencyHandle> accessed;
    for (const auto& requirement : request_.requirements) {
      if (std::find(accessed.begin(), accessed.end(), requirement.handle) == accessed.end()) {
        accessed.push_back(requirement.handle);
      }
    }
    controller_->record_accesses(accessed);
  } catch (...) {
    closed_ = true;
    unwind();
    throw;
  }
}

void ResidencyUse::unwind() noexcept {
  for (auto lease = leases_.rbegin(); lease != leases_.rend(); ++lease) {
    try {
      lease->release();
    } catch (...) {
    }
  }
  if (scope_ && scope_->active()) {
    try {
      scope_->close();
    } catch (...) {
    }
  }
}

std::optional<ResidencyPlanReport> ResidencyUse::close() {
  if (!entered_) throw std::logic_error("ResidencyUse '" + request_.name + "' cannot close before enter()");
  if (closed_) return report();
  closed_ = true;
  std::exception_ptr first;
  for (auto lease = leases_.rbegin(); lease != leases_.rend(); ++lease) {
    try {
      lease->release();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (scope_ && scope_->active()) {
    try {
      scope_->close();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
  return report();
}

const ResidencyDecision& ResidencyUse::decision() const {
  if (!decision_) {
    throw std::logic_error("ResidencyUse '" + request_.name + "' has a decision only after enter() decided");
  }
  return *decision_;
}

ResidentValue ResidencyUse::value(const ResidencyRequirement& requirement) const {
  return value(requirement.handle, requirement.location);
}

ResidentValue ResidencyUse::value(const ResidencyHandle& handle, const ResidencyLocation& at) const {
  if (!entered_) throw std::logic_error("ResidencyUse '" + request_.name + "' values are available after enter()");
  const auto& requirements = request_.requirements;
  const auto found = std::find(requirements.begin(), requirements.end(), ResidencyRequirement{handle, at});
  if (found == requirements.end()) {
    throw std::invalid_argument("ResidencyUse '" + request_.name + "' does not require value '" + handle.handle_id +
                                "' at " + at.name());
  }
  const auto index = static_cast<std::size_t>(found - requirements.begin());
  if (index >= lease_of_requirement_.size() || lease_of_requirement_[index] >= leases_.size()) {
    throw ResidencyLifetimeClosedError("ResidencyUse '" + request_.name +
                                       "' holds no borrowed values: its entry failed");
  }
  return leases_[lease_of_requirement_[index]].value(handle);
}

std::vector<std::pair<ResidencyRequirement, ResidentValue>> ResidencyUse::values() const {
  std::vector<std::pair<ResidencyRequirement, ResidentValue>> result;
  result.reserve(request_.requirements.size());
  for (const auto& requirement : request_.requirements) result.emplace_back(requirement, value(requirement));
  return result;
}

std::optional<ResidencyPlanReport> ResidencyUse::report() const {
  return scope_ ? scope_->report() : std::nullopt;
}

std::optional<ResidencyPlanExecutionError> ResidencyUse::exit_error() const {
  return scope_ ? scope_->exit_error() : std::nullopt;
}

}  // namespace fhelium::residency
