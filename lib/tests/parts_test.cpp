// The manager's parts on their own: the transition rules (decided from a
// hand-built view of one value) and the location ledger's shadow for dry runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "detail/ledger.hpp"
#include "detail/transition_rules.hpp"
#include "fhelium/residency/errors.hpp"

namespace fhelium::residency::detail {
namespace {

const ResidencyLocation CUDA0 = cuda_location(0);
const ResidencyLocation CUDA1 = cuda_location(1);

// A value's state written out: where it is (insertion order) and what is protected.
struct FakeView {
  ValueRecord value;
  std::vector<ResidencyLocation> locations;
  std::set<ResidencyLocation> protected_places;

  const ValueRecord& record() const { return value; }
  bool resident(const ResidencyLocation& location) const {
    return std::find(locations.begin(), locations.end(), location) != locations.end();
  }
  std::size_t count() const { return locations.size(); }
  std::optional<ResidencyLocation> first(const std::optional<ResidencyLocation>& exclude) const {
    return smallest_location(locations, exclude, [](const ResidencyLocation& at) { return at; });
  }
  bool protected_at(const ResidencyLocation& location) const {
    return resident(location) && protected_places.count(location) != 0;
  }
  std::vector<ResidencyLocation> protected_locations() const {
    return protected_locations_of(
        locations, [](const ResidencyLocation& at) { return at; },
        [this](const ResidencyLocation& at) { return protected_at(at); });
  }
};

FakeView view(ReplicaMode mode, bool with_source, std::vector<ResidencyLocation> locations,
              std::set<ResidencyLocation> protected_places = {}) {
  ValueRecord record{ResidencyHandle{"m", "1", "T"},
                     ResidencyValueSpec("T", 64, 64, mode,
                                        with_source ? Recoverability::reconstructible : Recoverability::must_preserve),
                     nullptr, std::nullopt, {}, false};
  if (with_source) {
    record.source = make_source([]() -> ResidentValue { throw std::logic_error("the rules never load"); });
    record.source_location = PINNED_HOST;
  }
  return FakeView{std::move(record), std::move(locations), std::move(protected_places)};
}

const ResidencyHandle handle{"m", "1", "T"};

TEST(TransitionRules, EnsureCopiesFromTheSmallestLocationOrReconstructs) {
  auto copy = decide_transition(EnsureResident{handle, CUDA1}, view(ReplicaMode::replicable, false, {CUDA0, PINNED_HOST}));
  EXPECT_EQ(copy.source, PINNED_HOST);
  EXPECT_EQ(copy.destination, CUDA1);
  EXPECT_TRUE(copy.install);
  EXPECT_FALSE(copy.load);
  EXPECT_FALSE(copy.remove);
  auto load = decide_transition(EnsureResident{handle, CUDA0}, view(ReplicaMode::replicable, true, {}));
  EXPECT_TRUE(load.load && load.install);
  EXPECT_EQ(load.source, PINNED_HOST);
  auto none = decide_transition(EnsureResident{handle, CUDA0}, view(ReplicaMode::replicable, false, {}));
  EXPECT_EQ(none.refusal, Refusal::no_source);
  EXPECT_EQ(refusal_reason(none, {}), "value has no materialization or source");
  auto already = decide_transition(EnsureResident{handle, CUDA0}, view(ReplicaMode::exclusive, false, {CUDA0}));
  EXPECT_STREQ(already.no_op, "destination already resident");
  auto exclusive = decide_transition(EnsureResident{handle, CUDA0}, view(ReplicaMode::exclusive, false, {PINNED_HOST}));
  EXPECT_EQ(exclusive.refusal, Refusal::exclusive_replica);
}

TEST(TransitionRules, MoveChoosesRemovesAndRespectsProtection) {
  auto move = decide_transition(MoveResident{handle, CUDA0, std::nullopt},
                                view(ReplicaMode::exclusive, false, {CUDA1, PINNED_HOST}));
  EXPECT_EQ(move.source, PINNED_HOST);
  EXPECT_TRUE(move.install && move.exclusive_transition);
  EXPECT_EQ(move.remove, PINNED_HOST);
  // Onto an existing replica: only the source goes.
  auto onto = decide_transition(MoveResident{handle, CUDA0, CUDA1},
                                view(ReplicaMode::replicable, false, {CUDA0, CUDA1}));
  EXPECT_FALSE(onto.install);
  EXPECT_EQ(onto.remove, CUDA1);
  // An explicit source equal to the destination is reported; an implicit one is not.
  auto same = decide_transition(MoveResident{handle, CUDA0, CUDA0}, view(ReplicaMode::exclusive, false, {CUDA0}, {CUDA0}));
  EXPECT_TRUE(same.changes_nothing());
  EXPECT_EQ(same.source, CUDA0);
  auto implicit = decide_transition(MoveResident{handle, CUDA0, std::nullopt}, view(ReplicaMode::exclusive, false, {CUDA0}));
  EXPECT_TRUE(implicit.changes_nothing());
  EXPECT_FALSE(implicit.source);
  auto held = decide_transition(MoveResident{handle, CUDA0, std::nullopt},
                                view(ReplicaMode::exclusive, false, {PINNED_HOST}, {PINNED_HOST}));
  EXPECT_EQ(held.refusal, Refusal::source_protected);
  EXPECT_EQ(refusal_reason(held, {}), "source pinned-host is protected");
  auto absent = decide_transition(MoveResident{handle, CUDA0, CUDA1}, view(ReplicaMode::exclusive, false, {PINNED_HOST}));
  EXPECT_EQ(absent.refusal, Refusal::explicit_source_absent);
  EXPECT_EQ(absent.source, CUDA1);
  auto reconstruct = decide_transition(MoveResident{handle, CUDA0, std::nullopt}, view(ReplicaMode::exclusive, true, {}));
  EXPECT_TRUE(reconstruct.load && reconstruct.install);
  EXPECT_EQ(reconstruct.source, PINNED_HOST);
  EXPECT_FALSE(reconstruct.remove);
}

TEST(TransitionRules, DropAndDiscardKeepProtectedAndPreservedValues) {
  auto last = decide_transition(DropResident{handle, CUDA0}, view(ReplicaMode::exclusive, false, {CUDA0}));
  EXPECT_EQ(last.refusal, Refusal::final_must_preserve);
  auto sourced = decide_transition(DropResident{handle, CUDA0}, view(ReplicaMode::exclusive, true, {CUDA0}));
  EXPECT_EQ(sourced.remove, CUDA0);
  auto absent = decide_transition(DropResident{handle, CUDA1}, view(ReplicaMode::exclusive, true, {CUDA0}));
  EXPECT_STREQ(absent.no_op, "materialization already absent");
  auto busy = decide_transition(DropResident{handle, CUDA0},
                                view(ReplicaMode::replicable, false, {CUDA0, CUDA1}, {CUDA0}));
  EXPECT_EQ(busy.refusal, Refusal::target_protected);
  EXPECT_EQ(busy.refused_at, CUDA0);
  const auto protected_value = view(ReplicaMode::replicable, false, {CUDA1, PINNED_HOST, CUDA0}, {CUDA0, CUDA1});
  auto discard = decide_transition(DiscardValue{handle}, protected_value);
  EXPECT_EQ(discard.refusal, Refusal::discard_protected);
  EXPECT_EQ(discard.refused_at, CUDA1);  // the first in insertion order
  EXPECT_EQ(refusal_reason(discard, protected_value.protected_locations()),
            "discarded value has protected locations [cuda:1, cuda:0]");
  EXPECT_TRUE(decide_transition(DiscardValue{handle}, view(ReplicaMode::replicable, false, {CUDA0})).discard);
}

TEST(LocationLedger, ShadowStartsPeaksAtTheCurrentChargeAndKeepsTheRealLedger) {
  LocationLedger ledger;
  ledger.add_budget(CUDA0, 100);
  ledger.add_used(CUDA0, 60);
  ledger.remove_used(CUDA0, 40);  // peak 60, charge 20
  LocationLedger shadow = ledger.shadow();
  EXPECT_EQ(shadow.find(CUDA0)->peak_charged_bytes, 20);
  shadow.add_reserved(CUDA0, 30);
  EXPECT_EQ(shadow.find(CUDA0)->peak_charged_bytes, 50);
  EXPECT_THROW(shadow.check_admission(CUDA0, 51), ResidencyBudgetError);
  shadow.note_refused_charge(CUDA0, 70);  // a refused dry-run charge still shows in the peak
  EXPECT_EQ(shadow.find(CUDA0)->peak_charged_bytes, 120);
  shadow.note_refused_charge(CUDA0, std::numeric_limits<std::int64_t>::max());  // unrepresentable: ignored
  EXPECT_EQ(shadow.find(CUDA0)->peak_charged_bytes, 120);
  EXPECT_EQ(ledger.find(CUDA0)->reserved_bytes, 0);
  EXPECT_EQ(ledger.find(CUDA0)->peak_charged_bytes, 60);
}

}  // namespace
}  // namespace fhelium::residency::detail
