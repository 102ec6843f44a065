// Transitions: carries out what the transition rules decide for one value.
//
// It owns the steps every transition is made of: reconstructing a value from
// its registered source under a temporary charge, copying it through the
// runtime, installing a materialization (validated, admitted against the
// budget, its storage claimed so no other value can alias it), removing one
// and discarding the value. Each step keeps the value table, its storage
// index and the location ledger consistent with one another, and bumps the
// state version for every change it makes. It runs under the state lock of
// its owner; a source load runs with the gate's loading flag set, so that the
// load cannot call back into the manager.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "detail/ledger.hpp"
#include "detail/state_gate.hpp"
#include "detail/transition_rules.hpp"
#include "detail/value_table.hpp"
#include "fhelium/residency/plan.hpp"
#include "fhelium/residency/runtime.hpp"

namespace fhelium::residency::detail {

class Transitions {
 public:
  // `version` is the owner's state version.
  Transitions(DeviceRuntime& runtime, ValueTable& values, LocationLedger& ledger, StateGate& gate,
              std::uint64_t& version)
      : runtime_(runtime), values_(values), ledger_(ledger), gate_(gate), version_(version) {}

  // The runtime's checks of an action's locations and of its transfer stream
  // (only ensure and move take one; a drop or discard given one is a bug);
  // throws std::invalid_argument. These three take an action of one type
  // (EnsureResident, MoveResident, DropResident or DiscardValue): a caller
  // that knows the type runs only that type's code, and one holding a
  // ResidencyAction dispatches once.
  template <class Action>
  void check_arguments(const Action& action, const std::optional<c10::Stream>& stream) const;

  // Decides `action` for `record` with the transition rules, then throws the
  // error a refusal stands for, or carries the decision out unless it is a
  // no-op. On a failure part way (a copy or a load that throws) the state is
  // as before the action: temporary charges are returned, nothing installed.
  template <class Action>
  TransitionDecision decide_and_apply(const Action& action, ValueRecord& record,
                                      const std::optional<c10::Stream>& stream);
  // Carries out `planned`, the decision a plan's preflight made for `action`
  // on `record` by the same rules against a shadow of the state the action
  // now meets (a preflight that admitted the plan refused nothing), and
  // returns it; a record with a protected materialization is decided again
  // (decide_and_apply), since its protection may have outlived the shadow's.
  template <class Action>
  TransitionDecision apply_planned(const TransitionDecision& planned, const Action& action, ValueRecord& record,
                                   const std::optional<c10::Stream>& stream);

  // Installs `value` as `record`'s materialization at `location`. An
  // EXCLUSIVE value may gain a second one only when
  // `allow_exclusive_transition` (a move, which removes the first next).
  // The value is validated at `location`; storage already under management
  // is refused (ResidencyOwnershipError) before the budget is consulted. On
  // a refusal nothing is installed (`value` is then consumed).
  void install(ValueRecord& record, const ResidencyLocation& location, ResidentValue&& value,
               bool allow_exclusive_transition);
  // Removes `record`'s materialization at `location`, which exists and is
  // not protected.
  void remove(ValueRecord& record, const ResidencyLocation& location);
  // Registers `location` in the ledger on first use (a change: it bumps).
  void register_location(const ResidencyLocation& location);

 private:
  // Throws ResidencyInUseError naming the protection counts when `item` is protected.
  static void require_removable(const ValueRecord& record, const Materialization& item);

  // A value loaded to be copied elsewhere, validated where it was made (the
  // source location), and its storage keys.
  struct Loaded {
    ResidentValue value;
    StorageKeys keys;
  };

  void raise_refusal(const ValueRecord& record, const TransitionDecision& decision) const;
  // Carries out a decision that refused nothing; a no-op changes nothing.
  void apply(ValueRecord& record, const TransitionDecision& decision, const std::optional<c10::Stream>& stream);
  void discard(ValueRecord& record);
  // Copies `from` (a replica of `record`, or its loaded value) to
  // `destination` through the runtime and installs the copy.
  void copy_in(ValueRecord& record, const ResidentValue& from, const ResidencyLocation& destination,
               const std::optional<c10::Stream>& stream, bool allow_exclusive_transition);
  // Reconstructs the value from its source under a temporary charge at the
  // source location, held until the value is installed, then installs it at
  // `destination` (directly when that is the source location).
  void load_in(ValueRecord& record, const ResidencyLocation& destination, const std::optional<c10::Stream>& stream,
               bool allow_exclusive_transition);
  // Throws what installing a materialization of `record` at `location`
  // must refuse before its value is made: an EXCLUSIVE value's second one
  // (unless `allow_exclusive_transition`). One already there is a bug.
  void require_new(const ValueRecord& record, const ResidencyLocation& location,
                   bool allow_exclusive_transition) const;
  // Completes `item`, just added as the last of `record`'s materializations
  // with its value: validates the value at its location, claims its storage
  // and charges it there, or, on a refusal, removes it again, leaving the
  // value table and the ledger as they were. With `reserved`, the charge is
  // already held as reserved bytes at the item's location (a load where it
  // stays, its location registered): that reservation becomes the used
  // charge, with no second admission; on a refusal it is left reserved for
  // its holder to return.
  template <bool reserved = false>
  void install(ValueRecord& record, Materialization& item);
  // Runs the source with the gate's loading flag set.
  ResidentValue run_source(ValueRecord& record);
  // run_source(), then validates what it returned at `location`.
  Loaded load(ValueRecord& record, const ResidencyLocation& location);
  void validate(const ResidencyValueSpec& spec, const ResidentValue& value, const ResidencyLocation& location) const;
  void bump() { ++version_; }

  DeviceRuntime& runtime_;
  ValueTable& values_;
  LocationLedger& ledger_;
  StateGate& gate_;
  std::uint64_t& version_;
};

}  // namespace fhelium::residency::detail
