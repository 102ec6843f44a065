// Values and primitive transitions: adopt, register_source, ensure, move, drop,
// discard, each decided and carried out by the transitions part
// (transitions.hpp) and reported here.
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <variant>

#include "detail/check.hpp"
#include "detail/handle_check.hpp"
#include "detail/manager_core.hpp"
#include "detail/record_assembly.hpp"
#include "detail/transition_rules.hpp"
#include "fhelium/residency/errors.hpp"

namespace fhelium::residency::detail {

namespace {

// The transfer stream `streams` gives a plan's action: the one for its
// destination (ensure, move); none for a drop or a discard.
template <class Action>
std::optional<c10::Stream> stream_for(const Action& action, const TransferStreams& streams) {
  const ResidencyLocation* destination = nullptr;
  if constexpr (std::is_same_v<Action, EnsureResident>) destination = &action.location;
  if constexpr (std::is_same_v<Action, MoveResident>) destination = &action.to;
  if (destination == nullptr) return std::nullopt;
  const auto found = streams.find(*destination);
  if (found == streams.end()) return std::nullopt;
  return found->second;
}

}  // namespace

ResidencyHandle ManagerCore::adopt(ResidentValue&& value, std::optional<ResidencyLocation> at,
                                   ReplicaMode replica_mode) {
  validate(replica_mode, "adopt replica_mode");
  StateAccess access(*this);
  require_open_locked();
  reap_locked();
  if (!at) {
    at = runtime_->locate(value);
    if (!at) {
      throw ResidencyMaterializationError("cannot infer the location of " + value.type_name() +
                                          " value: it has no tensors or they are not all at one location; pass `at`");
    }
  }
  runtime_->check_location(*at);
  const std::int64_t logical = value.logical_nbytes();
  ResidencyValueSpec spec(value.type_name(), logical, std::max(logical, value.storage_nbytes()), replica_mode,
                          Recoverability::must_preserve);
  ValueRecord& record = values_.add(std::move(spec), nullptr, std::nullopt);
  try {
    transitions_.install(record, *at, std::move(value), false);
  } catch (...) {
    values_.remove_last();
    throw;
  }
  return values_.handle_of(record);
}

ResidencyHandle ManagerCore::register_source(ResidencyValueSpec&& spec, std::shared_ptr<ResidencySource>&& source,
                                             ResidencyLocation source_location) {
  if (!source) throw std::invalid_argument("register_source needs a non-null ResidencySource");
  spec.validate();  // its fields are public and may have changed since construction
  if (spec.recoverability != Recoverability::reconstructible) {
    throw std::invalid_argument("a registered ResidencySource requires a RECONSTRUCTIBLE spec");
  }
  StateAccess access(*this);
  require_open_locked();
  reap_locked();
  runtime_->check_location(source_location);
  transitions_.register_location(source_location);
  ValueRecord& record = values_.add(std::move(spec), std::move(source), source_location);
  bump_locked();
  return values_.handle_of(record);
}

template <class Action, class... Fields>
[[gnu::hot]]
ResidencyTransitionReport ManagerCore::run_action(const std::optional<c10::Stream>& stream, const Fields&... fields) {
#if defined(__cpp_aggregate_paren_init)
  // The action (an aggregate) built in place from the fields: building it
  // first and moving it in, as below, costs about 95 instructions more per
  // call (callgrind, ensure and drop).
  ResidencyTransitionReport report(RecordAssembly::key(), std::in_place, std::in_place_type<Action>, fields...);
#else
  // Compilers without parenthesized aggregate initialization (clang before
  // 16) build it first and move it in.
  ResidencyTransitionReport report(RecordAssembly::key(), std::in_place, Action{fields...});
#endif
  const Action& action = *std::get_if<Action>(&report.action);
  require_well_formed(action.handle);
  StateAccess access(*this);
  require_open_locked();
  run_typed_locked(report, action, stream, nullptr, std::nullopt);
  return report;
}

// Inline in its callers: a primitive's run_action and each arm of
// append_run_locked's dispatch, where a call would cost more than the
// dispatch saves.
template <class Action>
[[gnu::always_inline]] inline void ManagerCore::run_typed_locked(ResidencyTransitionReport& report,
                                                                const Action& action,
                                                                const std::optional<c10::Stream>& stream,
                                                                const PlanDryRun::Step* planned,
                                                                std::optional<std::int64_t> started_at_ns) {
  reap_locked();
  const std::int64_t started = started_at_ns ? *started_at_ns : clock_locked();
  ValueRecord& record = planned != nullptr ? *planned->record : values_.lookup(action.handle);
  FHELIUM_CHECK(!record.discarded, "a plan acts on a value discarded before its action");
  // Every argument is checked before any state is read for no-op detection
  // (a planned action's were, by its preflight).
  if (planned == nullptr) transitions_.check_arguments(action, stream);
  // Host actions sample no allocator: the calls are skipped, not just empty.
  const std::optional<c10::Device> sampled_device =
      allocator_device(action, record.materializations, [](const Materialization& item) -> const ResidencyLocation& {
        return item.location;
      });
  // The samples go straight into the report, which a failure discards; a
  // fresh report has none, and a host action leaves it so.
  if (sampled_device) [[unlikely]] {
    report.allocator_device = sampled_device;
    std::tie(report.allocator_allocated_bytes_before, report.allocator_reserved_bytes_before) =
        sample_allocator_locked(sampled_device);
  }
  const TransitionDecision decision = planned != nullptr
                                         ? transitions_.apply_planned(planned->decision, action, record, stream)
                                         : transitions_.decide_and_apply(action, record, stream);
  if (sampled_device) [[unlikely]] {
    std::tie(report.allocator_allocated_bytes_after, report.allocator_reserved_bytes_after) =
        sample_allocator_locked(sampled_device);
  }
  report.no_op = decision.changes_nothing();
  report.source = decision.source;
  report.destination = decision.destination;
  report.logical_nbytes = record.spec.logical_nbytes;
  report.storage_nbytes = record.spec.storage_nbytes;
  report.started_at_ns = started;
  report.completed_at_ns = clock_locked();
  if (decision.no_op) report.reason.emplace(decision.no_op);
  trace_.push_in_place([&](TraceRecord& slot) { slot.assign(report, record.serial, decision.no_op); });
}

[[gnu::hot]]
void ManagerCore::append_run_locked(std::vector<ResidencyTransitionReport>& reports, const ResidencyAction& action,
                                    const TransferStreams& streams, const PlanDryRun::Step* planned,
                                    std::optional<std::int64_t> started_at_ns) {
  // One dispatch on the action's type: the report's copy of the action, its
  // stream and the run all know it.
  std::visit(
      [&](const auto& typed) {
        using Action = std::decay_t<decltype(typed)>;
        ResidencyTransitionReport& report =
            reports.emplace_back(RecordAssembly::key(), std::in_place, std::in_place_type<Action>, typed);
        try {
          run_typed_locked(report, *std::get_if<Action>(&report.action), stream_for(typed, streams), planned,
                           started_at_ns);
        } catch (...) {
          reports.pop_back();
          throw;
        }
      },
      action);
}

template ResidencyTransitionReport ManagerCore::run_action<EnsureResident>(const std::optional<c10::Stream>&,
                                                                           const ResidencyHandle&,
                                                                           const ResidencyLocation&);
template ResidencyTransitionReport ManagerCore::run_action<MoveResident>(const std::optional<c10::Stream>&,
                                                                         const ResidencyHandle&,
                                                                         const ResidencyLocation&,
                                                                         const std::optional<ResidencyLocation>&);
template ResidencyTransitionReport ManagerCore::run_action<DropResident>(const std::optional<c10::Stream>&,
                                                                         const ResidencyHandle&,
                                                                         const ResidencyLocation&);
template ResidencyTransitionReport ManagerCore::run_action<DiscardValue>(const std::optional<c10::Stream>&,
                                                                         const ResidencyHandle&);

}  // namespace fhelium::residency::detail
