// Shrinking a failing scenario: delta debugging over the YAML itself --
// steps (also inside repeat blocks and plan action lists), values, plans and
// fault rules are removed in chunks, then fault selectors (probability,
// every, nth), value sizes and step expectations are simplified -- keeping
// every candidate that still fails with the same signature. Deterministic:
// the same input and options give the same output and replay count.
#pragma once

#include <cstddef>
#include <string>

#include "fhelium/harness/replay.hpp"

namespace fhelium::harness {

// What a failure is, for "the same failure": the invariant that broke
// ("invariant budget-arithmetic"), a content check ("content of a value"),
// a canary's message, or the failing step's kind with the first clause of
// its message ("step drop: unexpected in_use error").
std::string failure_signature(const ScenarioResult& result);

struct ShrinkOptions {
  std::size_t max_replays = 2000;
  ReplayOptions replay;  // seed, runtime, runtime adaptor for each replay
};

struct ShrinkResult {
  std::string yaml;       // the smallest failing scenario found
  std::string signature;  // its (and the original's) failure signature
  std::size_t replays = 0;
  std::size_t steps_before = 0, steps_after = 0;  // steps after expanding repeats
  std::size_t bytes_before = 0, bytes_after = 0;  // YAML text
  bool budget_exhausted = false;                  // max_replays reached before a fixpoint
};

// Throws ScenarioError when `text` is not a valid scenario and
// std::invalid_argument when it passes (there is nothing to shrink).
ShrinkResult shrink_scenario(const std::string& text, const std::string& file, const ShrinkOptions& options = {});

}  // namespace fhelium::harness
