// The replay engine: verdicts, located failures, determinism, canaries,
// skips, and the reports built from results.
#include <gtest/gtest.h>

#include <ATen/ops/zeros.h>

#include "fhelium/harness/contents.hpp"
#include "fhelium/harness/replay.hpp"
#include "fhelium/harness/reporters.hpp"
#include "fhelium/harness/scenario_loader.hpp"

namespace fhelium::harness {
namespace {

const char* const streaming = R"(
name: streaming
manager: {budgets: {cuda:0: 8KiB}}
faults:
  - {name: coin, operation: copy, probability: 0.5}
values:
  a: {bytes: 4KiB, adopt_at: pageable-host}
  b: {bytes: 4KiB, mode: replicable, source_at: pinned-host}
steps:
  - move: {value: a, to: cuda:0}
    expect: {error: maybe}
  - ensure: {value: b, at: cuda:0}
    expect: {error: maybe}
  - disarm: {name: coin}
  - move: {value: a, to: cuda:1}
  - ensure: {value: b, at: cuda:0}
  - acquire: {values: [a], at: cuda:1, stream: {device: 1, id: 1}, as: read}
  - work: {stream: {device: 1, id: 1}, ns: 10}
  - release: {lease: read}
  - advance: {ns: 10}
  - snapshot:
    expect:
      resident: {a: [cuda:1], b: [cuda:0]}
      locations: {cuda:1: {pending: 0}}
)";

TEST(Replay, PassesAndCountsWhatItChecked) {
  const ScenarioResult result = replay(parse_scenario(streaming, "streaming.yaml"));
  EXPECT_EQ(result.verdict, "passed") << result.failure;
  EXPECT_EQ(result.steps_run, 10u);
  EXPECT_GT(result.invariant_checks, 100);
  EXPECT_GE(result.content_checks, 1);
  ASSERT_EQ(result.steps.size(), 10u);
  EXPECT_EQ(result.steps[0].line, 10);
}

TEST(Replay, VirtualTimeIsBoundedByTheScenariosLimit) {
  const ScenarioResult within = replay(parse_scenario(
      "name: t\nlimits: {virtual_ns: 1000}\nsteps:\n  - advance: {ns: 600}\n  - advance: {ns: 400}\n", "t.yaml"));
  EXPECT_EQ(within.verdict, "passed") << within.failure;
  const ScenarioResult past = replay(parse_scenario(
      "name: t\nlimits: {virtual_ns: 1000}\nsteps:\n  - advance: {ns: 600}\n  - advance: {ns: 401}\n", "t.yaml"));
  EXPECT_EQ(past.verdict, "failed");
  EXPECT_NE(past.failure.find("virtual time would pass the limit of 1000 ns"), std::string::npos) << past.failure;
  EXPECT_NE(past.failure.find("limits: {virtual_ns: N}"), std::string::npos) << past.failure;
  // Work queued behind other work counts from where the stream ends; the
  // default limit keeps clock arithmetic far from overflow.
  const ScenarioResult queued = replay(parse_scenario(
      "name: t\nlimits: {virtual_ns: 1000}\nsteps:\n  - work: {stream: {device: 0, id: 1}, ns: 700}\n"
      "  - work: {stream: {device: 0, id: 1}, ns: 301}\n", "t.yaml"));
  EXPECT_EQ(queued.verdict, "failed");
  const ScenarioResult huge = replay(parse_scenario(
      "name: t\nsteps:\n  - advance: {ns: 9223372036854775806}\n  - advance: {ns: 9223372036854775806}\n", "t.yaml"));
  EXPECT_EQ(huge.verdict, "failed");
  EXPECT_EQ(huge.failed_step, std::optional<std::size_t>(0));
}

TEST(Replay, IsDeterministicForASeedAndVariesAcrossSeeds) {
  const Scenario scenario = parse_scenario(streaming, "streaming.yaml");
  std::set<std::string> reports;
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    ReplayOptions options;
    options.seed = seed;
    const std::string first = to_json(replay(scenario, options)).dump();
    EXPECT_EQ(first, to_json(replay(scenario, options)).dump()) << "seed " << seed;
    reports.insert(first);
  }
  EXPECT_GT(reports.size(), 1u);  // the seed reaches the fault rule
}

TEST(Replay, FailsAtTheStepWithExpectedAndActual) {
  const ScenarioResult result = replay(parse_scenario(R"(
name: wrong
values:
  a: {bytes: 1KiB, adopt_at: pageable-host}
steps:
  - move: {value: a, to: cuda:0}
  - drop: {value: a, at: cuda:0}
)", "wrong.yaml"));
  EXPECT_EQ(result.verdict, "failed");
  EXPECT_EQ(result.failed_step, 1u);
  EXPECT_EQ(result.failed_line, 7);
  EXPECT_NE(result.failure.find("wrong.yaml:7: step 1 (drop): unexpected ownership error"), std::string::npos)
      << result.failure;
}

TEST(Replay, CanariesPassOnlyWhenTheyFailAsRequired) {
  const char* const canary = R"(
name: canary
must_fail: expected used bytes at cuda:0 2 B, got 1.0 KiB (1024 B)
values:
  a: {bytes: 1KiB, adopt_at: pageable-host}
steps:
  - move: {value: a, to: cuda:0}
    expect: {locations: {cuda:0: {used: %USED%}}}
)";
  std::string text = canary;
  const auto with = [&](const std::string& used) {
    std::string copy = text;
    copy.replace(copy.find("%USED%"), 6, used);
    return replay(parse_scenario(copy, "canary.yaml"));
  };
  EXPECT_EQ(with("2").verdict, "passed");
  const ScenarioResult passing = with("1KiB");
  EXPECT_EQ(passing.verdict, "failed");
  EXPECT_NE(passing.failure.find("no longer detects"), std::string::npos);
  EXPECT_EQ(with("3").verdict, "failed");  // fails, but for the wrong reason
}

TEST(Replay, SkipsScenariosTheTorchRuntimeCannotRun) {
  ReplayOptions options;
  options.runtime = "torch";
  const ScenarioResult result = replay(parse_scenario(streaming, "streaming.yaml"), options);
  EXPECT_EQ(result.verdict, "skipped");
  EXPECT_TRUE(result.passed());
  const ScenarioResult host_only = replay(parse_scenario(R"(
name: host
values:
  a: {bytes: 1KiB, mode: replicable, adopt_at: pageable-host}
steps:
  - discard: {value: a}
    expect: {discarded: {a: true}}
)", "host.yaml"), options);
  EXPECT_EQ(host_only.verdict, "passed") << host_only.failure;
  EXPECT_EQ(host_only.runtime, "torch");
  const ScenarioResult budgeted = replay(parse_scenario(R"(
name: budgeted
manager: {budgets: {cuda:0: 1KiB}}
values:
  a: {bytes: 1KiB, adopt_at: pageable-host}
steps:
  - snapshot: {}
)", "budgeted.yaml"), options);
  EXPECT_EQ(budgeted.verdict, "skipped");
  EXPECT_NE(budgeted.failure.find("no cuda:0"), std::string::npos);
}

TEST(Contents, ComparesBitsTypesAndAttributes) {
  using residency::ResidentValue;
  const at::Tensor zeros = at::zeros({4});
  const ResidentValue a("T", {{"x", zeros}}, {{"level", std::int64_t{2}}});
  EXPECT_TRUE(same_contents(a, ResidentValue("T", {{"x", zeros.clone()}}, {{"level", std::int64_t{2}}})));
  EXPECT_FALSE(same_contents(a, ResidentValue("T", {{"x", zeros.neg()}}, {{"level", std::int64_t{2}}})));  // -0.0
  EXPECT_FALSE(same_contents(a, ResidentValue("T", {{"x", zeros}}, {{"level", std::int64_t{3}}})));
  EXPECT_FALSE(same_contents(a, ResidentValue("U", {{"x", zeros}}, {{"level", std::int64_t{2}}})));
  EXPECT_FALSE(same_contents(a, ResidentValue("T", {{"y", zeros}}, {{"level", std::int64_t{2}}})));
  EXPECT_FALSE(same_contents(a, ResidentValue("T", {{"x", zeros.to(at::kDouble)}}, {{"level", std::int64_t{2}}})));
}

TEST(Reporters, RenderJUnitJsonAndTimeline) {
  std::vector<ScenarioResult> results{replay(parse_scenario(streaming, "streaming.yaml"))};
  results.push_back(replay(parse_scenario("name: broken\nvalues:\n  a: {bytes: 1KiB, adopt_at: pageable-host}\n"
                                          "steps:\n  - drop: {value: a, at: pageable-host}\n",
                                          "broken.yaml")));
  const std::string junit = junit_xml(results);
  EXPECT_NE(junit.find("tests=\"2\" failures=\"1\""), std::string::npos);
  EXPECT_NE(junit.find("<failure message=\"broken.yaml:5"), std::string::npos);
  const nlohmann::json json = to_json(results);
  EXPECT_EQ(json["passed"], 1);
  EXPECT_EQ(json["failed"], 1);
  EXPECT_EQ(json["scenarios"][1]["failed_line"], 5);
  const nlohmann::json trace = timeline(results);
  std::set<std::string> phases;
  for (const auto& event : trace["traceEvents"]) phases.insert(event["ph"].get<std::string>());
  EXPECT_EQ(phases, (std::set<std::string>{"M", "X", "C"}));
  EXPECT_NE(text_summary(results[0]).find("passed  streaming"), std::string::npos);
}

}  // namespace
}  // namespace fhelium::harness
