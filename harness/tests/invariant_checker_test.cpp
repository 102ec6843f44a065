// The invariant checker flags each broken invariant by name, from snapshots
// built by hand to break exactly one rule at a time.
#include <gtest/gtest.h>

#include "fhelium/harness/invariant_checker.hpp"

namespace fhelium::harness {
namespace {

using namespace residency;

const ResidencyHandle handle{"m", "1", "T"};
const ResidencyValueSpec exclusive("T", 100, 100, ReplicaMode::exclusive, Recoverability::must_preserve);

ResidencyLocationSnapshot location(ResidencyLocation where, std::int64_t used, std::int64_t values = 1,
                                   std::int64_t peak_used = -1, std::int64_t peak_charged = -1,
                                   std::int64_t reserved = 0) {
  peak_used = peak_used < 0 ? used : peak_used;
  peak_charged = peak_charged < 0 ? std::max(peak_used, used + reserved) : peak_charged;
  return ResidencyLocationSnapshot(where, std::nullopt, used, reserved, std::nullopt, peak_used, peak_charged, values,
                                   0, 0, 0, 0, std::nullopt, std::nullopt);
}

ResidencyValueSnapshot value(std::vector<MaterializationSnapshot> items, const ResidencyValueSpec& spec = exclusive,
                             bool discarded = false) {
  return ResidencyValueSnapshot(handle, spec, std::move(items), false, std::nullopt, discarded);
}

MaterializationSnapshot at(ResidencyLocation where, std::int64_t charged = 100) {
  return MaterializationSnapshot(where, 100, 100, charged, 0, 0, 0);
}

std::vector<std::string> names(const std::vector<InvariantViolation>& violations) {
  std::vector<std::string> result;
  for (const auto& violation : violations) result.push_back(violation.invariant);
  return result;
}

TEST(InvariantChecker, AcceptsAConsistentSnapshot) {
  InvariantChecker checker;
  const ResidencySnapshot snapshot("m", 1, {value({at(PAGEABLE_HOST)})}, {location(PAGEABLE_HOST, 100)}, {}, 5);
  EXPECT_TRUE(checker.check(snapshot).empty());
  EXPECT_GT(checker.checks(), 5);
}

TEST(InvariantChecker, FlagsEachBrokenRule) {
  const auto check_once = [](const ResidencySnapshot& snapshot) {
    InvariantChecker checker;
    return names(checker.check(snapshot));
  };
  using V = std::vector<std::string>;
  // used bytes disagree with the materializations
  EXPECT_EQ(check_once(ResidencySnapshot("m", 1, {value({at(PAGEABLE_HOST)})}, {location(PAGEABLE_HOST, 99)}, {}, 5)),
            V{"used-sum"});
  // a reservation the location does not count
  EXPECT_EQ(check_once(ResidencySnapshot("m", 1, {}, {location(PAGEABLE_HOST, 0, 0)},
                                         {ResidencyReservationSnapshot(PAGEABLE_HOST, 8, "r")}, 5)),
            (V{"reserved-sum", "counts"}));
  // value count off
  EXPECT_EQ(check_once(ResidencySnapshot("m", 1, {value({at(PAGEABLE_HOST)})}, {location(PAGEABLE_HOST, 100, 2)}, {}, 5)),
            V{"counts"});
  // EXCLUSIVE with two materializations
  EXPECT_EQ(check_once(ResidencySnapshot("m", 1, {value({at(PAGEABLE_HOST), at(PINNED_HOST)})},
                                         {location(PAGEABLE_HOST, 100), location(PINNED_HOST, 100)}, {}, 5)),
            V{"exclusive-single"});
  // MUST_PRESERVE with nothing
  EXPECT_EQ(check_once(ResidencySnapshot("m", 1, {value({})}, {}, {}, 5)), V{"must-preserve-kept"});
  // charge that does not match the spec
  EXPECT_EQ(check_once(ResidencySnapshot("m", 1, {value({at(PAGEABLE_HOST, 120)})}, {location(PAGEABLE_HOST, 120)}, {}, 5)),
            V{"charge-covers"});
  // a materialization at an unregistered location
  EXPECT_EQ(check_once(ResidencySnapshot("m", 1, {value({at(PINNED_HOST)})}, {}, {}, 5)), V{"locations-registered"});
}

TEST(InvariantChecker, FlagsStateMovingBackwards) {
  InvariantChecker checker;
  EXPECT_TRUE(checker.check(ResidencySnapshot("m", 5, {value({at(PAGEABLE_HOST)})},
                                              {location(PAGEABLE_HOST, 100, 1, 200, 300)}, {}, 50))
                  .empty());
  const auto violations = names(checker.check(
      ResidencySnapshot("m", 4, {value({at(PAGEABLE_HOST)})}, {location(PAGEABLE_HOST, 100, 1, 150, 300)}, {}, 40)));
  EXPECT_EQ(violations, (std::vector<std::string>{"peaks-monotonic", "version-monotonic", "clock-monotonic"}));
}

}  // namespace
}  // namespace fhelium::harness
