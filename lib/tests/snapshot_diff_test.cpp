// diff(before, after): every kind of change a step can make, and nothing for
// identical state.
#include <gtest/gtest.h>

#include <algorithm>

#include "support.hpp"

namespace fhelium::residency {
namespace {

using testing::CUDA0;
using testing::make_fixture;
using testing::make_value;

bool has(const std::vector<SnapshotDifference>& changes, const std::string& path, const std::string& before,
         const std::string& after) {
  return std::find(changes.begin(), changes.end(), SnapshotDifference{path, before, after}) != changes.end();
}

TEST(SnapshotDiff, IdenticalStatesDifferInNothingButTime) {
  auto fixture = make_fixture({{CUDA0, 4096}});
  fixture.manager->adopt(make_value(16));
  const ResidencySnapshot first = fixture.manager->snapshot();
  fixture.runtime->advance(1000);
  EXPECT_TRUE(diff(first, fixture.manager->snapshot()).empty());
}

TEST(SnapshotDiff, NamesValuesMaterializationsLocationsReservationsAndVersion) {
  auto fixture = make_fixture({{CUDA0, 4096}});
  ResidencyManager& manager = *fixture.manager;
  const ResidencyHandle kept = manager.adopt(make_value(16), std::nullopt, ReplicaMode::replicable);
  const ResidencyHandle gone = manager.adopt(make_value(16, 2.0f));
  const ResidencySnapshot before = manager.snapshot();

  manager.ensure(kept, CUDA0);
  manager.discard(gone);
  ResidencyHold hold = manager.hold({kept}, CUDA0);
  ResidencyReservation reservation = manager.reserve(PINNED_HOST, 128, "workspace");
  const ResidencyHandle added = manager.adopt(make_value(8, 3.0f));
  const ResidencySnapshot after = manager.snapshot();
  const auto changes = diff(before, after);

  const std::string k = "/values/" + kept.handle_id;
  EXPECT_TRUE(has(changes, k + "/materializations/cuda:0", "absent", "64 B charged, uses 0, holds 1, pending 0"));
  EXPECT_TRUE(has(changes, "/values/" + gone.handle_id + "/discarded", "false", "true"));
  EXPECT_TRUE(has(changes, "/values/" + gone.handle_id + "/materializations/pageable-host",
                  "64 B charged, uses 0, holds 0, pending 0", "absent"));
  EXPECT_TRUE(has(changes, "/values/" + added.handle_id, "absent", "Blob, 32 B, 1 materialization(s)"));
  EXPECT_TRUE(has(changes, "/locations/cuda:0/used_bytes", "0", "64"));
  EXPECT_TRUE(has(changes, "/locations/cuda:0/hold_count", "0", "1"));
  EXPECT_TRUE(has(changes, "/locations/pinned-host", "absent", "registered"));
  EXPECT_TRUE(has(changes, "/reservations/pinned-host/workspace (128 B)", "0 held", "1 held"));
  EXPECT_TRUE(has(changes, "/state_version", std::to_string(before.state_version),
                  std::to_string(after.state_version)));
  EXPECT_EQ(describe(SnapshotDifference{"/locations/cuda:0/used_bytes", "0", "64"}),
            "/locations/cuda:0/used_bytes: 0 -> 64");

  // And back: released lifetimes show as the reverse changes.
  hold.release();
  reservation.release();
  const auto undone = diff(after, manager.snapshot());
  EXPECT_TRUE(has(undone, "/locations/cuda:0/hold_count", "1", "0"));
  EXPECT_TRUE(has(undone, "/reservations/pinned-host/workspace (128 B)", "1 held", "0 held"));
}

}  // namespace
}  // namespace fhelium::residency
