// The invariant checker flags each broken invariant by name, from snapshots
// built by hand to break exactly one rule at a time.
#include <gtest/gtest.h>

#include <limits>

#include "fhelium/harness/decision_checker.hpp"
#include "fhelium/harness/explain_checker.hpp"
#include "fhelium/harness/invariant_checker.hpp"
#include "fhelium/harness/verdict_checker.hpp"

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
  // MUST_PRESERVE with nothing; the detail quotes the handle id, for a replay to name
  EXPECT_EQ(check_once(ResidencySnapshot("m", 1, {value({})}, {}, {}, 5)), V{"must-preserve-kept"});
  {
    InvariantChecker checker;
    const auto violations = checker.check(ResidencySnapshot("m", 1, {value({})}, {}, {}, 5));
    ASSERT_EQ(violations.size(), 1u);
    EXPECT_EQ(violations.front().detail, "value '1' is MUST_PRESERVE and has no materialization");
  }
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


const ResidencyLocation CUDA0 = cuda_location(0);

ResidencyPlanExplanation explanation(bool feasible, std::int64_t cuda_peak) {
  return ResidencyPlanExplanation("p", {}, {}, {{PAGEABLE_HOST, 100}, {CUDA0, cuda_peak}}, feasible,
                                  feasible ? std::nullopt : std::optional<std::string>("no room"));
}

// A run of every action of `explained` that ended in `after`.
ExplainedRun whole_run(const ResidencyPlanExplanation& explained, const ResidencySnapshot& after) {
  ExplainedRun run;
  run.explanation = &explained;
  run.whole_plan = true;
  run.peaks_before = {{PAGEABLE_HOST, 100}, {CUDA0, 0}};
  run.after = &after;
  return run;
}

ResidencySnapshot ended_with(std::int64_t cuda_peak) {
  return ResidencySnapshot("m", 2, {},
                           {location(PAGEABLE_HOST, 100, 1, 100, 100), location(CUDA0, 200, 2, cuda_peak, cuda_peak)},
                           {}, 5);
}

TEST(ExplainChecker, AcceptsARunThatMatchesItsPrediction) {
  const auto explained = explanation(true, 300);
  const ResidencySnapshot after = ended_with(300);
  ExplainedRun run = whole_run(explained, after);
  EXPECT_TRUE(check_explained_run(run).empty());
  // A scope's entry may stay under the prediction.
  run.whole_plan = false;
  EXPECT_TRUE(check_explained_run(run).empty());
}

TEST(ExplainChecker, FlagsAFailedFeasiblePlanAndAWrongPeak) {
  const auto explained = explanation(true, 300);
  const ResidencySnapshot after = ended_with(400);
  ExplainedRun run = whole_run(explained, after);
  EXPECT_EQ(names(check_explained_run(run)), std::vector<std::string>{"predicted-peak"});
  run.whole_plan = false;  // above the bound, too
  EXPECT_EQ(names(check_explained_run(run)), std::vector<std::string>{"predicted-peak"});
  // Exact means exact: a whole plan that stays under its prediction is wrong as well.
  const auto generous = explanation(true, 500);
  run.explanation = &generous;
  run.whole_plan = true;
  EXPECT_EQ(names(check_explained_run(run)), std::vector<std::string>{"predicted-peak"});
  run.explanation = &explained;
  run.error_kind = "budget";
  run.error_message = "exceeds budget";
  const auto failed = check_explained_run(run);
  ASSERT_EQ(names(failed), std::vector<std::string>{"explain-execute"});
  EXPECT_NE(failed.front().detail.find("exceeds budget"), std::string::npos);
}

// A whole plan's run, or a primitive's checked against its action explained
// as a plan of its own, is held to explain's verdict both ways: refused by
// explain, it must fail too. A scope's entry is checked one way only.
TEST(ExplainChecker, AWholePlanOrPrimitiveExplainRefusedMustFail) {
  const auto infeasible = explanation(false, 300);
  const ResidencySnapshot after = ended_with(300);
  ExplainedRun run = whole_run(infeasible, after);
  const auto succeeded = check_explained_run(run);
  ASSERT_EQ(names(succeeded), std::vector<std::string>{"explain-execute"});
  EXPECT_NE(succeeded.front().detail.find("no room"), std::string::npos);
  EXPECT_NE(succeeded.front().detail.find("succeeded"), std::string::npos);
  run.error_kind = "budget";  // failing as explain said
  EXPECT_TRUE(check_explained_run(run).empty());
  run.error_kind.reset();
  run.faults_fired = true;  // a fault may have changed what it met
  EXPECT_TRUE(check_explained_run(run).empty());
  run.faults_fired = false;
  run.device_refused = true;
  EXPECT_TRUE(check_explained_run(run).empty());
  run.device_refused = false;
  run.whole_plan = false;
  EXPECT_TRUE(check_explained_run(run).empty());
}

TEST(ExplainChecker, IgnoresFaultedRunsInfeasiblePlansAndRefusals) {
  const auto explained = explanation(true, 300);
  const auto infeasible = explanation(false, 300);
  const ResidencySnapshot after("m", 2, {}, {location(CUDA0, 200, 2, 900, 900)}, {}, 5);
  ExplainedRun run;
  run.explanation = &explained;
  run.whole_plan = true;
  run.after = &after;
  run.error_kind = "budget";
  run.faults_fired = true;
  EXPECT_TRUE(check_explained_run(run).empty());
  run.faults_fired = false;
  run.explanation = &infeasible;
  EXPECT_TRUE(check_explained_run(run).empty());
  run.explanation = &explained;
  for (const char* refusal : {"stale", "invalid_argument"}) {
    run.error_kind = refusal;
    EXPECT_TRUE(check_explained_run(run).empty()) << refusal;
  }
  // The device refusing an allocation (capacity, no pinned memory) is not a
  // prediction explain makes: budgets are.
  run.error_kind = "plan_execution";
  EXPECT_EQ(names(check_explained_run(run)), std::vector<std::string>{"explain-execute"});
  run.device_refused = true;
  EXPECT_TRUE(check_explained_run(run).empty());
  run.after = nullptr;
  EXPECT_THROW(check_explained_run(run), std::invalid_argument);
}

TEST(ExplainChecker, FlagsAWholePlanWhoseTransitionsAreNotTheExplainedOnes) {
  const ResidencyHandle handle{"m", "1", "Blob"};
  const ResidencyAction copy = EnsureResident{handle, CUDA0};
  const ResidencyAction again = EnsureResident{handle, CUDA0};
  const ResidencyPlanExplanation explained(
      "p",
      {ResidencyActionExplanation(copy, true, false, PAGEABLE_HOST, CUDA0, 100, 100),
       ResidencyActionExplanation(again, true, true, std::nullopt, CUDA0, 100, 100, "destination already resident")},
      {}, {{PAGEABLE_HOST, 100}, {CUDA0, 300}}, true, std::nullopt);
  const ResidencySnapshot after = ended_with(300);
  const auto report = [&](const ResidencyAction& action, bool no_op, std::optional<ResidencyLocation> source) {
    return ResidencyTransitionReport(action, no_op, source, CUDA0, 100, 100, 1, 2);
  };
  std::vector<ResidencyTransitionReport> ran{report(copy, false, PAGEABLE_HOST), report(again, true, std::nullopt)};
  ExplainedRun run = whole_run(explained, after);
  run.transitions = &ran;
  EXPECT_TRUE(check_explained_run(run).empty());
  // Copied from elsewhere than explained.
  ran[0] = report(copy, false, PINNED_HOST);
  auto violations = check_explained_run(run);
  ASSERT_EQ(names(violations), std::vector<std::string>{"explained-transition"});
  EXPECT_NE(violations.front().detail.find("action 0: explained pageable-host -> cuda:0, ran pinned-host -> cuda:0"),
            std::string::npos)
      << violations.front().detail;
  // A no-op that did something.
  ran[0] = report(copy, false, PAGEABLE_HOST);
  ran[1] = report(again, false, PAGEABLE_HOST);
  EXPECT_EQ(names(check_explained_run(run)), std::vector<std::string>{"explained-transition"});
  // Fewer transitions than explained actions.
  ran.pop_back();
  EXPECT_EQ(names(check_explained_run(run)), std::vector<std::string>{"explained-transition"});
  // A scope's entry is not held to it.
  run.whole_plan = false;
  EXPECT_TRUE(check_explained_run(run).empty());
}

TEST(DecisionChecker, ReadOnlyIgnoresAllocatorTelemetryButNotAccounting) {
  const ResidencySnapshot before("m", 3, {value({at(CUDA0)})}, {location(CUDA0, 100)}, {}, 5);
  // The allocator sampled differently (or a fault failed the sampling): not a change of state.
  ResidencyLocationSnapshot sampled = location(CUDA0, 100);
  sampled.allocator_allocated_bytes = 4096;
  sampled.allocator_reserved_bytes = 8192;
  EXPECT_TRUE(check_unchanged(before, ResidencySnapshot("m", 3, {value({at(CUDA0)})}, {sampled}, {}, 5)).empty());
  // The manager's own accounting is.
  const auto changed = check_unchanged(before, ResidencySnapshot("m", 3, {value({at(CUDA0)})}, {location(CUDA0, 100, 1, 150)}, {}, 5));
  ASSERT_EQ(names(changed), std::vector<std::string>{"decide-read-only"});
  EXPECT_NE(changed.front().detail.find("cuda:0"), std::string::npos) << changed.front().detail;
  EXPECT_EQ(names(check_unchanged(before, ResidencySnapshot("m", 3, {value({at(CUDA0)})}, {}, {}, 5))),
            std::vector<std::string>{"decide-read-only"});
}

// Deciding observes the manager, and observing retires leases whose events
// completed: that one change is allowed, and only in its exact shape.
TEST(DecisionChecker, ReadOnlyAllowsOnlyTheRetiringOfCompletedLeases) {
  const auto state = [](std::uint64_t version, std::int64_t pending, std::int64_t location_pending, std::int64_t used = 100) {
    ResidencyLocationSnapshot where = location(CUDA0, used);
    where.pending_event_count = location_pending;
    return ResidencySnapshot("m", version, {value({MaterializationSnapshot(CUDA0, 100, 100, 100, 0, 0, pending)})},
                             {where}, {}, 5);
  };
  using V = std::vector<std::string>;
  const ResidencySnapshot before = state(7, 2, 2);
  EXPECT_TRUE(check_unchanged(before, before).empty());
  // One lease retired, or both at once: each bumps the version once.
  EXPECT_TRUE(check_unchanged(before, state(8, 1, 1)).empty());
  EXPECT_TRUE(check_unchanged(before, state(9, 0, 0)).empty());
  // A lease takes one from each count it covers: two from one count are two leases.
  EXPECT_EQ(names(check_unchanged(before, state(8, 0, 0))), V{"decide-read-only"});
  // The version moved by more leases than there were events to retire.
  EXPECT_EQ(names(check_unchanged(before, state(10, 0, 0))), V{"decide-read-only"});
  // The version moved with nothing retired.
  EXPECT_EQ(names(check_unchanged(before, state(8, 2, 2))), V{"decide-read-only"});
  // Events retired without a version step.
  EXPECT_EQ(names(check_unchanged(before, state(7, 1, 1))), V{"decide-read-only"});
  // A pending count that rose is no reap.
  EXPECT_EQ(names(check_unchanged(state(7, 1, 1), state(7, 2, 2))), (V{"decide-read-only", "decide-read-only"}));
  // A reap with any other change is still flagged, naming what changed.
  const auto changed = check_unchanged(before, state(8, 1, 1, 150));
  ASSERT_EQ(names(changed), V{"decide-read-only"});
  EXPECT_NE(changed.front().detail.find("location accounting changed at cuda:0"), std::string::npos)
      << changed.front().detail;
}

// Lifetime verdicts follow from the state before the call: a value that is
// there is leased and held, one that is not decides the error in order, and a
// reservation is granted exactly up to the remaining budget.
TEST(VerdictChecker, LifetimeCallsAreGrantedAsTheStateBeforeSays) {
  const ResidencyHandle gone{"m", "2", "T"};
  const ResidencyHandle foreign{"other", "1", "T"};
  ResidencyLocationSnapshot budgeted(PAGEABLE_HOST, 1000, 100, 200, 700, 100, 300, 1, 1, 0, 0, 0, std::nullopt,
                                     std::nullopt);
  const ResidencySnapshot before("m", 3,
                                 {value({at(PAGEABLE_HOST)}),
                                  ResidencyValueSnapshot(gone, exclusive, {}, false, std::nullopt, true)},
                                 {budgeted, location(PINNED_HOST, 0, 0)}, {ResidencyReservationSnapshot(PAGEABLE_HOST, 200, "r")}, 5);
  using V = std::vector<std::string>;
  const auto judge = [&](LifetimeCall::Kind kind, std::vector<ResidencyHandle> handles, ResidencyLocation where,
                         std::optional<std::string> error, std::int64_t bytes = 0) {
    LifetimeCall call;
    call.kind = kind;
    call.handles = std::move(handles);
    call.location = where;
    call.bytes = bytes;
    call.error_kind = std::move(error);
    return check_lifetime_verdict(before, call);
  };
  const auto acquire = LifetimeCall::Kind::acquire;
  const auto hold = LifetimeCall::Kind::hold;
  const auto reserve = LifetimeCall::Kind::reserve;
  EXPECT_TRUE(judge(acquire, {handle}, PAGEABLE_HOST, std::nullopt).empty());
  EXPECT_EQ(names(judge(acquire, {handle}, PAGEABLE_HOST, "unavailable")), V{"lifetime-verdict"});
  EXPECT_TRUE(judge(hold, {handle}, PINNED_HOST, "unavailable").empty());
  const auto granted = judge(hold, {handle}, PINNED_HOST, std::nullopt);
  ASSERT_EQ(names(granted), V{"lifetime-verdict"});
  EXPECT_NE(granted.front().detail.find("should fail with unavailable"), std::string::npos) << granted.front().detail;
  // The first handle that is not there decides: discarded or foreign is a handle error.
  EXPECT_TRUE(judge(acquire, {handle, gone}, PAGEABLE_HOST, "handle").empty());
  EXPECT_TRUE(judge(acquire, {foreign, handle}, PAGEABLE_HOST, "handle").empty());
  EXPECT_EQ(names(judge(acquire, {gone}, PAGEABLE_HOST, "unavailable")), V{"lifetime-verdict"});
  EXPECT_TRUE(judge(hold, {handle, gone}, PINNED_HOST, "unavailable").empty());
  // Errors the state does not decide are not judged.
  EXPECT_TRUE(judge(acquire, {handle}, PAGEABLE_HOST, "invalid_argument").empty());
  EXPECT_TRUE(judge(hold, {gone}, PAGEABLE_HOST, "closed").empty());
  // 700 bytes of budget remain: 700 fit, 701 do not.
  EXPECT_TRUE(judge(reserve, {}, PAGEABLE_HOST, std::nullopt, 700).empty());
  EXPECT_EQ(names(judge(reserve, {}, PAGEABLE_HOST, "budget", 700)), V{"lifetime-verdict"});
  EXPECT_TRUE(judge(reserve, {}, PAGEABLE_HOST, "budget", 701).empty());
  const auto over = judge(reserve, {}, PAGEABLE_HOST, std::nullopt, 701);
  ASSERT_EQ(names(over), V{"lifetime-verdict"});
  EXPECT_NE(over.front().detail.find("700 bytes of budget remain"), std::string::npos) << over.front().detail;
  // Without a budget only INT64_MAX bounds the charge, registered or not.
  const std::int64_t largest = std::numeric_limits<std::int64_t>::max();
  EXPECT_TRUE(judge(reserve, {}, PINNED_HOST, std::nullopt, largest).empty());
  EXPECT_TRUE(judge(reserve, {}, CUDA0, std::nullopt, largest).empty());
  EXPECT_EQ(names(judge(reserve, {}, CUDA0, "budget", largest)), V{"lifetime-verdict"});
}

// A budget refusal must report the state it met: the location's budget
// (INT64_MAX without one), used and reserved bytes, and a request that does
// not fit them.
TEST(VerdictChecker, BudgetRefusalsReportTheStateBefore) {
  ResidencyLocationSnapshot budgeted(PAGEABLE_HOST, 1000, 100, 200, 700, 100, 300, 1, 1, 0, 0, 0, std::nullopt,
                                     std::nullopt);
  const ResidencySnapshot before("m", 3, {value({at(PAGEABLE_HOST)})}, {budgeted, location(PINNED_HOST, 50, 0)},
                                 {ResidencyReservationSnapshot(PAGEABLE_HOST, 200, "r")}, 5);
  using V = std::vector<std::string>;
  const std::int64_t largest = std::numeric_limits<std::int64_t>::max();
  EXPECT_TRUE(check_budget_refusal(before, {PAGEABLE_HOST, 1000, 100, 200, 701}).empty());
  EXPECT_TRUE(check_budget_refusal(before, {PAGEABLE_HOST, 1000, 100, 200, 701}, 701).empty());
  EXPECT_EQ(names(check_budget_refusal(before, {PAGEABLE_HOST, 1000, 100, 200, 701}, 702)), V{"budget-refusal"});
  const auto fits = check_budget_refusal(before, {PAGEABLE_HOST, 1000, 100, 200, 700});
  ASSERT_EQ(names(fits), V{"budget-refusal"});
  EXPECT_NE(fits.front().detail.find("700 fit there"), std::string::npos) << fits.front().detail;
  const auto figures = check_budget_refusal(before, {PAGEABLE_HOST, 1000, 100, 0, 901});
  ASSERT_EQ(names(figures), V{"budget-refusal"});
  EXPECT_NE(figures.front().detail.find("reserved_bytes 0, the state before it has 200"), std::string::npos)
      << figures.front().detail;
  EXPECT_EQ(names(check_budget_refusal(before, {PAGEABLE_HOST, 900, 100, 200, 701})), V{"budget-refusal"});
  // Without a budget only a charge past INT64_MAX is refused, registered or not.
  EXPECT_TRUE(check_budget_refusal(before, {PINNED_HOST, largest, 50, 0, largest}).empty());
  EXPECT_EQ(names(check_budget_refusal(before, {PINNED_HOST, largest, 50, 0, largest - 50})), V{"budget-refusal"});
  EXPECT_EQ(names(check_budget_refusal(before, {CUDA0, largest, 0, 0, largest})), V{"budget-refusal"});
}

}  // namespace
}  // namespace fhelium::harness
