// A deliberately naive reference model of the residency manager's observable
// state, for model-based property tests. It knows nothing of the manager's
// internals: plain vectors and maps, recomputed from the specification of each
// operation. A transition either returns an error kind and leaves the model
// untouched, or applies its effect and returns "ok" / "no-op".
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fhelium/residency/location.hpp"

namespace fhelium::property {

using residency::ResidencyLocation;
using residency::LocationBudgets;

// The universe the tests draw from.
const std::vector<ResidencyLocation>& all_locations();
// Budgets the manager under test is built with.
const LocationBudgets& budgets();

struct ModelValue {
  std::int64_t charge = 0;
  bool exclusive = true;
  bool source = false;  // registered source (RECONSTRUCTIBLE) instead of adopted
  ResidencyLocation source_location;
  bool flaky = false;   // its source fails on the first load
  bool reenters = false;  // its source calls the manager back on the first load (refused: reentrancy)
  std::int64_t loads = 0;
  std::vector<ResidencyLocation> at;  // insertion order
  std::map<ResidencyLocation, std::int64_t> uses, holds, pending;
  bool discarded = false;
};

struct ModelLocation {
  std::optional<std::int64_t> budget;
  std::int64_t used = 0, reserved = 0, peak_used = 0, peak_charged = 0;
};

struct ModelLease {
  std::vector<std::size_t> values;
  ResidencyLocation location;
  bool pending = false;
  std::int64_t completes_at_ns = 0;
  std::vector<int> streams{1};  // consumer stream ids on the lease's device (CUDA only)
};

struct ModelHold {
  std::vector<std::size_t> values;
  ResidencyLocation location;
};

struct ModelReservation {
  ResidencyLocation location;
  std::int64_t bytes = 0;
};

enum class PrimitiveKind { ensure, move, drop, discard };

struct Primitive {
  PrimitiveKind kind = PrimitiveKind::ensure;
  std::size_t value = 0;  // index into Model::values; may be past the end (unknown handle)
  ResidencyLocation location;  // ensure/drop location, move destination
  std::optional<ResidencyLocation> from;
};

// The fields of the transition report a successful or no-op primitive yields.
struct PredictedReport {
  bool no_op = false;
  std::optional<ResidencyLocation> source, destination;
  std::int64_t logical_nbytes = 0, storage_nbytes = 0;
  // The CUDA device whose allocator the report samples (index), if any.
  std::optional<int> allocator_device;
};

struct Model {
  std::vector<ModelValue> values;
  std::vector<ResidencyLocation> registered;  // registration order
  std::map<ResidencyLocation, ModelLocation> locations;
  std::map<std::size_t, ModelLease> leases;
  std::map<std::size_t, ModelHold> holds;
  std::map<std::size_t, ModelReservation> reservations;
  std::size_t next_lifetime = 0;
  std::int64_t now_ns = 0;
  // When the work enqueued on consumer stream (device, id) ends; ids 1 and 2.
  std::map<std::pair<int, int>, std::int64_t> stream_tail_ns;
  // The manager's state_version, predicted exactly: one bump per registered
  // location, installed or removed materialization, registered or discarded
  // value, granted or ended lifetime, and reaped pending lease.
  std::uint64_t version = 0;
  // Set by apply() when the primitive succeeds or is a no-op.
  PredictedReport report;
  bool copy_fault_armed = false;     // the next runtime copy fails (once)
  bool record_fault_armed = false;   // the next event record fails (once)
  // Every event query fails while armed: no pending lease is released by
  // observation, and explain counts them protected. Waits still complete.
  bool query_faults_armed = false;
  // Diagnostics the manager records (abandoned lifetimes, event-record
  // fallbacks); each one calls the diagnostic sink once.
  std::int64_t diagnostics = 0;

  Model();

  // --- queries -----------------------------------------------------------
  bool known(std::size_t value) const { return value < values.size() && !values[value].discarded; }
  bool resident(std::size_t value, const ResidencyLocation& location) const;
  bool protected_at(std::size_t value, const ResidencyLocation& location) const;
  std::int64_t counted(std::size_t value, const std::map<ResidencyLocation, std::int64_t> ModelValue::*field,
                       const ResidencyLocation& location) const;

  // --- transitions: return the outcome ("ok", "no-op" or an error kind) ---
  std::string adopt(std::int64_t charge, const ResidencyLocation& at, bool exclusive);
  std::string register_source(std::int64_t charge, const ResidencyLocation& at, bool exclusive, bool flaky,
                              bool reenters = false);
  // `loads_succeed`: plan preflight assumes sources load (explain cannot know).
  std::string apply(const Primitive& primitive, bool faults_active = true);
  std::string acquire(const std::vector<std::size_t>& values, const ResidencyLocation& at, std::size_t& id,
                      std::vector<int> streams = {1});
  std::string release_lease(std::size_t id, bool wait);
  std::string hold(const std::vector<std::size_t>& values, const ResidencyLocation& at, std::size_t& id);
  std::string release_hold(std::size_t id);
  std::string reserve(const ResidencyLocation& at, std::int64_t bytes, std::size_t& id);
  std::string release_reservation(std::size_t id);
  void work(int device, std::int64_t ns, int stream = 1);
  void advance(std::int64_t ns);
  // Completed pending leases stop protecting (what every snapshot observes).
  void reap();

 private:
  // "handle" / "unavailable" for the first value not resident at `at`, else "".
  std::string all_resident(const std::vector<std::size_t>& values, const ResidencyLocation& at) const;
  std::string check_admission(const ResidencyLocation& location, std::int64_t bytes) const;
  std::string apply_primitive(const Primitive& primitive, bool faults_active);
  void register_location(const ResidencyLocation& location);
  void raise_peaks(ModelLocation& state);
  void install(std::size_t value, const ResidencyLocation& location);
  void remove(std::size_t value, const ResidencyLocation& location);
  // Makes a value available to copy from; returns an error kind or "" and
  // whether a temporary reconstruction charge is held at `source`.
  std::string transfer_source(std::size_t value, ResidencyLocation& source, bool& temporary, bool faults_active);
  std::string materialize(std::size_t value, const ResidencyLocation& source, bool temporary,
                          const ResidencyLocation& destination, bool faults_active);
};

// Dry run of `primitives` (then nothing else) the way explain sees it: loads
// succeed and no fault fires. Returns the first error kind, or "".
std::string preflight(const Model& model, const std::vector<Primitive>& primitives);
// The peak charge (used + reserved, temporary charges included) that a
// feasible dry run of `primitives` reaches at each location it or the model
// knows, counted from the current charges: explain's predicted_peak_bytes.
std::map<ResidencyLocation, std::int64_t> predicted_peaks(const Model& model, const std::vector<Primitive>& primitives);

}  // namespace fhelium::property
