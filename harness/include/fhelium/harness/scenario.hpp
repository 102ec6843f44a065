// The typed scenario model: what a scenario YAML file declares, after loading.
//
// A scenario names its manager options, runtime, fault rules, values, plans
// and an ordered list of steps. Each step is one public manager operation (or
// a simulation control such as advancing virtual time) with optional
// expectations. Nothing here depends on YAML: the loader builds these values,
// the replay engine consumes them. Line numbers point into the source file.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fhelium/harness/fault_injecting_runtime.hpp"
#include "fhelium/residency/location.hpp"
#include "fhelium/residency/model.hpp"

namespace fhelium::harness {

struct StreamRef {
  int device = 0;
  std::int64_t id = 0;
  friend bool operator==(const StreamRef&, const StreamRef&) = default;
};

// What a source's load can return wrong (`wrong:` of a value).
inline constexpr std::array<const char*, 4> wrong_load_kinds{"size", "type", "location", "contents"};

struct ValueDecl {
  std::string name;
  std::string type_name = "Tensor";
  std::int64_t elements = 0;
  std::string dtype = "float32";  // float32 | float64 | float16 | int64 | int32 | uint8
  residency::ReplicaMode mode = residency::ReplicaMode::exclusive;
  bool source = false;                                // registered source instead of adopted
  ResidencyLocation at = residency::PAGEABLE_HOST;    // adopt location or source location
  bool deferred = false;                              // created by an adopt/register_source step
  std::optional<std::int64_t> fail_on_load;           // source: the Nth load throws
  std::optional<std::int64_t> reenter_on_load;        // source: the Nth load calls the manager back
  std::optional<std::string> wrong;                   // source returns a wrong one of wrong_load_kinds
  std::optional<std::string> aliases;                 // adopts / loads the storage of this other value
  // Virtual payload (simulated runtime only): the contents are one element
  // derived from the name, broadcast to the declared size, so copies and
  // content checks cost O(1) whatever the size.
  bool virtual_payload = false;
  int line = 0;
};

enum class ActionKind { ensure, move, drop, discard };

struct ActionDecl {
  ActionKind kind = ActionKind::ensure;
  std::string value;
  ResidencyLocation location;                  // ensure/drop location, move destination
  std::optional<ResidencyLocation> from;       // move source
  int line = 0;
};

struct ReservationDecl {
  ResidencyLocation location;
  std::int64_t bytes = 0;
  std::string label;
};

// One requirement of a controller request: `value` resident `at`.
struct RequirementDecl {
  std::string value;
  ResidencyLocation location;
};

struct PlanDecl {
  std::string name;
  std::vector<ActionDecl> reclaim, enter, exit;
  std::vector<ReservationDecl> reservations;
  int line = 0;
};

struct LocationExpect {
  std::optional<std::int64_t> budget, used, reserved, peak_used, peak_charged;
  std::optional<std::optional<std::int64_t>> remaining;  // nullopt inside = expected absent
  std::optional<std::int64_t> values, reservations, uses, holds, pending;
};

// One transition report of a step (a primitive's, or each of a plan's).
// Unset fields are not checked; locations may be expected absent.
struct TransitionExpect {
  std::optional<std::string> action;  // described with value names: "move w pinned-host -> cuda:0"
  std::optional<bool> no_op;
  std::optional<std::optional<ResidencyLocation>> source, destination;
  std::optional<std::int64_t> logical_bytes, storage_bytes;
  std::optional<std::optional<ResidencyLocation>> allocator_device;  // the CUDA device sampled, or none
  std::optional<std::string> reason;  // substring; "none" = no reason
};

// One action's explanation.
struct ExplanationExpect {
  std::optional<std::string> action;
  std::optional<bool> executable, no_op;
  std::optional<std::optional<ResidencyLocation>> source, destination;
  std::optional<std::int64_t> logical_bytes, storage_bytes;
  std::optional<std::string> reason;  // substring; "none" = no reason
};

// One materialization's facts.
struct MaterializationExpect {
  std::optional<std::int64_t> charged, logical, storage, uses, holds, pending;
};

// One value's facts in the snapshot after the step.
struct ValueFactsExpect {
  std::optional<bool> has_source;
  std::optional<std::optional<ResidencyLocation>> source_at;
  std::optional<std::string> type, mode, recoverability;
  std::optional<std::int64_t> logical_bytes, storage_bytes;
  std::map<ResidencyLocation, MaterializationExpect> at;
};

// A budget error's numbers.
struct BudgetErrorExpect {
  std::optional<ResidencyLocation> location;
  std::optional<std::int64_t> budget, used, reserved, requested;
};

struct Expectation {
  std::optional<std::string> error;           // error kind, "none", "any" (must fail) or "maybe"
  std::optional<std::string> message;         // substring of the error message
  std::optional<bool> injected;               // the error (or its cause) came from a fault rule
  std::optional<bool> no_op;
  std::optional<std::optional<ResidencyLocation>> source;
  std::optional<std::optional<ResidencyLocation>> destination;
  std::optional<std::string> reason;          // substring of the report/explanation reason
  std::optional<std::string> phase;           // plan execution error phase
  std::optional<std::int64_t> failed_index;   // failed action or reservation index
  std::optional<std::int64_t> committed;      // transitions in the (partial) plan report
  std::optional<bool> feasible;
  std::map<ResidencyLocation, std::int64_t> predicted_peak;
  std::map<ResidencyLocation, LocationExpect> locations;
  std::map<std::string, std::vector<ResidencyLocation>> resident;  // value -> locations, in order
  std::map<std::string, bool> discarded;
  std::optional<std::int64_t> faults_fired;   // total fired so far
  std::optional<std::int64_t> diagnostics;    // total manager diagnostics so far
  // decide / use: the controller's decision.
  std::optional<std::vector<ActionDecl>> reclaim;  // chosen reclaim actions, exactly
  std::optional<std::vector<ActionDecl>> enter;    // enter actions, exactly
  std::optional<std::int64_t> evictions;           // number of evictions
  std::optional<std::int64_t> explored_states;     // search states explored, exactly
  // State and reports.
  std::optional<std::uint64_t> state_version;      // after the step
  std::optional<std::int64_t> version_delta;       // after the step minus before it
  std::optional<std::vector<std::string>> trace;   // the manager's trace after the step, described
  std::optional<std::vector<TransitionExpect>> transitions;
  std::optional<std::vector<ExplanationExpect>> explanation;
  std::map<std::string, ValueFactsExpect> facts;
  std::vector<ResidencyLocation> unregistered;     // locations the snapshot must not list
  // Error fields.
  std::optional<BudgetErrorExpect> budget_error;
  std::optional<std::uint64_t> stale_expected, stale_actual;
  std::optional<std::string> failed_action;        // described with value names
  std::optional<std::string> failed_reservation;   // label
};

// A handle written out instead of a value name, to test bad input: `id`
// (blank = malformed), the issuing manager (`this` or `foreign`) and type.
struct HandleSpec {
  std::string id;
  bool foreign = false;
  std::string type_name = "Tensor";
};

enum class StepKind {
  adopt, register_source, ensure, copy, move, drop, discard, execute, explain, scope_enter, scope_close,
  acquire, add_consumer_stream, release, abandon, hold, reserve, snapshot, close, advance, complete, work, verify,
  arm, disarm, decide, use, end_use, set_policy_metadata
};
const char* to_string(StepKind kind) noexcept;

struct Step {
  StepKind kind = StepKind::snapshot;
  int line = 0;
  std::string value;                        // adopt, register_source, ensure, copy, move, drop, discard
  std::optional<HandleSpec> handle;         // ensure, copy, move, drop, discard: instead of `value`
  std::vector<std::string> values;          // acquire, hold, verify
  std::optional<ResidencyLocation> location;  // at / to
  std::optional<ResidencyLocation> from;
  std::optional<StreamRef> stream;
  std::string name;                         // lifetime name (as:), lease/hold/reservation/scope reference
  std::string lifetime_kind;                // release: lease | hold | reservation; abandon: also scope
  std::string plan;                         // explain / scope_enter plan name, execute plan name
  std::vector<ActionDecl> actions;          // execute
  std::map<ResidencyLocation, StreamRef> transfer_streams;  // execute, scope_enter
  // Stale-decision checks: an explicit version, or one remembered by an earlier step.
  std::optional<std::uint64_t> expected_version;
  std::string expected_version_ref;
  std::string remember_version;             // record state_version after this step under this name
  bool wait = false;
  bool force = false;
  std::int64_t ns = 0;
  std::int64_t bytes = 0;
  std::string label;
  std::optional<FaultRule> fault;           // arm
  // decide / use: the request (its name is `plan`); use: consumer streams.
  std::vector<RequirementDecl> requirements;
  std::vector<ReservationDecl> reservations;
  std::map<ResidencyLocation, StreamRef> consumer_streams;
  std::string decision;                     // scope_enter: a decision remembered by a decide step
  std::int64_t priority = 0;                // set_policy_metadata
  std::optional<std::string> stable_key;    // set_policy_metadata
  Expectation expect;
};

// Bounds on what one scenario may make the replay do; each can be raised in
// the file (`limits: {value_bytes: 16GiB, steps: 1000000, virtual_ns: ...}`).
struct ScenarioLimits {
  // Declared bytes of all values together (they are real allocations).
  std::int64_t value_bytes = std::int64_t{4} << 30;
  std::int64_t steps = 100000;
  // Virtual time the run may reach, counted from its start (~11.6 days).
  std::int64_t virtual_ns = 1'000'000'000'000'000;
};

struct Scenario {
  std::string file;
  std::string name;
  std::string description;
  std::uint64_t seed = 1;
  // Canary: the replay must fail with a message containing this text.
  std::optional<std::string> must_fail;
  residency::LocationBudgets budgets;  // in the file's order
  std::int64_t trace_capacity = 4096;
  std::string runtime = "simulated";        // simulated | torch
  int cuda_devices = 2;
  std::map<ResidencyLocation, std::int64_t> capacity;
  bool can_pin = true;
  std::int64_t copy_ns_per_mib = 0;
  std::vector<FaultRule> faults;
  // The controller (decide / use steps): DeterministicTieredLRU's tiers.
  std::vector<std::pair<ResidencyLocation, std::vector<ResidencyLocation>>> fallback_tiers;
  std::int64_t search_state_limit = 100000;
  std::vector<ValueDecl> values;
  std::vector<PlanDecl> plans;
  std::vector<Step> steps;
  ScenarioLimits limits;

  const ValueDecl* find_value(const std::string& value) const;
  const PlanDecl* find_plan(const std::string& plan) const;
};

}  // namespace fhelium::harness
