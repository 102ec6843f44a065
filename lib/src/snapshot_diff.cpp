#include "fhelium/residency/snapshot_diff.hpp"

#include <map>
#include <optional>
#include <utility>

namespace fhelium::residency {

namespace {

const std::string absent = "absent";

std::string text(const std::optional<std::int64_t>& value) { return value ? std::to_string(*value) : "none"; }
std::string text(const std::optional<ResidencyLocation>& value) { return value ? value->name() : "none"; }
std::string text(bool value) { return value ? "true" : "false"; }

class Differ {
 public:
  std::vector<SnapshotDifference> result;

  void field(const std::string& path, const std::string& before, const std::string& after) {
    if (before != after) result.push_back({path, before, after});
  }

  void materializations(const std::string& path, const ResidencyValueSnapshot* before,
                        const ResidencyValueSnapshot* after) {
    std::map<ResidencyLocation, std::pair<const MaterializationSnapshot*, const MaterializationSnapshot*>> places;
    if (before != nullptr) {
      for (const auto& item : before->materializations) places[item.location].first = &item;
    }
    if (after != nullptr) {
      for (const auto& item : after->materializations) places[item.location].second = &item;
    }
    for (const auto& [location, pair] : places) {
      const std::string at = path + "/materializations/" + location.name();
      const auto* was = pair.first;
      const auto* now = pair.second;
      if (was == nullptr || now == nullptr) {
        field(at, was ? summary(*was) : absent, now ? summary(*now) : absent);
        continue;
      }
      field(at + "/logical_nbytes", std::to_string(was->logical_nbytes), std::to_string(now->logical_nbytes));
      field(at + "/storage_nbytes", std::to_string(was->storage_nbytes), std::to_string(now->storage_nbytes));
      field(at + "/charged_nbytes", std::to_string(was->charged_nbytes), std::to_string(now->charged_nbytes));
      field(at + "/use_count", std::to_string(was->use_count), std::to_string(now->use_count));
      field(at + "/hold_count", std::to_string(was->hold_count), std::to_string(now->hold_count));
      field(at + "/pending_event_count", std::to_string(was->pending_event_count),
            std::to_string(now->pending_event_count));
    }
  }

  static std::string summary(const MaterializationSnapshot& item) {
    return std::to_string(item.charged_nbytes) + " B charged, uses " + std::to_string(item.use_count) + ", holds " +
           std::to_string(item.hold_count) + ", pending " + std::to_string(item.pending_event_count);
  }

  void values(const ResidencySnapshot& before, const ResidencySnapshot& after) {
    // Values keep registration order; handles are unique within one manager.
    std::vector<std::string> order;
    std::map<std::string, std::pair<const ResidencyValueSnapshot*, const ResidencyValueSnapshot*>> by_id;
    for (const auto& value : before.values) {
      order.push_back(value.handle.handle_id);
      by_id[value.handle.handle_id].first = &value;
    }
    for (const auto& value : after.values) {
      if (by_id.count(value.handle.handle_id) == 0) order.push_back(value.handle.handle_id);
      by_id[value.handle.handle_id].second = &value;
    }
    for (const auto& id : order) {
      const auto [was, now] = by_id[id];
      const std::string path = "/values/" + id;
      if (was == nullptr || now == nullptr) {
        const auto* present = was ? was : now;
        const std::string description = present->spec.value_type + ", " + std::to_string(present->spec.storage_nbytes) +
                                        " B, " + std::to_string(present->materializations.size()) +
                                        " materialization(s)";
        field(path, was ? description : absent, now ? description : absent);
        materializations(path, was, now);
        continue;
      }
      field(path + "/discarded", text(was->discarded), text(now->discarded));
      field(path + "/has_source", text(was->has_source), text(now->has_source));
      field(path + "/source_location", text(was->source_location), text(now->source_location));
      materializations(path, was, now);
    }
  }

  void locations(const ResidencySnapshot& before, const ResidencySnapshot& after) {
    std::vector<ResidencyLocation> order;
    std::map<ResidencyLocation, std::pair<const ResidencyLocationSnapshot*, const ResidencyLocationSnapshot*>> by;
    for (const auto& location : before.locations) {
      order.push_back(location.location);
      by[location.location].first = &location;
    }
    for (const auto& location : after.locations) {
      if (by.count(location.location) == 0) order.push_back(location.location);
      by[location.location].second = &location;
    }
    for (const auto& location : order) {
      const auto [was, now] = by[location];
      const std::string path = "/locations/" + location.name();
      if (was == nullptr || now == nullptr) {
        field(path, was ? "registered" : absent, now ? "registered" : absent);
        continue;
      }
      field(path + "/budget_bytes", text(was->budget_bytes), text(now->budget_bytes));
      field(path + "/used_bytes", std::to_string(was->used_bytes), std::to_string(now->used_bytes));
      field(path + "/reserved_bytes", std::to_string(was->reserved_bytes), std::to_string(now->reserved_bytes));
      field(path + "/peak_used_bytes", std::to_string(was->peak_used_bytes), std::to_string(now->peak_used_bytes));
      field(path + "/peak_charged_bytes", std::to_string(was->peak_charged_bytes),
            std::to_string(now->peak_charged_bytes));
      field(path + "/value_count", std::to_string(was->value_count), std::to_string(now->value_count));
      field(path + "/reservation_count", std::to_string(was->reservation_count),
            std::to_string(now->reservation_count));
      field(path + "/use_count", std::to_string(was->use_count), std::to_string(now->use_count));
      field(path + "/hold_count", std::to_string(was->hold_count), std::to_string(now->hold_count));
      field(path + "/pending_event_count", std::to_string(was->pending_event_count),
            std::to_string(now->pending_event_count));
    }
  }

  void reservations(const ResidencySnapshot& before, const ResidencySnapshot& after) {
    // Reservations have no identity but their fields: compare as multisets.
    std::map<std::pair<std::string, std::string>, std::pair<int, int>> counts;
    const auto key = [](const ResidencyReservationSnapshot& item) {
      return std::make_pair(item.location.name(), item.label + " (" + std::to_string(item.nbytes) + " B)");
    };
    for (const auto& item : before.reservations) counts[key(item)].first += 1;
    for (const auto& item : after.reservations) counts[key(item)].second += 1;
    for (const auto& [where, count] : counts) {
      if (count.first == count.second) continue;
      field("/reservations/" + where.first + "/" + where.second, std::to_string(count.first) + " held",
            std::to_string(count.second) + " held");
    }
  }
};

}  // namespace

std::vector<SnapshotDifference> diff(const ResidencySnapshot& before, const ResidencySnapshot& after) {
  Differ differ;
  if (before.manager_id != after.manager_id) differ.field("/manager_id", before.manager_id, after.manager_id);
  differ.values(before, after);
  differ.locations(before, after);
  differ.reservations(before, after);
  differ.field("/state_version", std::to_string(before.state_version), std::to_string(after.state_version));
  return differ.result;
}

std::string describe(const SnapshotDifference& difference) {
  return difference.path + ": " + difference.before + " -> " + difference.after;
}

}  // namespace fhelium::residency
