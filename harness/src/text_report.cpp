#include "fhelium/harness/text_report.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <vector>

namespace fhelium::harness {

namespace {

using Row = std::vector<std::string>;

std::string render_table(const Row& header, const std::vector<Row>& rows) {
  std::vector<std::size_t> widths(header.size());
  for (std::size_t i = 0; i < header.size(); ++i) widths[i] = header[i].size();
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < row.size() && i < widths.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::ostringstream out;
  const auto line = [&](const Row& row) {
    std::string text;
    for (std::size_t i = 0; i < widths.size(); ++i) {
      const std::string cell = i < row.size() ? row[i] : "";
      text += (i == 0 ? "" : "  ") + cell + std::string(widths[i] - cell.size(), ' ');
    }
    text.erase(text.find_last_not_of(' ') + 1);
    out << text << '\n';
  };
  line(header);
  Row rule;
  for (const auto width : widths) rule.push_back(std::string(width, '-'));
  line(rule);
  for (const auto& row : rows) line(row);
  return out.str();
}

std::string optional_bytes(const std::optional<std::int64_t>& bytes) { return bytes ? format_bytes(*bytes) : "-"; }

}  // namespace

std::string markup_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default:
        // Control characters are not allowed in XML 1.0 text.
        out += static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t' ? ' ' : c;
    }
  }
  return out;
}

std::string format_bytes(std::int64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024 && bytes > -1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  int unit = 0;
  while ((value >= 1024.0 || value <= -1024.0) && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f %s", value, units[unit]);
  return buffer;
}

std::string format_snapshot(const residency::ResidencySnapshot& snapshot) {
  std::vector<Row> locations;
  for (const auto& item : snapshot.locations) {
    locations.push_back({item.location.name(), optional_bytes(item.budget_bytes), format_bytes(item.used_bytes),
                         format_bytes(item.reserved_bytes), optional_bytes(item.remaining_budget_bytes),
                         format_bytes(item.peak_used_bytes), format_bytes(item.peak_charged_bytes),
                         std::to_string(item.value_count), std::to_string(item.use_count),
                         std::to_string(item.hold_count), std::to_string(item.pending_event_count),
                         optional_bytes(item.allocator_allocated_bytes)});
  }
  std::vector<Row> values;
  for (const auto& value : snapshot.values) {
    std::string where;
    for (const auto& item : value.materializations) {
      where += (where.empty() ? "" : ", ") + item.location.name();
      if (item.is_protected()) {
        where += " (use " + std::to_string(item.use_count) + ", hold " + std::to_string(item.hold_count) +
                 ", pending " + std::to_string(item.pending_event_count) + ")";
      }
    }
    if (value.discarded) where = "discarded";
    if (where.empty()) where = value.has_source ? "not loaded (source at " + value.source_location->name() + ")" : "-";
    values.push_back({value.handle.handle_id, value.spec.value_type, std::string(residency::to_string(value.spec.replica_mode)),
                      std::string(residency::to_string(value.spec.recoverability)),
                      format_bytes(value.spec.storage_nbytes), where});
  }
  std::ostringstream out;
  out << "manager " << snapshot.manager_id << ", state_version " << snapshot.state_version << ", "
      << snapshot.values.size() << " value(s), " << snapshot.reservations.size() << " reservation(s)\n\n";
  out << render_table({"location", "budget", "used", "reserved", "remaining", "peak used", "peak charged", "values",
                       "uses", "holds", "pending", "allocator"},
                      locations);
  out << '\n'
      << render_table({"handle", "type", "mode", "recoverability", "charge", "materialized at"}, values);
  return out.str();
}

std::string format_explanation(const residency::ResidencyPlanExplanation& explanation) {
  std::vector<Row> actions;
  for (std::size_t i = 0; i < explanation.actions.size(); ++i) {
    const auto& item = explanation.actions[i];
    actions.push_back({std::to_string(i), residency::describe(item.action),
                       item.no_op ? "no-op" : (item.executable ? "ok" : "BLOCKED"),
                       item.source ? item.source->name() : "-", item.destination ? item.destination->name() : "-",
                       format_bytes(item.storage_nbytes), item.reason.value_or("")});
  }
  std::vector<Row> peaks;
  for (const auto& [location, bytes] : explanation.predicted_peak_bytes) {
    peaks.push_back({location.name(), format_bytes(bytes)});
  }
  std::ostringstream out;
  out << "plan '" << explanation.plan_name << "': "
      << (explanation.feasible ? "feasible" : "INFEASIBLE: " + explanation.reason.value_or("")) << "\n\n";
  out << render_table({"#", "action", "verdict", "source", "destination", "charge", "reason"}, actions) << '\n';
  out << render_table({"location", "predicted peak"}, peaks);
  return out.str();
}

}  // namespace fhelium::harness
