// Readable plain-text tables of snapshots and plan explanations, for the demo,
// the replay tool's verbose output and failure messages. Pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "fhelium/residency/snapshot.hpp"

namespace fhelium::harness {

// "1.5 KiB"-style rendering of a byte count (exact bytes below 1 KiB).
std::string format_bytes(std::int64_t bytes);
// `text` safe inside XML or HTML text and attribute values.
std::string markup_escape(const std::string& text);
// One table of locations (budget, used, reserved, remaining, peaks, counts)
// and one of values (handle, type, mode, materializations).
std::string format_snapshot(const residency::ResidencySnapshot& snapshot);
// Per-action verdicts, predicted peaks and the feasibility line.
std::string format_explanation(const residency::ResidencyPlanExplanation& explanation);

}  // namespace fhelium::harness
