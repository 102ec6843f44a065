#include "fhelium/harness/reporters.hpp"

#include <map>
#include <sstream>

#include "fhelium/harness/fault_coverage.hpp"
#include "fhelium/harness/text_report.hpp"

namespace fhelium::harness {


std::string text_summary(const ScenarioResult& result) {
  std::ostringstream out;
  out << result.verdict << "  " << result.name << "  (" << result.file << ")\n";
  if (result.verdict == "skipped") {
    out << "    skipped: " << result.failure << "\n";
    return out.str();
  }
  if (result.runtime.empty()) {
    out << "    " << result.failure << "\n";
    return out.str();
  }
  out << "    steps " << result.steps_run << ", invariant checks " << result.invariant_checks << ", content checks "
      << result.content_checks << ", seed " << result.seed << ", runtime " << result.runtime << "\n";
  if (!result.faults.empty()) {
    std::map<std::string, std::int64_t> by_rule;
    for (const auto& fault : result.faults) by_rule[fault.rule + " (" + fault.operation + ")"] += 1;
    out << "    faults fired:";
    for (const auto& [rule, count] : by_rule) out << " " << rule << " x" << count;
    out << "\n";
  }
  if (!result.error_paths.empty()) {
    out << "    error paths reached:";
    for (const auto& [kind, count] : result.error_paths) out << " " << kind << " x" << count;
    out << "\n";
  }
  if (!result.peak_charged.empty()) {
    out << "    peak charged:";
    for (const auto& [location, bytes] : result.peak_charged) out << " " << location << " " << format_bytes(bytes);
    out << "\n";
  }
  if (!result.failure.empty()) out << "    " << result.failure << "\n";
  return out.str();
}

nlohmann::json to_json(const ScenarioResult& result) {
  nlohmann::json faults = nlohmann::json::array();
  for (const auto& fault : result.faults) {
    faults.push_back({{"rule", fault.rule},
                      {"operation", fault.operation},
                      {"effect", fault.effect},
                      {"call_index", fault.call_index},
                      {"step", fault.step},
                      {"detail", fault.detail},
                      {"virtual_ns", fault.virtual_ns}});
  }
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& step : result.steps) {
    nlohmann::json locations = nlohmann::json::object();
    for (const auto& sample : step.locations) {
      locations[sample.location] = {{"used_bytes", sample.used_bytes}, {"reserved_bytes", sample.reserved_bytes}};
    }
    steps.push_back({{"index", step.index},
                     {"line", step.line},
                     {"kind", step.kind},
                     {"outcome", step.outcome},
                     {"message", step.message},
                     {"started_ns", step.started_ns},
                     {"virtual_ns", step.virtual_ns},
                     {"state_version", step.state_version},
                     {"transitions", step.transitions},
                     {"locations", locations}});
  }
  nlohmann::json peaks = nlohmann::json::object();
  for (const auto& [location, bytes] : result.peak_charged) peaks[location] = bytes;
  nlohmann::json json{{"file", result.file},
                      {"name", result.name},
                      {"description", result.description},
                      {"seed", result.seed},
                      {"runtime", result.runtime},
                      {"verdict", result.verdict},
                      {"failure", result.failure},
                      {"steps_run", result.steps_run},
                      {"invariant_checks", result.invariant_checks},
                      {"content_checks", result.content_checks},
                      {"faults", faults},
                      {"error_paths", result.error_paths},
                      {"peak_charged_bytes", peaks},
                      {"steps", steps}};
  if (result.failed_step) {
    json["failed_step"] = *result.failed_step;
    json["failed_line"] = result.failed_line;
  }
  return json;
}

nlohmann::json to_json(const std::vector<ScenarioResult>& results) {
  nlohmann::json scenarios = nlohmann::json::array();
  std::int64_t passed = 0, failed = 0, skipped = 0;
  for (const auto& result : results) {
    scenarios.push_back(to_json(result));
    if (result.verdict == "passed") ++passed;
    if (result.verdict == "failed") ++failed;
    if (result.verdict == "skipped") ++skipped;
  }
  return {{"passed", passed},
          {"failed", failed},
          {"skipped", skipped},
          {"scenarios", scenarios},
          {"fault_coverage", to_json(fault_coverage(results))}};
}

std::string junit_xml(const std::vector<ScenarioResult>& results) {
  std::int64_t failures = 0, skipped = 0;
  for (const auto& result : results) {
    failures += result.verdict == "failed" ? 1 : 0;
    skipped += result.verdict == "skipped" ? 1 : 0;
  }
  std::ostringstream out;
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out << "<testsuites name=\"residency-replay\" tests=\"" << results.size() << "\" failures=\"" << failures
      << "\" skipped=\"" << skipped << "\">\n";
  out << "  <testsuite name=\"scenarios\" tests=\"" << results.size() << "\" failures=\"" << failures
      << "\" skipped=\"" << skipped << "\">\n";
  for (const auto& result : results) {
    out << "    <testcase classname=\"" << markup_escape(result.file) << "\" name=\"" << markup_escape(result.name) << "\">\n";
    if (result.verdict == "failed") {
      out << "      <failure message=\"" << markup_escape(result.failure) << "\">" << markup_escape(text_summary(result))
          << "</failure>\n";
    } else if (result.verdict == "skipped") {
      out << "      <skipped message=\"" << markup_escape(result.failure) << "\"/>\n";
    }
    out << "      <system-out>" << markup_escape(text_summary(result)) << "</system-out>\n";
    out << "    </testcase>\n";
  }
  out << "  </testsuite>\n</testsuites>\n";
  return out.str();
}

namespace {

nlohmann::json optional_json(const std::optional<std::int64_t>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

}  // namespace

nlohmann::json snapshot_json(const residency::ResidencySnapshot& snapshot,
                             const std::map<std::string, std::string>& value_names) {
  nlohmann::json values = nlohmann::json::object();
  for (const auto& value : snapshot.values) {
    const auto named = value_names.find(value.handle.handle_id);
    nlohmann::json materializations = nlohmann::json::object();
    for (const auto& item : value.materializations) {
      materializations[item.location.name()] = {{"logical_nbytes", item.logical_nbytes},
                                                {"storage_nbytes", item.storage_nbytes},
                                                {"charged_nbytes", item.charged_nbytes},
                                                {"use_count", item.use_count},
                                                {"hold_count", item.hold_count},
                                                {"pending_event_count", item.pending_event_count}};
    }
    values[named == value_names.end() ? value.handle.handle_id : named->second] = {
        {"handle_id", value.handle.handle_id},
        {"value_type", value.spec.value_type},
        {"logical_nbytes", value.spec.logical_nbytes},
        {"storage_nbytes", value.spec.storage_nbytes},
        {"replica_mode", std::string(residency::to_string(value.spec.replica_mode))},
        {"recoverability", std::string(residency::to_string(value.spec.recoverability))},
        {"materializations", materializations},
        {"has_source", value.has_source},
        {"source_location", value.source_location ? nlohmann::json(value.source_location->name()) : nlohmann::json(nullptr)},
        {"discarded", value.discarded}};
  }
  nlohmann::json locations = nlohmann::json::object();
  for (const auto& location : snapshot.locations) {
    locations[location.location.name()] = {{"budget_bytes", optional_json(location.budget_bytes)},
                                           {"used_bytes", location.used_bytes},
                                           {"reserved_bytes", location.reserved_bytes},
                                           {"remaining_budget_bytes", optional_json(location.remaining_budget_bytes)},
                                           {"peak_used_bytes", location.peak_used_bytes},
                                           {"peak_charged_bytes", location.peak_charged_bytes},
                                           {"value_count", location.value_count},
                                           {"reservation_count", location.reservation_count},
                                           {"use_count", location.use_count},
                                           {"hold_count", location.hold_count},
                                           {"pending_event_count", location.pending_event_count}};
  }
  nlohmann::json reservations = nlohmann::json::array();
  for (const auto& reservation : snapshot.reservations) {
    reservations.push_back(
        {{"location", reservation.location.name()}, {"nbytes", reservation.nbytes}, {"label", reservation.label}});
  }
  return {{"state_version", snapshot.state_version},
          {"captured_at_ns", snapshot.captured_at_ns},
          {"values", values},
          {"locations", locations},
          {"reservations", reservations}};
}

std::vector<std::string> json_differences(const nlohmann::json& before, const nlohmann::json& after) {
  std::vector<std::string> lines;
  for (const auto& operation : nlohmann::json::diff(before, after)) {
    const std::string path = operation.at("path").get<std::string>();
    const nlohmann::json::json_pointer pointer(path);
    const std::string op = operation.at("op").get<std::string>();
    const std::string was = op == "add" || !before.contains(pointer) ? "absent" : before.at(pointer).dump();
    const std::string now = op == "remove" ? "absent" : operation.value("value", nlohmann::json()).dump();
    lines.push_back(path + ": " + was + " -> " + now);
  }
  return lines;
}

}  // namespace fhelium::harness
