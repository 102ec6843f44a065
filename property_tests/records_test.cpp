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

RC_GTEST_PROP(Records, TransitionReportAcceptsExactlyItsRules, ()) {
  const auto logical = *small(), storage = *small(), started = *small(), completed = *small();
  const auto before = *maybe_small(), after = *maybe_small();
  const int device_kind = *rc::gen::inRange(0, 4);  // none, cuda:N, unindexed cuda, cpu
  const bool empty_reason = *rc::gen::arbitrary<bool>();
  std::optional<c10::Device> device;
  if (device_kind == 1) device = c10::Device(c10::DeviceType::CUDA, 2);
  if (device_kind == 2) device = c10::Device(c10::DeviceType::CUDA);
  if (device_kind == 3) device = c10::Device(c10::DeviceType::CPU);
  const bool valid = logical >= 0 && storage >= 0 && started >= 0 && completed >= 0 && storage >= logical &&
                     completed >= started && device_kind <= 1 && (!before || *before >= 0) &&
                     (!after || *after >= 0) && !empty_reason;
  const ResidencyAction action = DiscardValue{ResidencyHandle{"m", "1", "T"}};
  RC_ASSERT(accepted([&] {
              ResidencyTransitionReport(action, false, std::nullopt, std::nullopt, logical, storage, started,
                                        completed, device, before, std::nullopt, after, std::nullopt,
                                        empty_reason ? std::optional<std::string>(" ") : std::nullopt);
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

RC_GTEST_PROP(Records, PlanReportAndExplanationAcceptExactlyTheirRules, ()) {
  const auto started = *small(), completed = *small(), peak = *small();
  const bool blank_name = *rc::gen::arbitrary<bool>();
  const bool repeated = *rc::gen::arbitrary<bool>();
  const std::string name = blank_name ? "  " : "plan";
  RC_ASSERT(accepted([&] { ResidencyPlanReport(name, {}, started, completed); }) ==
            (!blank_name && started >= 0 && completed >= started));
  std::vector<std::pair<ResidencyLocation, std::int64_t>> peaks{{PAGEABLE_HOST, peak}};
  if (repeated) peaks.emplace_back(PAGEABLE_HOST, 0);
  RC_ASSERT(accepted([&] { ResidencyPlanExplanation(name, {}, {}, peaks, true); }) ==
            (!blank_name && peak >= 0 && !repeated));
}

}  // namespace
}  // namespace fhelium::residency
