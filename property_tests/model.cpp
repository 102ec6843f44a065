#include "model.hpp"

#include <algorithm>

namespace fhelium::property {

using namespace residency;

const std::vector<ResidencyLocation>& all_locations() {
  static const std::vector<ResidencyLocation> locations{PAGEABLE_HOST, PINNED_HOST, cuda_location(0),
                                                        cuda_location(1)};
  return locations;
}

const LocationBudgets& budgets() {
  // Deliberately not in location order: the manager must keep the caller's.
  static const LocationBudgets limits{{cuda_location(0), 12 * 1024}, {PINNED_HOST, 16 * 1024}};
  return limits;
}

Model::Model() {
  for (const auto& [location, budget] : budgets()) {
    registered.push_back(location);
    locations[location].budget = budget;  // budgets register at construction: no bump
  }
}

bool Model::resident(std::size_t value, const ResidencyLocation& location) const {
  const auto& at = values[value].at;
  return std::find(at.begin(), at.end(), location) != at.end();
}

std::int64_t Model::counted(std::size_t value, const std::map<ResidencyLocation, std::int64_t> ModelValue::*field,
                            const ResidencyLocation& location) const {
  const auto& counts = values[value].*field;
  const auto found = counts.find(location);
  return found == counts.end() ? 0 : found->second;
}

bool Model::protected_at(std::size_t value, const ResidencyLocation& location) const {
  return counted(value, &ModelValue::uses, location) > 0 || counted(value, &ModelValue::holds, location) > 0 ||
         counted(value, &ModelValue::pending, location) > 0;
}

std::string Model::check_admission(const ResidencyLocation& location, std::int64_t bytes) const {
  const auto found = locations.find(location);
  if (found == locations.end() || !found->second.budget) return "";
  const ModelLocation& state = found->second;
  return state.used + state.reserved + bytes > *state.budget ? "budget" : "";
}

void Model::register_location(const ResidencyLocation& location) {
  if (locations.count(location) == 0) {
    registered.push_back(location);
    locations[location];
    version += 1;
  }
}

void Model::raise_peaks(ModelLocation& state) {
  state.peak_used = std::max(state.peak_used, state.used);
  state.peak_charged = std::max(state.peak_charged, state.used + state.reserved);
}

void Model::install(std::size_t value, const ResidencyLocation& location) {
  register_location(location);
  values[value].at.push_back(location);
  ModelLocation& state = locations[location];
  state.used += values[value].charge;
  raise_peaks(state);
  version += 1;
}

void Model::remove(std::size_t value, const ResidencyLocation& location) {
  auto& at = values[value].at;
  at.erase(std::find(at.begin(), at.end(), location));
  locations[location].used -= values[value].charge;
  version += 1;
}

std::string Model::adopt(std::int64_t charge, const ResidencyLocation& at, bool exclusive) {
  if (const std::string error = check_admission(at, charge); !error.empty()) return error;
  ModelValue value;
  value.charge = charge;
  value.exclusive = exclusive;
  values.push_back(value);
  install(values.size() - 1, at);
  return "ok";
}

std::string Model::register_source(std::int64_t charge, const ResidencyLocation& at, bool exclusive, bool flaky,
                                   bool reenters) {
  register_location(at);
  ModelValue value;
  value.charge = charge;
  value.exclusive = exclusive;
  value.source = true;
  value.source_location = at;
  value.flaky = flaky;
  value.reenters = reenters;
  values.push_back(value);
  version += 1;
  return "ok";
}

std::string Model::transfer_source(std::size_t index, ResidencyLocation& source, bool& temporary,
                                   bool faults_active) {
  ModelValue& value = values[index];
  temporary = false;
  if (!value.at.empty()) {
    source = *std::min_element(value.at.begin(), value.at.end());
    return "";
  }
  if (!value.source) return "unavailable";
  source = value.source_location;
  if (const std::string error = check_admission(source, value.charge); !error.empty()) return error;
  ModelLocation& state = locations[source];
  state.reserved += value.charge;
  raise_peaks(state);
  if (faults_active) {
    value.loads += 1;
    if ((value.flaky || value.reenters) && value.loads == 1) {
      state.reserved -= value.charge;
      return value.reenters ? "reentrancy" : "runtime";
    }
  }
  temporary = true;
  return "";
}

std::string Model::materialize(std::size_t index, const ResidencyLocation& source, bool temporary,
                               const ResidencyLocation& destination, bool faults_active) {
  const std::int64_t charge = values[index].charge;
  const auto release = [&] {
    if (temporary) locations[source].reserved -= charge;
  };
  if (temporary && source == destination) {
    release();
    if (const std::string error = check_admission(destination, charge); !error.empty()) return error;
    install(index, destination);
    return "";
  }
  if (const std::string error = check_admission(destination, charge); !error.empty()) {
    release();
    return error;
  }
  if (faults_active && copy_fault_armed) {
    copy_fault_armed = false;
    release();
    return "out_of_memory";
  }
  install(index, destination);
  release();
  return "";
}

namespace {

// The allocator sampled for an action: the first CUDA location among its
// destination, then its explicit source, or else the value's materializations
// (in insertion order) where the action may take from any of them.
std::optional<int> allocator_device(const Primitive& primitive, const ModelValue& value) {
  const auto first_cuda = [&]() -> std::optional<int> {
    for (const auto& location : value.at) {
      if (location.is_cuda()) return location.cuda_index();
    }
    return std::nullopt;
  };
  switch (primitive.kind) {
    case PrimitiveKind::ensure:
    case PrimitiveKind::drop:
      if (primitive.location.is_cuda()) return primitive.location.cuda_index();
      return std::nullopt;
    case PrimitiveKind::move:
      if (primitive.location.is_cuda()) return primitive.location.cuda_index();
      if (primitive.from) return primitive.from->is_cuda() ? std::optional<int>(primitive.from->cuda_index()) : std::nullopt;
      return first_cuda();
    case PrimitiveKind::discard:
      return first_cuda();
  }
  return std::nullopt;
}

}  // namespace

std::string Model::apply(const Primitive& primitive, bool faults_active) {
  if (!known(primitive.value)) return "handle";
  report = PredictedReport{};
  report.logical_nbytes = report.storage_nbytes = values[primitive.value].charge;
  report.allocator_device = allocator_device(primitive, values[primitive.value]);
  if (primitive.kind == PrimitiveKind::ensure || primitive.kind == PrimitiveKind::move) {
    report.destination = primitive.location;
  }
  if (primitive.kind == PrimitiveKind::drop) report.source = primitive.location;
  const std::string outcome = apply_primitive(primitive, faults_active);
  report.no_op = outcome == "no-op";
  return outcome;
}

std::string Model::apply_primitive(const Primitive& primitive, bool faults_active) {
  ModelValue& value = values[primitive.value];
  const std::size_t index = primitive.value;
  const ResidencyLocation& target = primitive.location;
  switch (primitive.kind) {
    case PrimitiveKind::ensure: {
      if (resident(index, target)) return "no-op";
      if (value.exclusive && !value.at.empty()) return "ownership";
      ResidencyLocation source;
      bool temporary = false;
      if (std::string error = transfer_source(index, source, temporary, faults_active); !error.empty()) return error;
      report.source = source;
      if (std::string error = materialize(index, source, temporary, target, faults_active); !error.empty()) {
        return error;
      }
      return "ok";
    }
    case PrimitiveKind::move: {
      std::optional<ResidencyLocation> chosen;
      if (primitive.from) {
        if (!resident(index, *primitive.from)) return "unavailable";
        chosen = primitive.from;
      } else {
        for (const auto& location : value.at) {
          if (location != target && (!chosen || location < *chosen)) chosen = location;
        }
      }
      report.source = chosen;  // an explicit source equal to the destination is reported too
      if (resident(index, target)) {
        if (!chosen || *chosen == target) return "no-op";
        if (protected_at(index, *chosen)) return "in_use";
        remove(index, *chosen);
        return "ok";
      }
      if (chosen) {
        if (protected_at(index, *chosen)) return "in_use";
        if (std::string error = materialize(index, *chosen, false, target, faults_active); !error.empty()) {
          return error;
        }
        remove(index, *chosen);
        return "ok";
      }
      ResidencyLocation source;
      bool temporary = false;
      if (std::string error = transfer_source(index, source, temporary, faults_active); !error.empty()) return error;
      report.source = source;
      if (std::string error = materialize(index, source, temporary, target, faults_active); !error.empty()) {
        return error;
      }
      return "ok";
    }
    case PrimitiveKind::drop:
      if (!resident(index, target)) return "no-op";
      if (protected_at(index, target)) return "in_use";
      if (value.at.size() == 1 && !value.source) return "ownership";
      remove(index, target);
      return "ok";
    case PrimitiveKind::discard:
      for (const auto& location : value.at) {
        if (protected_at(index, location)) return "in_use";
      }
      while (!value.at.empty()) remove(index, value.at.back());
      value.source = false;
      value.discarded = true;
      version += 1;
      return "ok";
  }
  return "ok";
}

std::string Model::all_resident(const std::vector<std::size_t>& list, const ResidencyLocation& at) const {
  for (const std::size_t value : list) {
    if (!known(value)) return "handle";
    if (!resident(value, at)) return "unavailable";
  }
  return "";
}

std::string Model::acquire(const std::vector<std::size_t>& list, const ResidencyLocation& at, std::size_t& id,
                           std::vector<int> streams) {
  if (std::string error = all_resident(list, at); !error.empty()) return error;
  for (const std::size_t value : list) values[value].uses[at] += 1;
  id = next_lifetime++;
  leases[id] = ModelLease{list, at, false, 0, std::move(streams)};
  version += 1;
  return "ok";
}

std::string Model::release_lease(std::size_t id, bool wait) {
  const auto found = leases.find(id);
  if (found == leases.end() || found->second.pending) return "ok";
  ModelLease& lease = found->second;
  for (const std::size_t value : lease.values) values[value].uses[lease.location] -= 1;
  version += 1;  // the borrow ends (to released, or to pending)
  if (!lease.location.is_cuda()) {
    leases.erase(found);
    return "ok";
  }
  // Protection lasts until every consumer stream's work is done.
  std::int64_t tail = now_ns;
  for (const int stream : lease.streams) {
    tail = std::max(tail, stream_tail_ns[{lease.location.cuda_index(), stream}]);
  }
  if (record_fault_armed) {
    // Recording failed: the consumer stream is synchronized instead.
    record_fault_armed = false;
    diagnostics += 1;
    now_ns = tail;
    leases.erase(found);
    return "ok";
  }
  for (const std::size_t value : lease.values) values[value].pending[lease.location] += 1;
  lease.pending = true;
  lease.completes_at_ns = tail;
  if (wait) {
    // Waiting synchronizes this lease's events, then releases it: proof
    // that needs no query, so failing queries do not keep it.
    now_ns = std::max(now_ns, tail);
    for (const std::size_t value : lease.values) values[value].pending[lease.location] -= 1;
    leases.erase(found);
    version += 1;
    reap();
  }
  return "ok";
}

std::string Model::hold(const std::vector<std::size_t>& list, const ResidencyLocation& at, std::size_t& id) {
  if (std::string error = all_resident(list, at); !error.empty()) return error;
  for (const std::size_t value : list) values[value].holds[at] += 1;
  id = next_lifetime++;
  holds[id] = ModelHold{list, at};
  version += 1;
  return "ok";
}

std::string Model::release_hold(std::size_t id) {
  const auto found = holds.find(id);
  if (found == holds.end()) return "ok";
  for (const std::size_t value : found->second.values) values[value].holds[found->second.location] -= 1;
  holds.erase(found);
  version += 1;
  return "ok";
}

std::string Model::reserve(const ResidencyLocation& at, std::int64_t bytes, std::size_t& id) {
  if (const std::string error = check_admission(at, bytes); !error.empty()) return error;
  register_location(at);
  ModelLocation& state = locations[at];
  state.reserved += bytes;
  raise_peaks(state);
  id = next_lifetime++;
  reservations[id] = ModelReservation{at, bytes};
  version += 1;
  return "ok";
}

std::string Model::release_reservation(std::size_t id) {
  const auto found = reservations.find(id);
  if (found == reservations.end()) return "ok";
  locations[found->second.location].reserved -= found->second.bytes;
  reservations.erase(found);
  version += 1;
  return "ok";
}

void Model::work(int device, std::int64_t ns, int stream) {
  std::int64_t& tail = stream_tail_ns[{device, stream}];
  tail = std::max(tail, now_ns) + ns;
}

void Model::advance(std::int64_t ns) { now_ns += ns; }

void Model::reap() {
  if (query_faults_armed) return;  // every query fails: nothing is proven complete
  for (auto it = leases.begin(); it != leases.end();) {
    ModelLease& lease = it->second;
    if (lease.pending && lease.completes_at_ns <= now_ns) {
      for (const std::size_t value : lease.values) values[value].pending[lease.location] -= 1;
      it = leases.erase(it);
      version += 1;
    } else {
      ++it;
    }
  }
}

std::string preflight(const Model& model, const std::vector<Primitive>& primitives) {
  Model copy = model;
  for (const auto& primitive : primitives) {
    const std::string outcome = copy.apply(primitive, false);
    if (outcome != "ok" && outcome != "no-op") return outcome;
  }
  return "";
}

std::map<ResidencyLocation, std::int64_t> predicted_peaks(const Model& model,
                                                          const std::vector<Primitive>& primitives) {
  Model copy = model;
  for (auto& [location, state] : copy.locations) state.peak_charged = state.used + state.reserved;
  for (const auto& primitive : primitives) copy.apply(primitive, false);
  std::map<ResidencyLocation, std::int64_t> peaks;
  for (const auto& [location, state] : copy.locations) peaks[location] = state.peak_charged;
  return peaks;
}

}  // namespace fhelium::property
