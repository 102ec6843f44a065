// TraceRecord: a transition report in the trace ring's compact form (trace_record.hpp).
#include "detail/trace_record.hpp"

#include <type_traits>
#include <variant>

#include "detail/check.hpp"
#include "detail/handle_text.hpp"
#include "detail/record_assembly.hpp"

namespace fhelium::residency::detail {

// TraceRecord::report() rebuilds an action from its index.
static_assert(std::is_same_v<std::variant_alternative_t<0, ResidencyAction>, EnsureResident>);
static_assert(std::is_same_v<std::variant_alternative_t<1, ResidencyAction>, MoveResident>);
static_assert(std::is_same_v<std::variant_alternative_t<2, ResidencyAction>, DropResident>);
static_assert(std::is_same_v<std::variant_alternative_t<3, ResidencyAction>, DiscardValue>);

void TraceRecord::assign(const ResidencyTransitionReport& report, std::uint64_t serial_, const char* reason_) {
  // The one caller builds the report's reason from `reason_` itself.
  FHELIUM_CHECK(report.reason.has_value() == (reason_ != nullptr), "a trace record's reason is not its report's");
  serial = serial_;
  // A full ring overwrites records of values mostly of the same few types:
  // the type is copied only when it differs from the slot's.
  const std::string& type = action_handle(report.action).value_type;
  if (!same_text(value_type, type)) value_type = type;
  action_index = report.action.index();
  from_location.reset();
  if (const auto* ensure = std::get_if<EnsureResident>(&report.action)) {
    location = ensure->location;
  } else if (const auto* drop = std::get_if<DropResident>(&report.action)) {
    location = drop->location;
  } else if (const auto* move = std::get_if<MoveResident>(&report.action)) {
    location = move->to;
    from_location = move->from_location;
  } else {
    location = ResidencyLocation();
  }
  no_op = report.no_op;
  source = report.source;
  destination = report.destination;
  logical_nbytes = report.logical_nbytes;
  storage_nbytes = report.storage_nbytes;
  started_at_ns = report.started_at_ns;
  completed_at_ns = report.completed_at_ns;
  allocator_device = report.allocator_device;
  allocator_allocated_bytes_before = report.allocator_allocated_bytes_before;
  allocator_reserved_bytes_before = report.allocator_reserved_bytes_before;
  allocator_allocated_bytes_after = report.allocator_allocated_bytes_after;
  allocator_reserved_bytes_after = report.allocator_reserved_bytes_after;
  reason = reason_;
}

ResidencyTransitionReport TraceRecord::report(const std::string& manager_id) const {
  ResidencyHandle handle{manager_id, std::to_string(serial), value_type};
  ResidencyAction action = [&]() -> ResidencyAction {
    switch (action_index) {
      case 0: return EnsureResident{std::move(handle), location};
      case 1: return MoveResident{std::move(handle), location, from_location};
      case 2: return DropResident{std::move(handle), location};
      default: return DiscardValue{std::move(handle)};
    }
  }();
  return ResidencyTransitionReport(RecordAssembly::key(), std::move(action), no_op, source, destination,
                                   logical_nbytes, storage_nbytes, started_at_ns, completed_at_ns, allocator_device,
                                   allocator_allocated_bytes_before, allocator_reserved_bytes_before,
                                   allocator_allocated_bytes_after, allocator_reserved_bytes_after,
                                   reason ? std::optional<std::string>(reason) : std::nullopt);
}

}  // namespace fhelium::residency::detail
