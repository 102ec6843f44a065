// The replay engine: verdicts, located failures, determinism, canaries,
// skips, and the reports built from results.
#include <gtest/gtest.h>

#include <ATen/ops/zeros.h>

#include "fhelium/harness/contents.hpp"
#include "fhelium/harness/error_kind.hpp"
#include "fhelium/harness/fault_coverage.hpp"
#include "fhelium/harness/forwarding_runtime.hpp"
#include "fhelium/harness/shrink.hpp"
#include "fhelium/harness/replay.hpp"
#include "fhelium/harness/reporters.hpp"
#include "fhelium/harness/scenario_loader.hpp"
#include "fhelium/residency/errors.hpp"

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
  // Slices, counters, a fault instant, pending protection and stream events.
  EXPECT_EQ(phases, (std::set<std::string>{"M", "X", "C", "i", "b", "e"}));
  EXPECT_NE(text_summary(results[0]).find("passed  streaming"), std::string::npos);
}

// A weight copied on a stream at a modelled cost, read by a kernel that runs
// 5 us after the copy, a lease released while the kernel runs, and a fault.
const char* const timed = R"(
name: timed
runtime: {cuda_devices: 1, copy_ns_per_mib: 1000}
manager: {budgets: {cuda:0: 8MiB}}
values:
  w: {bytes: 2MiB, adopt_at: pinned-host, mode: replicable}
  x: {bytes: 1MiB, adopt_at: pinned-host, mode: replicable}
steps:
  - ensure: {value: w, at: cuda:0, stream: {device: 0, id: 3}}
  - acquire: {values: [w], at: cuda:0, stream: {device: 0, id: 1}, as: read}
  - work: {stream: {device: 0, id: 1}, ns: 5000}
  - release: {lease: read}
  - arm: {name: no-room, operation: copy, location: cuda:0, nth: 1}
  - ensure: {value: x, at: cuda:0}
    expect: {error: out_of_memory}
  - advance: {ns: 6000}
  - snapshot:
    expect: {locations: {cuda:0: {pending: 0}}}
)";

// The events of `trace` on the track named `track` of process 1.
std::vector<nlohmann::json> on_track(const nlohmann::json& trace, const std::string& track) {
  std::optional<std::int64_t> tid;
  for (const auto& event : trace["traceEvents"]) {
    if (event["ph"] == "M" && event["name"] == "thread_name" && event["args"]["name"] == track) tid = event["tid"];
  }
  std::vector<nlohmann::json> events;
  for (const auto& event : trace["traceEvents"]) {
    if (tid && event["ph"] != "M" && event.contains("tid") && event["tid"] == *tid) events.push_back(event);
  }
  return events;
}

void expect_slice(const nlohmann::json& event, const std::string& name, double ts_us, double dur_us) {
  EXPECT_EQ(event["ph"], "X");
  EXPECT_EQ(event["name"], name);
  EXPECT_DOUBLE_EQ(event["ts"].get<double>(), ts_us) << name;
  EXPECT_DOUBLE_EQ(event["dur"].get<double>(), dur_us) << name;
}

TEST(Reporters, TimelineRunsOnVirtualTimeWithStreamsProtectionAndFaults) {
  const ScenarioResult result = replay(parse_scenario(timed, "timed.yaml"));
  ASSERT_EQ(result.verdict, "passed") << result.failure;
  const nlohmann::json trace = timeline({result});
  // The 2 MiB copy on stream 3: 2000 ns from the start.
  const auto copies = on_track(trace, "cuda:0 stream 3");
  ASSERT_EQ(copies.size(), 1u);
  expect_slice(copies[0], "copy 2.0 MiB -> cuda:0", 0.0, 2.0);
  // The kernel starts when the copy is done (the clock waited for it) and
  // runs 5 us; the lease's event is recorded behind it.
  const auto kernel = on_track(trace, "cuda:0 stream 1");
  ASSERT_EQ(kernel.size(), 2u);
  expect_slice(kernel[0], "work", 2.0, 5.0);
  EXPECT_EQ(kernel[1]["ph"], "i");
  EXPECT_DOUBLE_EQ(kernel[1]["args"]["completes_at_us"].get<double>(), 7.0);
  // The transition, timed, on its destination's track, in value names.
  const auto transitions = on_track(trace, "cuda:0");
  ASSERT_FALSE(transitions.empty());
  expect_slice(transitions[0], "ensure w at cuda:0", 0.0, 2.0);
  // Pending protection of w: from the release until the snapshot after the advance.
  std::vector<nlohmann::json> pending;
  for (const auto& event : trace["traceEvents"]) {
    if ((event["ph"] == "b" || event["ph"] == "e") && event["name"] == "pending w") pending.push_back(event);
  }
  ASSERT_EQ(pending.size(), 2u);
  EXPECT_EQ(pending[0]["ph"], "b");
  EXPECT_EQ(pending[0]["id"], pending[1]["id"]);
  EXPECT_DOUBLE_EQ(pending[0]["ts"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(pending[1]["ts"].get<double>(), 8.0);
  // The fault as an instant at its virtual time, and counters with the budget.
  const auto faults = on_track(trace, "faults");
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_EQ(faults[0]["name"], "fault no-room (copy)");
  EXPECT_DOUBLE_EQ(faults[0]["ts"].get<double>(), 2.0);
  bool budget_counter = false;
  for (const auto& event : trace["traceEvents"]) {
    if (event["ph"] == "C" && event["name"] == "cuda:0 bytes" && event["args"].contains("budget_bytes")) {
      budget_counter = event["args"]["budget_bytes"] == 8 << 20;
    }
  }
  EXPECT_TRUE(budget_counter);
}

TEST(Reporters, HtmlReportIsSelfContainedWithChartsFaultsAndSteps) {
  std::vector<ScenarioResult> results{replay(parse_scenario(timed, "timed.yaml"))};
  results.push_back(replay(parse_scenario("name: broken <b>\nvalues:\n  a: {bytes: 1KiB, adopt_at: pageable-host}\n"
                                          "steps:\n  - drop: {value: a, at: pageable-host}\n",
                                          "broken.yaml")));
  const std::string html = html_report(results);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(html.find("http:"), std::string::npos);  // nothing fetched or linked
  EXPECT_EQ(html.find("https:"), std::string::npos);
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_NE(html.find("1 passed, 1 failed, 0 skipped"), std::string::npos);
  EXPECT_NE(html.find("cuda:0: bytes over virtual time"), std::string::npos);
  EXPECT_NE(html.find("<title>budget 8.0 MiB</title>"), std::string::npos);
  EXPECT_NE(html.find("<title>fault no-room (copy) at step 5"), std::string::npos);
  EXPECT_NE(html.find("<td>ensure w at cuda:0</td>"), std::string::npos);
  EXPECT_NE(html.find("broken &lt;b&gt;"), std::string::npos);  // names are escaped
  EXPECT_EQ(html.find("broken <b>"), std::string::npos);
  EXPECT_NE(html.find("<tr class=\"failed\">"), std::string::npos);
}


TEST(FaultCoverage, TheModelIsEveryValidRulePlusTheSourceFaults) {
  const std::vector<FaultPair> pairs = fault_model_pairs();
  const std::set<FaultPair> model(pairs.begin(), pairs.end());
  EXPECT_EQ(model.size(), pairs.size());
  for (const FaultPair& pair : {FaultPair{"copy", "fail"}, FaultPair{"copy", "alias"}, FaultPair{"record_event", "delay"},
                                FaultPair{"record_event", "never_complete"}, FaultPair{"synchronize_event", "fail"},
                                FaultPair{"allocator_stats", "fail"}, FaultPair{"load", "reenter"},
                                FaultPair{"load", "wrong_contents"}, FaultPair{"adopt", "alias"}}) {
    EXPECT_EQ(model.count(pair), 1u) << pair.first << "/" << pair.second;
  }
  // Combinations no rule may have are not part of the model.
  EXPECT_EQ(model.count({"copy", "delay"}), 0u);
  EXPECT_EQ(model.count({"query_event", "alias"}), 0u);
  EXPECT_EQ(pairs.size(), 17u);
}

TEST(FaultCoverage, CountsWhatFiredAndNamesWhatNeverDid) {
  std::vector<ScenarioResult> results{replay(parse_scenario(streaming, "streaming.yaml")),
                                      replay(parse_scenario(timed, "timed.yaml"))};
  const FaultCoverage coverage = fault_coverage(results);
  std::int64_t copy_fails = 0;
  for (const auto& result : results) {
    for (const auto& fault : result.faults) copy_fails += fault.operation == "copy" && fault.effect == "fail";
  }
  EXPECT_GT(copy_fails, 0);
  EXPECT_EQ(coverage.fired.at({"copy", "fail"}), copy_fails);
  const auto never = coverage.never_fired();
  EXPECT_NE(std::find(never.begin(), never.end(), FaultPair{"synchronize_event", "fail"}), never.end());
  EXPECT_EQ(std::find(never.begin(), never.end(), FaultPair{"copy", "fail"}), never.end());
  // The timed scenario's refused copy, and whichever coin flips failed in streaming.
  EXPECT_EQ(coverage.error_paths.at("out_of_memory"),
            results[0].error_paths.count("out_of_memory") ? results[0].error_paths.at("out_of_memory") + 1 : 1);
  const auto unreached = coverage.never_reached();
  EXPECT_NE(std::find(unreached.begin(), unreached.end(), "reentrancy"), unreached.end());
  const nlohmann::json json = to_json(coverage);
  EXPECT_EQ(json["pairs"].size(), fault_model_pairs().size());
  EXPECT_EQ(json["never_fired"].size(), never.size());
}

TEST(FaultCoverage, ErrorKindsNameEveryManagerError) {
  const auto& kinds = error_kinds();
  const auto kind_of = [](auto error) { return error_kind(std::make_exception_ptr(error)); };
  for (const std::string& kind : std::vector<std::string>{kind_of(residency::ResidencyInUseError("x")), kind_of(residency::ResidencyLifetimeClosedError("x")),
        kind_of(residency::ResidencyReentrancyError("x")), kind_of(std::invalid_argument("x")),
        kind_of(std::runtime_error("x"))}) {
    EXPECT_NE(std::find(kinds.begin(), kinds.end(), kind), kinds.end()) << kind;
  }
  EXPECT_EQ(std::find(kinds.begin(), kinds.end(), "unknown"), kinds.end());
}


// A deliberately broken runtime (test code, not lib): from its third copy to
// cuda:0 on, every copy to cuda:0 comes back with its bytes negated.
class CorruptingRuntime final : public ForwardingRuntime {
 public:
  using ForwardingRuntime::ForwardingRuntime;

 private:
  residency::ResidentValue do_copy_to(const residency::ResidentValue& value,
                                      const residency::ResidencyLocation& destination,
                                      const std::optional<c10::Stream>& stream) override {
    residency::ResidentValue copy = ForwardingRuntime::do_copy_to(value, destination, stream);
    if (destination != residency::cuda_location(0) || ++copies_ < 3) return copy;
    for (const auto& field : copy.fields()) field.second.neg_();  // in the copy's own (device) storage
    return copy;
  }
  int copies_ = 0;
};

// Twelve layers streamed through a GPU, with reads, holds and a fault rule
// that never matters: only the third copy to cuda:0 matters.
const char* const long_run = R"(
name: long-run
description: twelve layers, each moved in, read, held and moved out
manager: {budgets: {cuda:0: 64KiB}}
faults:
  - {name: rare, operation: allocator_stats, probability: 0.01}
values:
  w$i: {bytes: 16KiB, adopt_at: pinned-host, repeat: {for: i, range: 12}}
  spare: {bytes: 8KiB, adopt_at: pageable-host}
steps:
  - repeat: {for: i, range: 12}
    steps:
      - move: {value: w$i, to: cuda:0}
        expect: {resident: {w$i: [cuda:0]}}
      - hold: {values: [w$i], at: cuda:0, as: h$i}
      - release: {hold: h$i}
      - acquire: {values: [w$i], at: cuda:0, stream: {device: 0, id: 1}, as: r$i}
      - release: {lease: r$i, wait: true}
      - move: {value: w$i, to: pinned-host}
  - move: {value: spare, to: pinned-host}
  - verify: {}
)";

TEST(Shrink, ABrokenRuntimesFailureShrinksToAHandfulOfSteps) {
  ShrinkOptions options;
  options.replay.wrap_runtime = [](std::shared_ptr<residency::DeviceRuntime> base) {
    return std::make_shared<CorruptingRuntime>(std::move(base));
  };
  const ScenarioResult original = replay(parse_scenario(long_run, "long-run.yaml"), options.replay);
  ASSERT_EQ(original.verdict, "failed");
  EXPECT_EQ(failure_signature(original), "content of a value");
  const ShrinkResult shrunk = shrink_scenario(long_run, "long-run.yaml", options);
  std::cout << "shrunk " << shrunk.steps_before << " steps (" << shrunk.bytes_before << " bytes) to "
            << shrunk.steps_after << " steps (" << shrunk.bytes_after << " bytes) in " << shrunk.replays
            << " replays:\n" << shrunk.yaml;
  EXPECT_EQ(shrunk.signature, "content of a value");
  EXPECT_EQ(shrunk.steps_before, 74u);
  EXPECT_LE(shrunk.steps_after, 5u) << shrunk.yaml;
  EXPECT_LT(shrunk.bytes_after, shrunk.bytes_before);
  EXPECT_FALSE(shrunk.budget_exhausted);
  EXPECT_LE(shrunk.replays, 400u);
  // The output is a valid scenario, with the scenario's own names, that fails the same way...
  const Scenario minimal = parse_scenario(shrunk.yaml, "minimal.yaml");
  EXPECT_NE(shrunk.yaml.find("w$i"), std::string::npos);
  EXPECT_EQ(failure_signature(replay(minimal, options.replay)), "content of a value");
  // ...and only because of the broken runtime.
  EXPECT_EQ(replay(minimal).verdict, "passed");
  // Deterministic.
  const ShrinkResult again = shrink_scenario(long_run, "long-run.yaml", options);
  EXPECT_EQ(again.yaml, shrunk.yaml);
  EXPECT_EQ(again.replays, shrunk.replays);
}

// Aliasing a value's storage tests the manager's refusal only while that
// value still holds the storage; afterwards the replay names the scenario's
// mistake instead of reporting the contents that then differ.
TEST(Replay, AliasingAFreedStorageIsAScenarioError) {
  const char* const base = R"(
name: alias-after-free
values:
  w: {elements: 64, adopt_at: cuda:0}
  twin: {elements: 64, adopt_at: cuda:0, deferred: true, aliases: w}
  src: {elements: 64, source_at: cuda:0, aliases: w}
steps:
)";
  // While w holds its storage, both aliases are refused.
  const ScenarioResult held = replay(parse_scenario(std::string(base) + R"(
  - adopt: {value: twin}
    expect: {error: ownership}
  - ensure: {value: src, at: cuda:0}
    expect: {error: ownership}
)", "held.yaml"));
  EXPECT_EQ(held.verdict, "passed") << held.failure;
  for (const char* freeing : {"move: {value: w, to: pinned-host}", "discard: {value: w}"}) {
    for (const char* aliasing : {"adopt: {value: twin}", "ensure: {value: src, at: cuda:0}"}) {
      const ScenarioResult freed = replay(parse_scenario(std::string(base) + "  - " + freeing + "\n  - " + aliasing +
                                                             "\n    expect: {error: maybe}\n",
                                                         "freed.yaml"));
      EXPECT_EQ(freed.verdict, "failed") << freeing << " / " << aliasing;
      EXPECT_EQ(freed.failed_step, std::optional<std::size_t>(1));
      EXPECT_NE(freed.failure.find("scenario error: value '"), std::string::npos) << freed.failure;
      EXPECT_NE(freed.failure.find("gave up at step 0"), std::string::npos) << freed.failure;
    }
  }
}

TEST(Shrink, RefusesAPassingScenarioAndRespectsItsBudget) {
  try {
    shrink_scenario(long_run, "long-run.yaml");
    FAIL() << "a passing scenario was shrunk";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("there is no failure to shrink"), std::string::npos) << error.what();
  }
  ShrinkOptions options;
  options.max_replays = 3;
  options.replay.wrap_runtime = [](std::shared_ptr<residency::DeviceRuntime> base) {
    return std::make_shared<CorruptingRuntime>(std::move(base));
  };
  const ShrinkResult partial = shrink_scenario(long_run, "long-run.yaml", options);
  EXPECT_TRUE(partial.budget_exhausted);
  EXPECT_LE(partial.replays, 4u);
}

}  // namespace
}  // namespace fhelium::harness
