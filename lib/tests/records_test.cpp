// The nine seed records: each constructor enforces exactly its record's rules.
#include <gtest/gtest.h>

#include "support.hpp"

namespace fhelium::residency {
namespace {

const ResidencyHandle handle{"m", "1", "Blob"};
const ResidencyValueSpec spec("Blob", 8, 8, ReplicaMode::exclusive, Recoverability::must_preserve);
const ResidencyAction action = EnsureResident{handle, PAGEABLE_HOST};

MaterializationSnapshot materialization(ResidencyLocation location = PAGEABLE_HOST) {
  return MaterializationSnapshot(location, 8, 8, 8, 0, 0, 0);
}

ResidencyLocationSnapshot location_snapshot(std::optional<std::int64_t> budget, std::int64_t used,
                                            std::int64_t reserved, std::optional<std::int64_t> remaining,
                                            std::int64_t peak_used, std::int64_t peak_charged) {
  return ResidencyLocationSnapshot(PAGEABLE_HOST, budget, used, reserved, remaining, peak_used, peak_charged, 1, 0, 0,
                                   0, 0, std::nullopt, std::nullopt);
}

TEST(Records, MaterializationSnapshotRules) {
  EXPECT_NO_THROW(MaterializationSnapshot(PAGEABLE_HOST, 8, 4, 8, 1, 2, 3));
  EXPECT_THROW(MaterializationSnapshot(PAGEABLE_HOST, -1, 0, 0, 0, 0, 0), std::invalid_argument);
  EXPECT_THROW(MaterializationSnapshot(PAGEABLE_HOST, 8, 8, 8, -1, 0, 0), std::invalid_argument);
  EXPECT_THROW(MaterializationSnapshot(PAGEABLE_HOST, 8, 8, 8, 0, -1, 0), std::invalid_argument);
  EXPECT_THROW(MaterializationSnapshot(PAGEABLE_HOST, 8, 8, 8, 0, 0, -1), std::invalid_argument);
  EXPECT_THROW(MaterializationSnapshot(PAGEABLE_HOST, 8, 4, 7, 0, 0, 0), std::invalid_argument);
  EXPECT_THROW(MaterializationSnapshot(PAGEABLE_HOST, 4, 9, 8, 0, 0, 0), std::invalid_argument);
  EXPECT_TRUE(MaterializationSnapshot(PAGEABLE_HOST, 8, 8, 8, 0, 0, 1).is_protected());
}

TEST(Records, ValueSnapshotRules) {
  EXPECT_NO_THROW(ResidencyValueSnapshot(handle, spec, {materialization()}, false, std::nullopt, false));
  EXPECT_NO_THROW(ResidencyValueSnapshot(handle, spec, {}, true, PAGEABLE_HOST, false));
  EXPECT_THROW(ResidencyValueSnapshot(handle, spec, {materialization(), materialization()}, false, std::nullopt, false),
               std::invalid_argument);
  EXPECT_THROW(ResidencyValueSnapshot(handle, spec, {}, true, std::nullopt, false), std::invalid_argument);
  EXPECT_THROW(ResidencyValueSnapshot(handle, spec, {}, false, PAGEABLE_HOST, false), std::invalid_argument);
  EXPECT_THROW(ResidencyValueSnapshot(handle, spec, {materialization()}, false, std::nullopt, true),
               std::invalid_argument);
  EXPECT_THROW(ResidencyValueSnapshot(handle, spec, {}, true, PAGEABLE_HOST, true), std::invalid_argument);
  EXPECT_NO_THROW(ResidencyValueSnapshot(handle, spec, {}, false, std::nullopt, true));
}

// A value's materializations live in an InlineVector: copies are deep
// whether the elements are inline or spilled, and equality is by element.
TEST(Records, ValueSnapshotMaterializationsCopyDeepAndCompareByElement) {
  using Materializations = InlineVector<MaterializationSnapshot, 1>;
  const MaterializationSnapshot host = materialization(PAGEABLE_HOST);
  const MaterializationSnapshot pinned = materialization(PINNED_HOST);
  const MaterializationSnapshot device = materialization(cuda_location(0));
  Materializations many{host, pinned, device};
  ASSERT_TRUE(many.spilled());
  Materializations copy(many);
  EXPECT_TRUE(copy.spilled());
  EXPECT_NE(copy.data(), many.data());
  EXPECT_EQ(copy, many);
  copy[1].use_count = 4;  // a copy owns its elements
  EXPECT_EQ(many[1].use_count, 0);
  EXPECT_FALSE(copy == many);
  copy = many;
  EXPECT_EQ(copy, many);
  const Materializations& same = copy;
  copy = same;  // self-assignment keeps the elements
  EXPECT_EQ(copy, many);

  // Equality ignores where the elements live, and sizes must match.
  Materializations one{host};
  Materializations roomy;
  roomy.reserve(4);
  roomy.push_back(host);
  EXPECT_TRUE(roomy.spilled());
  EXPECT_FALSE(one.spilled());
  EXPECT_EQ(roomy, one);
  EXPECT_FALSE(one == many);
  EXPECT_FALSE(Materializations{} == one);

  // A std::vector converts, copied or moved, keeping order.
  const std::vector<MaterializationSnapshot> listed{host, pinned, device};
  EXPECT_EQ(Materializations(listed), many);
  EXPECT_EQ(Materializations(std::vector<MaterializationSnapshot>(listed)), many);
  EXPECT_EQ(many.to_vector(), listed);
  const std::vector<MaterializationSnapshot> converted = many;  // and back, implicitly
  EXPECT_EQ(converted, listed);

  // A record copied out of a snapshot outlives it.
  std::optional<ResidencyValueSnapshot> kept;
  {
    const ResidencyValueSnapshot value(handle, spec, listed, false, std::nullopt, false);
    kept = value;
    EXPECT_EQ(*kept, value);
  }
  ASSERT_EQ(kept->materializations.size(), 3u);
  EXPECT_EQ(kept->materializations[2].location, cuda_location(0));
  EXPECT_EQ(kept->at(PINNED_HOST), &kept->materializations[1]);
}

TEST(Records, ReservationSnapshotRules) {
  EXPECT_NO_THROW(ResidencyReservationSnapshot(PINNED_HOST, 0, "x"));
  EXPECT_THROW(ResidencyReservationSnapshot(PINNED_HOST, -1, "x"), std::invalid_argument);
  EXPECT_THROW(ResidencyReservationSnapshot(PINNED_HOST, 1, " "), std::invalid_argument);
}

TEST(Records, LocationSnapshotRules) {
  EXPECT_NO_THROW(location_snapshot(100, 40, 10, 50, 40, 60));
  EXPECT_NO_THROW(location_snapshot(std::nullopt, 40, 10, std::nullopt, 40, 50));
  // remaining must equal budget - used - reserved
  EXPECT_THROW(location_snapshot(100, 40, 10, 49, 40, 60), std::invalid_argument);
  // unbudgeted locations have no remaining
  EXPECT_THROW(location_snapshot(std::nullopt, 40, 10, 50, 40, 60), std::invalid_argument);
  // budgeted locations need remaining
  EXPECT_THROW(location_snapshot(100, 40, 10, std::nullopt, 40, 60), std::invalid_argument);
  // charges over budget
  EXPECT_THROW(location_snapshot(40, 40, 10, -10, 40, 60), std::invalid_argument);
  // peaks
  EXPECT_THROW(location_snapshot(100, 40, 0, 60, 39, 40), std::invalid_argument);
  EXPECT_THROW(location_snapshot(100, 40, 10, 50, 40, 49), std::invalid_argument);
  EXPECT_THROW(location_snapshot(100, 40, 10, 50, 40, 101), std::invalid_argument);
  EXPECT_THROW(ResidencyLocationSnapshot(PAGEABLE_HOST, std::nullopt, 0, 0, std::nullopt, 0, 0, -1, 0, 0, 0, 0,
                                         std::nullopt, std::nullopt),
               std::invalid_argument);
  EXPECT_THROW(ResidencyLocationSnapshot(PAGEABLE_HOST, std::nullopt, 0, 0, std::nullopt, 0, 0, 0, 0, 0, 0, 0, -5,
                                         std::nullopt),
               std::invalid_argument);
}

TEST(Records, SnapshotRules) {
  const ResidencyValueSnapshot value(handle, spec, {}, true, PAGEABLE_HOST, false);
  const auto location = location_snapshot(std::nullopt, 0, 0, std::nullopt, 0, 0);
  EXPECT_NO_THROW(ResidencySnapshot("m", 3, {value}, {location}, {}, 10));
  EXPECT_THROW(ResidencySnapshot(" ", 3, {value}, {location}, {}, 10), std::invalid_argument);
  EXPECT_THROW(ResidencySnapshot("m", 3, {value, value}, {location}, {}, 10), std::invalid_argument);
  EXPECT_THROW(ResidencySnapshot("m", 3, {value}, {location, location}, {}, 10), std::invalid_argument);
  EXPECT_THROW(ResidencySnapshot("m", 3, {value}, {location}, {}, -1), std::invalid_argument);
  const ResidencySnapshot snapshot("m", 3, {value}, {location}, {}, 10);
  EXPECT_NE(snapshot.value(handle), nullptr);
  EXPECT_EQ(snapshot.location(PINNED_HOST), nullptr);
}

TEST(Records, TransitionReportRules) {
  EXPECT_NO_THROW(ResidencyTransitionReport(action, false, PAGEABLE_HOST, cuda_location(0), 8, 8, 1, 2,
                                            c10::Device(c10::DeviceType::CUDA, 0), 1, 2, 3, 4, "why"));
  EXPECT_THROW(ResidencyTransitionReport(action, false, {}, {}, 8, 4, 1, 2), std::invalid_argument);
  EXPECT_THROW(ResidencyTransitionReport(action, false, {}, {}, 8, 8, 3, 2), std::invalid_argument);
  EXPECT_THROW(ResidencyTransitionReport(action, false, {}, {}, 8, 8, -1, 2), std::invalid_argument);
  EXPECT_THROW(ResidencyTransitionReport(action, false, {}, {}, 8, 8, 1, 2, c10::Device(c10::DeviceType::CPU)),
               std::invalid_argument);
  EXPECT_THROW(ResidencyTransitionReport(action, false, {}, {}, 8, 8, 1, 2, c10::Device(c10::DeviceType::CUDA)),
               std::invalid_argument);
  EXPECT_THROW(ResidencyTransitionReport(action, false, {}, {}, 8, 8, 1, 2, std::nullopt, -1), std::invalid_argument);
  EXPECT_THROW(ResidencyTransitionReport(action, false, {}, {}, 8, 8, 1, 2, std::nullopt, {}, {}, {}, {}, ""),
               std::invalid_argument);
}

TEST(Records, ExplanationRules) {
  EXPECT_NO_THROW(ResidencyActionExplanation(action, true, false, {}, PAGEABLE_HOST, 8, 8));
  EXPECT_THROW(ResidencyActionExplanation(action, true, false, {}, {}, 8, 7), std::invalid_argument);
  EXPECT_THROW(ResidencyActionExplanation(action, true, false, {}, {}, -1, 7), std::invalid_argument);
  EXPECT_THROW(ResidencyActionExplanation(action, false, false, {}, {}, 0, 0, "\n"), std::invalid_argument);
  const std::vector<std::pair<ResidencyLocation, std::int64_t>> peaks{{PAGEABLE_HOST, 8}};
  EXPECT_NO_THROW(ResidencyPlanExplanation("p", {}, {}, peaks, true));
  EXPECT_THROW(ResidencyPlanExplanation("", {}, {}, peaks, true), std::invalid_argument);
  EXPECT_THROW(ResidencyPlanExplanation("p", {}, {}, {{PAGEABLE_HOST, 8}, {PAGEABLE_HOST, 9}}, true),
               std::invalid_argument);
  EXPECT_THROW(ResidencyPlanExplanation("p", {}, {}, {{PAGEABLE_HOST, -8}}, true), std::invalid_argument);
  EXPECT_EQ(ResidencyPlanExplanation("p", {}, {}, peaks, true).predicted_peak(PAGEABLE_HOST), 8);
}

TEST(Records, PlanReportRules) {
  EXPECT_NO_THROW(ResidencyPlanReport("p", {}, 1, 1));
  EXPECT_THROW(ResidencyPlanReport("", {}, 1, 1), std::invalid_argument);
  EXPECT_THROW(ResidencyPlanReport("p", {}, 2, 1), std::invalid_argument);
  EXPECT_THROW(ResidencyPlanReport("p", {}, -2, 1), std::invalid_argument);
}

}  // namespace
}  // namespace fhelium::residency
