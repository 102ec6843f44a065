// Snapshot record properties: for generated field combinations, valid and
// invalid, each record's constructor accepts exactly the combinations its
// rules allow. The rules are restated here independently of the library.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "fhelium/residency.hpp"

namespace fhelium::residency {
namespace {

// Small values around zero, so boundaries are hit often.
rc::Gen<std::int64_t> small() { return rc::gen::inRange<std::int64_t>(-2, 9); }
rc::Gen<std::optional<std::int64_t>> maybe_small() {
  return rc::gen::mapcat(rc::gen::arbitrary<bool>(), [](bool present) {
    return present ? rc::gen::map(small(), [](std::int64_t v) { return std::optional<std::int64_t>(v); })
                   : rc::gen::just(std::optional<std::int64_t>());
  });
}

template <class F>
bool accepted(F&& construct) {
  try {
    construct();
    return true;
  } catch (const std::invalid_argument&) {
    return false;
  }
}

RC_GTEST_PROP(Records, MaterializationSnapshotAcceptsExactlyItsRules, ()) {
  const auto logical = *small(), storage = *small(), charged = *small(), uses = *small(), holds = *small(),
             pending = *small();
  const bool valid = logical >= 0 && storage >= 0 && charged >= 0 && uses >= 0 && holds >= 0 && pending >= 0 &&
                     charged >= std::max(logical, storage);
  RC_ASSERT(accepted([&] { MaterializationSnapshot(PAGEABLE_HOST, logical, storage, charged, uses, holds, pending); }) ==
            valid);
}

RC_GTEST_PROP(Records, LocationSnapshotAcceptsExactlyItsRules, ()) {
  const auto budget = *maybe_small(), remaining = *maybe_small(), allocated = *maybe_small(), reserved_alloc = *maybe_small();
  const auto used = *small(), reserved = *small(), peak_used = *small(), peak_charged = *small();
  const auto values = *small(), reservations = *small(), uses = *small(), holds = *small(), pending = *small();
  bool valid = used >= 0 && reserved >= 0 && peak_used >= 0 && peak_charged >= 0 && values >= 0 &&
               reservations >= 0 && uses >= 0 && holds >= 0 && pending >= 0 && (!budget || *budget >= 0) &&
               (!remaining || *remaining >= 0) && (!allocated || *allocated >= 0) &&
               (!reserved_alloc || *reserved_alloc >= 0) && peak_used >= used &&
               peak_charged >= std::max(peak_used, used + reserved);
  if (budget) {
    valid = valid && used + reserved <= *budget && remaining == *budget - used - reserved && peak_charged <= *budget;
  } else {
    valid = valid && !remaining;
  }
  RC_ASSERT(accepted([&] {
              ResidencyLocationSnapshot(cuda_location(0), budget, used, reserved, remaining, peak_used, peak_charged,
                                        values, reservations, uses, holds, pending, allocated, reserved_alloc);
            }) == valid);
}

// No reason, a real one, or a blank one (which every record rejects).
rc::Gen<std::optional<std::string>> reason_gen() {
  return rc::gen::element<std::optional<std::string>>(std::nullopt, std::string("destination already resident"),
                                                      std::string(""), std::string(" \t"));
}
bool reason_valid(const std::optional<std::string>& reason) {
  return !reason || reason->find_first_not_of(" \t\r\n") != std::string::npos;
}
rc::Gen<std::optional<ResidencyLocation>> maybe_location() {
  return rc::gen::element<std::optional<ResidencyLocation>>(std::nullopt, PAGEABLE_HOST, PINNED_HOST, cuda_location(1));
}

RC_GTEST_PROP(Records, TransitionReportAcceptsExactlyItsRules, ()) {
  const auto logical = *small(), storage = *small(), started = *small(), completed = *small();
  // Every optional field, present or absent, valid or not.
  const auto allocated_before = *maybe_small(), reserved_before = *maybe_small();
  const auto allocated_after = *maybe_small(), reserved_after = *maybe_small();
  const auto source = *maybe_location(), destination = *maybe_location();
  const bool no_op = *rc::gen::arbitrary<bool>();
  const int device_kind = *rc::gen::inRange(0, 4);  // none, cuda:N, unindexed cuda, cpu
  const auto reason = *reason_gen();
  std::optional<c10::Device> device;
  if (device_kind == 1) device = c10::Device(c10::DeviceType::CUDA, 2);
  if (device_kind == 2) device = c10::Device(c10::DeviceType::CUDA);
  if (device_kind == 3) device = c10::Device(c10::DeviceType::CPU);
  const auto nonnegative = [](const std::optional<std::int64_t>& v) { return !v || *v >= 0; };
  const bool valid = logical >= 0 && storage >= 0 && started >= 0 && completed >= 0 && storage >= logical &&
                     completed >= started && device_kind <= 1 && nonnegative(allocated_before) &&
                     nonnegative(reserved_before) && nonnegative(allocated_after) && nonnegative(reserved_after) &&
                     reason_valid(reason);
  const ResidencyAction action = *rc::gen::element<ResidencyAction>(
      DiscardValue{ResidencyHandle{"m", "1", "T"}}, EnsureResident{ResidencyHandle{"m", "1", "T"}, PINNED_HOST},
      MoveResident{ResidencyHandle{"m", "1", "T"}, cuda_location(0), PAGEABLE_HOST});
  RC_ASSERT(accepted([&] {
              const ResidencyTransitionReport report(action, no_op, source, destination, logical, storage, started,
                                                     completed, device, allocated_before, reserved_before,
                                                     allocated_after, reserved_after, reason);
              // Accepted records keep every field as given.
              RC_ASSERT(report.allocator_reserved_bytes_before == reserved_before);
              RC_ASSERT(report.allocator_allocated_bytes_after == allocated_after);
              RC_ASSERT(report.source == source && report.destination == destination && report.reason == reason);
            }) == valid);
}

RC_GTEST_PROP(Records, ActionExplanationAcceptsExactlyItsRules, ()) {
  const auto logical = *small(), storage = *small();
  const auto reason = *reason_gen();
  const bool executable = *rc::gen::arbitrary<bool>(), no_op = *rc::gen::arbitrary<bool>();
  const bool valid = logical >= 0 && storage >= 0 && storage >= logical && reason_valid(reason);
  RC_ASSERT(accepted([&] {
              ResidencyActionExplanation(DiscardValue{ResidencyHandle{"m", "1", "T"}}, executable, no_op,
                                         *maybe_location(), *maybe_location(), logical, storage, reason);
            }) == valid);
}

RC_GTEST_PROP(Records, ValueSnapshotAcceptsExactlyItsRules, ()) {
  const bool has_source = *rc::gen::arbitrary<bool>();
  const bool source_location = *rc::gen::arbitrary<bool>();
  const bool discarded = *rc::gen::arbitrary<bool>();
  const auto count = *rc::gen::inRange(0, 3);
  const bool duplicate = count == 2 && *rc::gen::arbitrary<bool>();
  std::vector<MaterializationSnapshot> items;
  for (int i = 0; i < count; ++i) {
    const ResidencyLocation where = duplicate ? PINNED_HOST : cuda_location(i);
    items.emplace_back(where, 1, 1, 1, 0, 0, 0);
  }
  const bool valid = has_source == source_location && !duplicate && !(discarded && (has_source || count > 0));
  const ResidencyValueSpec spec("T", 1, 1, ReplicaMode::replicable, Recoverability::reconstructible);
  RC_ASSERT(accepted([&] {
              ResidencyValueSnapshot(ResidencyHandle{"m", "1", "T"}, spec, items, has_source,
                                     source_location ? std::optional(PAGEABLE_HOST) : std::nullopt, discarded);
            }) == valid);
}

RC_GTEST_PROP(Records, ReservationAndSnapshotAcceptExactlyTheirRules, ()) {
  const auto nbytes = *small();
  const auto label = *rc::gen::element<std::string>("workspace", "", "  ");
  const bool label_valid = label.find_first_not_of(' ') != std::string::npos;
  RC_ASSERT(accepted([&] { ResidencyReservationSnapshot(PINNED_HOST, nbytes, label); }) == (nbytes >= 0 && label_valid));

  const auto manager_id = *rc::gen::element<std::string>("manager-1", "", " ");
  const auto captured = *small();
  const bool repeated_value = *rc::gen::arbitrary<bool>(), repeated_location = *rc::gen::arbitrary<bool>();
  const ResidencyValueSpec spec("T", 1, 1, ReplicaMode::replicable, Recoverability::reconstructible);
  std::vector<ResidencyValueSnapshot> values{ResidencyValueSnapshot(ResidencyHandle{"m", "1", "T"}, spec, {}, false,
                                                                    std::nullopt, false)};
  if (repeated_value) values.push_back(values.front());
  const ResidencyLocationSnapshot at_host(PAGEABLE_HOST, std::nullopt, 0, 0, std::nullopt, 0, 0, 0, 0, 0, 0, 0,
                                          std::nullopt, std::nullopt);
  std::vector<ResidencyLocationSnapshot> locations{at_host};
  if (repeated_location) locations.push_back(at_host);
  const bool valid = manager_id.find_first_not_of(' ') != std::string::npos && captured >= 0 && !repeated_value &&
                     !repeated_location;
  RC_ASSERT(accepted([&] { ResidencySnapshot(manager_id, 3, values, locations, {}, captured); }) == valid);
}

RC_GTEST_PROP(Records, PlanReportAndExplanationAcceptExactlyTheirRules, ()) {
  const auto started = *small(), completed = *small(), peak = *small();
  const bool blank_name = *rc::gen::arbitrary<bool>();
  const bool repeated = *rc::gen::arbitrary<bool>();
  const std::string name = blank_name ? "  " : "plan";
  RC_ASSERT(accepted([&] { ResidencyPlanReport(name, {}, started, completed); }) ==
            (!blank_name && started >= 0 && completed >= started));
  std::vector<std::pair<ResidencyLocation, std::int64_t>> peaks{{PAGEABLE_HOST, peak}};
  if (repeated) peaks.emplace_back(PAGEABLE_HOST, 0);
  const auto reason = *reason_gen();
  RC_ASSERT(accepted([&] { ResidencyPlanExplanation(name, {}, {}, peaks, *rc::gen::arbitrary<bool>(), reason); }) ==
            (!blank_name && peak >= 0 && !repeated && reason_valid(reason)));
}

}  // namespace
}  // namespace fhelium::residency
