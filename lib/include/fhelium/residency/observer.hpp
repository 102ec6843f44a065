// Observing a manager's public calls: an OperationObserver set in
// ManagerOptions receives, after each call that changes or may change
// manager state, a tensor-free record of its arguments and its outcome.
// Recorders (the harness's ScenarioRecorder turns them into a scenario that
// replays on the simulated runtime), audit logs and tracing build on it.
//
// Observed: adopt, register_source, ensure/copy, move, drop, discard,
// execute_actions, explain, a scope's enter, close and abandonment, acquire,
// add_consumer_stream, the release and abandonment of leases, holds and
// reservations, hold, reserve, close. Not observed: the read-only queries
// (snapshot, trace, diagnostics, locations, state_version) and lease value
// reads, so an observer may call those freely.
//
// The observer runs on the calling thread after the call has returned or
// thrown, without the manager's state lock held. Calls from several threads
// reach it concurrently: it must synchronize itself. An exception it throws
// is dropped and recorded as a manager diagnostic; the call's own outcome is
// unchanged.
#pragma once

#include <c10/core/Stream.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fhelium/residency/location.hpp"
#include "fhelium/residency/model.hpp"
#include "fhelium/residency/plan.hpp"

namespace fhelium::residency {

using TransferStreams = std::map<ResidencyLocation, c10::Stream>;

enum class ObservedCall {
  adopt, register_source, ensure, move, drop, discard, execute_actions, explain,
  scope_enter, scope_close, scope_abandon,
  acquire, add_consumer_stream, lease_release, lease_abandon,
  hold, hold_release, hold_abandon,
  reserve, reservation_release, reservation_abandon,
  close
};
const char* to_string(ObservedCall call) noexcept;

struct ObservedOperation {
  ObservedCall call = ObservedCall::ensure;
  std::string manager_id;
  // The handles the call names, in order. adopt / register_source: the handle
  // it issued (none when it failed).
  std::vector<ResidencyHandle> handles;
  // adopt / register_source: the value's spec (adopt: as the manager
  // recorded it; absent when the adoption failed before).
  std::optional<ResidencyValueSpec> spec;
  // ensure / acquire / hold / drop: at; move: to; adopt: where the value was
  // adopted (the runtime's answer when the call named none); register_source:
  // the source location; reserve: the reserved location.
  std::optional<ResidencyLocation> location;
  std::optional<ResidencyLocation> from;  // move's explicit source
  // The transition's stream, the lease's consumer stream, or the stream added.
  std::optional<c10::Stream> stream;
  ReplicaMode replica_mode = ReplicaMode::exclusive;  // adopt
  std::vector<ResidencyAction> actions;               // execute_actions
  std::optional<ResidencyPlan> plan;                  // explain, scope_enter
  std::string name;                                   // execute_actions: plan name; reserve: label
  TransferStreams transfer_streams;                   // execute_actions, scope_enter
  std::optional<std::uint64_t> expected_state_version;
  // reserve: the bytes asked for; adopt: the value's logical bytes.
  std::int64_t nbytes = 0;
  bool wait = false;   // lease_release, close
  bool force = false;  // close
  // The lease, hold, reservation or scope the call made or ended; ids are
  // unique per manager and kind (0: none, e.g. a refused acquire).
  std::uint64_t lifetime = 0;
  bool no_op = false;  // a transition that found nothing to do; a scope close of a failed entry
  // How the call failed; null when it returned normally.
  std::exception_ptr error;
};

using OperationObserver = std::function<void(const ObservedOperation&)>;

}  // namespace fhelium::residency
