// Scenario loading: sizes, the typed model, and located errors for bad files.
#include <gtest/gtest.h>

#include <limits>

#include "fhelium/harness/scenario_loader.hpp"

namespace fhelium::harness {
namespace {

using residency::cuda_location;
using residency::PINNED_HOST;
using residency::LocationBudgets;

TEST(ParseSize, AcceptsUnitsAndRejectsGarbage) {
  EXPECT_EQ(parse_size("4096"), 4096);
  EXPECT_EQ(parse_size("4KiB"), 4096);
  EXPECT_EQ(parse_size("1.5MiB"), 1572864);
  EXPECT_EQ(parse_size("2GB"), 2000000000);
  EXPECT_EQ(parse_size("10 B"), 10);
  EXPECT_EQ(parse_size("140GiB"), 140LL << 30);
  EXPECT_EQ(parse_size("2TiB"), 2LL << 40);
  for (const char* bad : {"", "KiB", "4KB1", "1.3B", "-4", "4 PiB", "1e3", "0x10", "1.", ".5KiB"}) {
    EXPECT_THROW(parse_size(bad), std::invalid_argument) << bad;
  }
}

TEST(ParseSize, IsExactUpToTheLargestInt64AndRejectsWhatDoesNotFit) {
  // Through a double these read back rounded; they must be exact.
  EXPECT_EQ(parse_size("4000000000000000008"), 4000000000000000008LL);
  EXPECT_EQ(parse_size("9223372036854775807"), std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(parse_size("1.25GiB"), 1342177280LL);
  EXPECT_EQ(parse_size("0.5KiB"), 512);
  for (const char* too_big : {"9223372036854775808", "99999999999999999999999", "8589934592GiB", "9.3EB"}) {
    try {
      parse_size(too_big);
      ADD_FAILURE() << too_big << " was accepted";
    } catch (const std::invalid_argument& error) {
      const std::string message = error.what();
      if (std::string(too_big) != "9.3EB") {
        EXPECT_NE(message.find("does not fit in a signed 64-bit byte count"), std::string::npos) << message;
      }
    }
  }
  // A size that does not fit is a located load error.
  try {
    parse_scenario("name: x\nvalues:\n  a: {bytes: 9223372036854775808, adopt_at: pageable-host}\nsteps: []\n",
                   "huge.yaml");
    ADD_FAILURE() << "a size past INT64_MAX loaded";
  } catch (const ScenarioError& error) {
    EXPECT_EQ(error.line(), 3);
    EXPECT_NE(std::string(error.what()).find("does not fit"), std::string::npos) << error.what();
  }
}

TEST(Loader, BuildsTheTypedModel) {
  const Scenario scenario = parse_scenario(R"(
name: demo
seed: 9
manager: {budgets: {cuda:0: 1MiB}, trace_capacity: 8}
runtime: {cuda_devices: 1, capacity: {cuda:0: 2MiB}, copy_ns_per_mib: 5}
faults:
  - {name: oom, operation: copy, location: cuda:0, nth: 2}
  - {name: quiet, operation: query_event, during: step}
  - {name: loud, operation: query_event, during: checks}
values:
  w: {bytes: 4KiB, dtype: float16, mode: replicable, adopt_at: pinned-host}
  s: {elements: 8, source_at: pageable-host, fail_on_load: 1}
plans:
  p:
    reservations: [{at: cuda:0, bytes: 1KiB, label: ws}]
    enter: [{move: {value: w, to: cuda:0, from: pinned-host}}]
steps:
  - acquire: {values: [w], at: pinned-host, as: read}
  - release: {lease: read, wait: true}
  - execute: {actions: [{drop: {value: w, at: cuda:0}}]}
    expect: {error: plan, locations: {cuda:0: {remaining: none, used: 1KiB}}}
    remember_version: v
  - explain: {plan: p, expected_version: v}
    expect: {feasible: true, predicted_peak: {cuda:0: 5KiB}}
  - work: {stream: {device: 0, id: 3}, ns: never}
)", "inline.yaml");
  EXPECT_EQ(scenario.name, "demo");
  EXPECT_EQ(scenario.seed, 9u);
  EXPECT_EQ(scenario.budgets, (LocationBudgets{{cuda_location(0), 1 << 20}}));
  EXPECT_EQ(scenario.trace_capacity, 8);
  EXPECT_EQ(scenario.cuda_devices, 1);
  EXPECT_EQ(scenario.copy_ns_per_mib, 5);
  ASSERT_EQ(scenario.faults.size(), 3u);
  EXPECT_EQ(scenario.faults[0].nth, 2);
  EXPECT_EQ(scenario.faults[0].during, FaultCalls::any);
  EXPECT_EQ(scenario.faults[1].during, FaultCalls::step);
  EXPECT_EQ(scenario.faults[2].during, FaultCalls::checks);
  ASSERT_EQ(scenario.values.size(), 2u);
  EXPECT_EQ(scenario.values[0].elements, 2048);
  EXPECT_EQ(scenario.values[0].at, PINNED_HOST);
  EXPECT_TRUE(scenario.values[1].source);
  ASSERT_EQ(scenario.plans.size(), 1u);
  EXPECT_EQ(scenario.plans[0].enter[0].from, PINNED_HOST);
  ASSERT_EQ(scenario.steps.size(), 5u);
  EXPECT_EQ(scenario.steps[0].kind, StepKind::acquire);
  EXPECT_EQ(scenario.steps[0].line, 18);
  EXPECT_TRUE(scenario.steps[1].wait);
  const Expectation& expect = scenario.steps[2].expect;
  EXPECT_EQ(expect.error, "plan");
  ASSERT_TRUE(expect.locations.at(cuda_location(0)).remaining.has_value());
  EXPECT_FALSE(expect.locations.at(cuda_location(0)).remaining->has_value());
  EXPECT_EQ(scenario.steps[2].remember_version, "v");
  EXPECT_EQ(scenario.steps[3].expected_version_ref, "v");
  EXPECT_EQ(scenario.steps[4].ns, std::numeric_limits<std::int64_t>::max());
}

TEST(Loader, MergeKeysAndDevicesAStepExpectsToBeRefused) {
  const Scenario scenario = parse_scenario(R"(
name: merged
values:
  layer0: &layer {bytes: 4KiB, adopt_at: pinned-host, mode: replicable}
  layer1: {<<: *layer, bytes: 8KiB}
  layer2:
    <<: [*layer]
    adopt_at: pageable-host
steps:
  - ensure: {value: layer0, at: cuda:7}
    expect: {error: invalid_argument}
)", "merged.yaml");
  ASSERT_EQ(scenario.values.size(), 3u);
  EXPECT_EQ(scenario.values[1].elements * 4, 8192);           // its own key wins
  EXPECT_EQ(scenario.values[1].at, PINNED_HOST);             // merged from the anchor
  EXPECT_EQ(scenario.values[1].mode, residency::ReplicaMode::replicable);
  EXPECT_EQ(scenario.values[2].at, residency::PAGEABLE_HOST);
  EXPECT_EQ(scenario.values[2].elements * 4, 4096);
  EXPECT_EQ(scenario.steps[0].location, cuda_location(7));  // allowed: the step expects the error
}

TEST(Loader, RepeatWritesValuesPlansAndStepsOnce) {
  const Scenario scenario = parse_scenario(R"(
name: repeated
values:
  w$i: {bytes: 4KiB, adopt_at: pageable-host, repeat: {for: i, range: 3}}
  kv_$name: {bytes: 1KiB, adopt_at: pinned-host, repeat: {for: name, in: [left, right]}}
plans:
  stage$i:
    repeat: {for: i, range: [1, 3]}
    enter: [{move: {value: w$i, to: cuda:0}}]
    exit: [{move: {value: "w${i-1}", to: pinned-host}}]
steps:
  - repeat: {for: i, range: [1, 3]}
    steps:
      - repeat: {for: j, in: [a, b]}
        steps:
          - scope_enter: {plan: stage$i, as: s$i$j}
          - scope_close: {scope: s$i$j}
  - snapshot: {}
    expect: {resident: {w0: [pageable-host]}}
)", "repeated.yaml");
  ASSERT_EQ(scenario.values.size(), 5u);
  EXPECT_EQ(scenario.values[2].name, "w2");
  EXPECT_EQ(scenario.values[4].name, "kv_right");
  ASSERT_EQ(scenario.plans.size(), 2u);
  EXPECT_EQ(scenario.plans[1].name, "stage2");
  EXPECT_EQ(scenario.plans[1].exit[0].value, "w1");
  ASSERT_EQ(scenario.steps.size(), 9u);
  EXPECT_EQ(scenario.steps[2].name, "s1b");
  EXPECT_EQ(scenario.steps[6].plan, "stage2");
  EXPECT_EQ(scenario.steps[7].name, "s2b");
}

TEST(Loader, RepeatMistakesAreLocated) {
  const auto error_of = [](const char* text) -> std::string {
    try {
      parse_scenario(text, "bad.yaml");
    } catch (const ScenarioError& error) {
      return error.what();
    }
    return "accepted";
  };
  EXPECT_NE(error_of("name: x\nvalues:\n  w$i: {bytes: 4KiB, adopt_at: pageable-host, repeat: {for: i, range: 2}}\n"
                     "steps:\n  - repeat: {for: i, range: 2}\n    steps: [{drop: {value: \"w${j}\", at: pageable-host}}]\n")
                .find("bad.yaml:6:"),
            std::string::npos);
  EXPECT_NE(error_of("name: x\nsteps:\n  - repeat: {for: i, range: 2, in: [1]}\n    steps: []\n").find("exactly one of"),
            std::string::npos);
  EXPECT_NE(error_of("name: x\nvalues:\n  w$i: {bytes: 4KiB, adopt_at: pageable-host, repeat: {for: i, in: [a, a]}}\n"
                     "steps: []\n").find("duplicate value 'wa'"),
            std::string::npos);
  EXPECT_NE(error_of("name: x\nsteps:\n  - repeat: {for: i, in: [a]}\n    steps: [{advance: {ns: \"${i+1}\"}}]\n")
                .find("integer binding"),
            std::string::npos);
  EXPECT_NE(error_of("name: x\nlimits: {steps: 3}\nsteps:\n  - repeat: {for: i, range: 4}\n    steps: [{snapshot: {}}]\n")
                .find("limit"),
            std::string::npos);
}

struct BadFile {
  const char* text;
  int line;
  int column;
  const char* message;
};

TEST(Loader, NamesFileLineAndColumnOfEveryMistake) {
  const BadFile cases[] = {
      {"name: x\nsteps: []\ncolour: red\n", 3, 1, "unknown key 'colour' in scenario"},
      {"name: x\nvalues:\n  a: {bytes: 4KB1, adopt_at: pageable-host}\nsteps: []\n", 3, 14, "malformed size '4KB1'"},
      {"name: x\nvalues:\n  a: {bytes: 4, adopt_at: gpu:0}\nsteps: []\n", 3, 27, "invalid residency location 'gpu:0'"},
      {"name: x\nvalues:\n  a: {bytes: 4, adopt_at: pageable-host}\nsteps:\n  - move: {value: b, to: cuda:0}\n", 5,
       19, "unknown value 'b'"},
      {"name: x\nsteps:\n  - release: {lease: nope}\n", 3, 22, "no earlier lease 'nope'"},
      {"name: x\nsteps:\n  - teleport: {}\n", 3, 5, "unknown step 'teleport'"},
      {"name: x\nsteps:\n  - snapshot: {}\n    expect: {error: kaboom}\n", 4, 21, "unknown error kind 'kaboom'"},
      {"name: x\nsteps: [\n", 3, 1, "malformed YAML"},
      {"name: x\nfaults:\n  - {name: f, operation: malloc}\nsteps: []\n", 3, 26, "unknown fault operation 'malloc'"},
      {"name: x\nfaults:\n  - {name: f, operation: copy, effect: delay, delay_ns: 5}\nsteps: []\n", 3, 5,
       "applies only to record_event"},
      {"name: x\nfaults:\n  - {name: f, operation: copy, during: setup}\nsteps: []\n", 3, 40,
       "fault 'f' during must be any (every matching call), step (only the steps' own calls) or checks"},
      {"name: x\nvalues:\n  a: {bytes: 4, adopt_at: pageable-host}\n  a: {bytes: 4, adopt_at: pageable-host}\nsteps: []\n",
       4, 3, "duplicate key 'a' (first at line 3)"},
      {"name: x\nvalues:\n  a: {adopt_at: pageable-host}\nsteps: []\n", 3, 6, "exactly one of 'elements' and 'bytes'"},
      {"name: x\nsteps:\n  - hold: {values: [], at: cuda:0, as: h}\n  - reserve: {at: cuda:0, bytes: 1, label: l, as: h}\n",
       4, 51, "already used by a hold"},
      {"name: x\nsteps:\n  - advance: {ns: -5}\n", 3, 19, "must be non-negative"},
      {"steps: []\n", 1, 1, "scenario needs 'name'"},
      // Resource bounds: each names the limit and how to raise it.
      {"name: x\nvalues:\n  big: {bytes: 5GiB, adopt_at: pageable-host}\nsteps: []\n", 3, 8,
       "past the limit of 4294967296 bytes of real payload (raise it with limits: {value_bytes: SIZE})"},
      {"name: x\nlimits: {steps: 1}\nsteps:\n  - snapshot: {}\n  - snapshot: {}\n", 4, 3,
       "2 steps, over the limit of 1 (raise it with limits: {steps: N})"},
      {"name: x\nvalues:\n  a: {elements: 4611686018427387904, adopt_at: pageable-host}\nsteps: []\n", 3, 17,
       "do not fit in a signed 64-bit byte count"},
      {"name: x\nlimits: {budget: 3}\nsteps: []\n", 2, 10, "unknown key 'budget' in limits"},
      // Strict YAML: duplicate keys name both lines; tabs are named; suggestions.
      {"name: x\nsteps: []\nsteps: []\n", 3, 1, "duplicate key 'steps' (first at line 2)"},
      {"name: x\nvalues:\n  a: {bytes: 4, adopt_at: pageable-host}\nsteps:\n  - move: {value: a, to: cuda:0, to: pinned-host}\n",
       5, 34, "duplicate key 'to'"},
      {"name: x\nvalues:\n\ta: {bytes: 4, adopt_at: pageable-host}\nsteps: []\n", 3, 1, "tab character in indentation"},
      {"name: x\nsteps:\n  - ensur: {value: a, at: cuda:0}\n", 3, 5, "unknown step 'ensur' (did you mean 'ensure'?)"},
      {"name: x\nvalues:\n  weights: {bytes: 4, adopt_at: pageable-host}\nsteps:\n  - drop: {value: weight, at: cuda:0}\n",
       5, 19, "unknown value 'weight' (did you mean 'weights'?)"},
      {"name: x\nsteps:\n  - snapshot: {}\n    expct: {}\n", 4, 5, "unknown step 'expct' (did you mean 'expect'?)"},
      // Locations are checked against the declared runtime when the file loads.
      {"name: x\nruntime: {cuda_devices: 1}\nvalues:\n  a: {bytes: 4, adopt_at: cuda:1}\nsteps: []\n", 4, 27,
       "cuda:1 is not a device of this scenario's runtime (it has 1 CUDA device(s)"},
      {"name: x\nmanager: {budgets: {cuda:3: 1KiB}}\nsteps: []\n", 2, 21, "cuda:3 is not a device"},
      {"name: x\nvalues:\n  a: {bytes: 4, adopt_at: pageable-host}\nsteps:\n  - ensure: {value: a, at: cuda:2}\n", 5, 28,
       "a step that means to test this needs expect: {error: ...}"},
  };
  for (const auto& bad : cases) {
    try {
      parse_scenario(bad.text, "bad.yaml");
      ADD_FAILURE() << "accepted: " << bad.text;
    } catch (const ScenarioError& error) {
      EXPECT_EQ(error.file(), "bad.yaml");
      EXPECT_EQ(error.line(), bad.line) << error.what();
      EXPECT_EQ(error.column(), bad.column) << error.what();
      EXPECT_NE(std::string(error.what()).find(bad.message), std::string::npos) << error.what();
    }
  }
}

TEST(Loader, ReportsMissingFiles) {
  try {
    load_scenario_file("/nonexistent/scenario.yaml");
    FAIL();
  } catch (const ScenarioError& error) {
    EXPECT_NE(std::string(error.what()).find("cannot open"), std::string::npos);
  }
}

// Inputs the fuzzer found: each hung the loader (yaml-cpp reported a next
// document for ever); they must fail fast with a located error.
TEST(Loader, FuzzFindingsFailFastWithALocatedError) {
  const std::string findings[] = {
      ",ver",
      std::string(", replicated\x0a  tor a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xef\xff\x00\x00\x00\x00\x00\x00\x00\x00\xff\x00\x00`@\x00\x0e\xa7\xf9\xff\xff\xff\xff:PPPPPPPPPP", 72),
  };
  for (const std::string& text : findings) {
    EXPECT_THROW(parse_scenario(text, "finding.yaml"), ScenarioError);
  }
}

}  // namespace
}  // namespace fhelium::harness
