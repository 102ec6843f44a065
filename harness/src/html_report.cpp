// The HTML report: one self-contained page (inline SVG, CSS and a few lines
// of script, nothing fetched) with a picture of every replayed scenario.
#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "fhelium/harness/reporters.hpp"
#include "fhelium/harness/text_report.hpp"

namespace fhelium::harness {

namespace {

std::string number(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f", value);
  return buffer;
}

std::string duration_text(std::int64_t ns) {
  char buffer[48];
  if (ns < 1000) return std::to_string(ns) + " ns";
  if (ns < 1'000'000) {
    std::snprintf(buffer, sizeof buffer, "%.1f us", static_cast<double>(ns) / 1e3);
  } else if (ns < 1'000'000'000) {
    std::snprintf(buffer, sizeof buffer, "%.1f ms", static_cast<double>(ns) / 1e6);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.2f s", static_cast<double>(ns) / 1e9);
  }
  return buffer;
}

// One location's bytes after every step.
struct Series {
  std::vector<std::int64_t> ns, step;  // x: virtual time, step number
  std::vector<std::int64_t> used, charged;
  std::optional<std::int64_t> budget;
  std::int64_t peak = 0;
};

constexpr int chart_width = 900, chart_height = 180, left = 90, right = 20, top = 16, bottom = 34;
constexpr std::size_t max_points = 2000;      // per line; longer runs are bucketed (keeping each bucket's maximum)
constexpr std::size_t max_table_rows = 2000;  // step rows shown per scenario

class ScenarioSection {
 public:
  explicit ScenarioSection(const ScenarioResult& result) : result_(result) {
    std::set<std::int64_t> instants;
    for (const auto& step : result.steps) {
      end_ns_ = std::max(end_ns_, step.virtual_ns);
      instants.insert(step.virtual_ns);
      for (const auto& sample : step.locations) {
        auto [it, inserted] = series_.try_emplace(sample.location);
        Series& series = it->second;
        if (inserted) order_.push_back(sample.location);
        series.ns.push_back(step.virtual_ns);
        series.step.push_back(step.index + 1);
        series.used.push_back(sample.used_bytes);
        series.charged.push_back(sample.used_bytes + sample.reserved_bytes);
        series.budget = sample.budget_bytes;
        series.peak = std::max(series.peak, sample.peak_charged_bytes);
      }
    }
    // Over virtual time when time passed; over steps as well when many
    // steps share an instant (time alone would stack them on one line).
    over_time_ = end_ns_ > 0;
    over_steps_ = !over_time_ || instants.size() * 2 < result.steps.size();
  }

  void write(std::ostringstream& out) const {
    const std::string verdict = result_.verdict;
    out << "<section class=\"scenario " << markup_escape(verdict) << "\">\n<h2><span class=\"verdict\">"
        << markup_escape(verdict) << "</span> " << markup_escape(result_.name) << "</h2>\n<p class=\"file\">"
        << markup_escape(result_.file) << "</p>\n";
    if (!result_.description.empty()) out << "<p>" << markup_escape(result_.description) << "</p>\n";
    if (!result_.failure.empty()) out << "<pre class=\"failure\">" << markup_escape(result_.failure) << "</pre>\n";
    out << "<p class=\"facts\">" << result_.steps_run << " steps, " << result_.invariant_checks << " invariant checks, "
        << result_.content_checks << " content checks, " << result_.faults.size() << " faults fired, seed "
        << result_.seed << ", runtime " << markup_escape(result_.runtime)
        << (over_time_ ? ", " + duration_text(end_ns_) + " of virtual time" : ", no virtual time passed") << "</p>\n";
    for (const auto& location : order_) {
      if (over_time_) write_chart(out, location, series_.at(location), Axis::time);
      if (over_steps_) write_chart(out, location, series_.at(location), Axis::steps);
    }
    write_table(out);
    out << "</section>\n";
  }

 private:
  enum class Axis { time, steps };

  double x_max(Axis axis) const {
    return axis == Axis::time ? static_cast<double>(end_ns_) : static_cast<double>(result_.steps.size());
  }
  double px(Axis axis, double x) const {
    const double span = x_max(axis);
    return left + (span > 0 ? x / span : 0.0) * (chart_width - left - right);
  }

  void write_chart(std::ostringstream& out, const std::string& location, const Series& series, Axis axis) const {
    const bool by_time = axis == Axis::time;
    const std::vector<std::int64_t>& xs = by_time ? series.ns : series.step;
    std::int64_t y_max = std::max<std::int64_t>(series.peak, 1);
    for (const auto bytes : series.charged) y_max = std::max(y_max, bytes);
    if (series.budget) y_max = std::max(y_max, *series.budget);
    const auto py = [&](std::int64_t bytes) {
      return top + (1.0 - static_cast<double>(bytes) / static_cast<double>(y_max)) * (chart_height - top - bottom);
    };
    out << "<figure><figcaption>" << markup_escape(location) << ": bytes over "
        << (by_time      ? "virtual time"
            : over_time_ ? "steps (many share one instant of virtual time)"
                         : "steps (no virtual time passed)")
        << "</figcaption>\n"
        << "<svg class=\"chart\" width=\"" << chart_width << "\" height=\"" << chart_height << "\" viewBox=\"0 0 "
        << chart_width << ' ' << chart_height << "\" role=\"img\">\n";
    out << "<title>" << markup_escape(location) << " used, reserved, budget and peak</title>\n";
    // Axes and labels.
    const double x0 = px(axis, 0), x1 = px(axis, x_max(axis)), y0 = py(0), y1 = py(y_max);
    out << "<line class=\"axis\" x1=\"" << number(x0) << "\" y1=\"" << number(y0) << "\" x2=\"" << number(x1)
        << "\" y2=\"" << number(y0) << "\"/>\n<line class=\"axis\" x1=\"" << number(x0) << "\" y1=\"" << number(y0)
        << "\" x2=\"" << number(x0) << "\" y2=\"" << number(y1) << "\"/>\n";
    out << "<text class=\"label\" x=\"" << left - 6 << "\" y=\"" << number(y1 + 4) << "\" text-anchor=\"end\">"
        << markup_escape(format_bytes(y_max)) << "</text>\n<text class=\"label\" x=\"" << left - 6 << "\" y=\""
        << number(y0) << "\" text-anchor=\"end\">0 B</text>\n";
    out << "<text class=\"label\" x=\"" << number(x1) << "\" y=\"" << chart_height - 8 << "\" text-anchor=\"end\">"
        << markup_escape(by_time ? duration_text(end_ns_) : "step " + std::to_string(result_.steps.size()))
        << "</text>\n<text class=\"label\" x=\"" << number(x0) << "\" y=\"" << chart_height - 8 << "\">0</text>\n";
    if (series.budget) {
      out << "<line class=\"budget\" x1=\"" << number(x0) << "\" y1=\"" << number(py(*series.budget)) << "\" x2=\""
          << number(x1) << "\" y2=\"" << number(py(*series.budget)) << "\"><title>budget "
          << markup_escape(format_bytes(*series.budget)) << "</title></line>\n";
    }
    out << "<line class=\"peak\" x1=\"" << number(x0) << "\" y1=\"" << number(py(series.peak)) << "\" x2=\""
        << number(x1) << "\" y2=\"" << number(py(series.peak)) << "\"><title>peak charged "
        << markup_escape(format_bytes(series.peak)) << "</title></line>\n";
    write_line(out, "charged", axis, xs, series.charged, py);
    write_line(out, "used", axis, xs, series.used, py);
    for (const auto& fault : result_.faults) {
      const double x = px(axis, by_time ? static_cast<double>(fault.virtual_ns) : static_cast<double>(fault.step + 1));
      out << "<line class=\"fault\" x1=\"" << number(x) << "\" y1=\"" << number(y0) << "\" x2=\"" << number(x)
          << "\" y2=\"" << number(y1) << "\"><title>fault " << markup_escape(fault.rule) << " ("
          << markup_escape(fault.operation) << ") at step " << fault.step << ": " << markup_escape(fault.detail)
          << "</title></line>\n";
    }
    out << "</svg>\n<p class=\"legend\"><span class=\"key used\"></span>used <span class=\"key charged\"></span>used + "
           "reserved <span class=\"key budget\"></span>budget <span class=\"key peak\"></span>peak charged "
        << markup_escape(format_bytes(series.peak)) << " <span class=\"key fault\"></span>fault</p></figure>\n";
  }

  // A step line: each value holds until the next sample. Long runs are
  // bucketed to max_points, keeping each bucket's largest value.
  template <class Y>
  void write_line(std::ostringstream& out, const char* css, Axis axis, const std::vector<std::int64_t>& xs,
                  const std::vector<std::int64_t>& ys, const Y& py) const {
    const std::size_t bucket = std::max<std::size_t>(1, (xs.size() + max_points - 1) / max_points);
    out << "<polyline class=\"" << css << "\" points=\"" << number(px(axis, 0)) << ',' << number(py(0));
    double previous_y = py(0);
    for (std::size_t start = 0; start < xs.size(); start += bucket) {
      std::int64_t high = ys[start];
      const std::size_t end = std::min(xs.size(), start + bucket);
      for (std::size_t i = start; i < end; ++i) high = std::max(high, ys[i]);
      const double x = px(axis, static_cast<double>(xs[end - 1]));
      out << ' ' << number(x) << ',' << number(previous_y) << ' ' << number(x) << ',' << number(py(high));
      previous_y = py(high);
    }
    out << ' ' << number(px(axis, x_max(axis))) << ',' << number(previous_y) << "\"/>\n";
  }

  void write_table(std::ostringstream& out) const {
    out << "<table class=\"steps\"><thead><tr><th>step</th><th>line</th><th>kind</th><th>outcome</th>"
           "<th>virtual time</th><th>transitions</th><th>message</th></tr></thead><tbody>\n";
    const std::size_t shown = std::min(result_.steps.size(), max_table_rows);
    for (std::size_t i = 0; i < shown; ++i) {
      const StepRecord& step = result_.steps[i];
      const bool failed = result_.failed_step && *result_.failed_step == step.index;
      const std::string css = failed ? "failed" : (step.outcome == "ok" || step.outcome == "no-op" ? "ok" : "error");
      std::string transitions;
      for (const auto& transition : step.transitions) transitions += (transitions.empty() ? "" : "; ") + transition;
      out << "<tr class=\"" << css << "\"><td>" << step.index << "</td><td>" << step.line << "</td><td>"
          << markup_escape(step.kind) << "</td><td>" << markup_escape(step.outcome) << "</td><td>"
          << markup_escape(duration_text(step.virtual_ns)) << "</td><td>" << markup_escape(transitions) << "</td><td>"
          << markup_escape(step.message) << "</td></tr>\n";
    }
    if (result_.failed_step && *result_.failed_step >= result_.steps.size()) {
      out << "<tr class=\"failed\"><td>" << *result_.failed_step << "</td><td>" << result_.failed_line
          << "</td><td colspan=\"5\">failed here (see above)</td></tr>\n";
    }
    out << "</tbody></table>\n";
    if (result_.steps.size() > shown) {
      out << "<p class=\"more\">" << result_.steps.size() - shown << " more steps not shown</p>\n";
    }
  }

  const ScenarioResult& result_;
  std::int64_t end_ns_ = 0;
  bool over_time_ = false, over_steps_ = true;
  std::map<std::string, Series> series_;
  std::vector<std::string> order_;  // locations in first-seen order
};

const char* const style = R"css(
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #1d1d1f; }
h1 { font-size: 20px; } h2 { font-size: 17px; margin-bottom: 2px; }
.verdict { padding: 1px 6px; border-radius: 4px; color: #fff; font-size: 13px; }
.passed .verdict { background: #2e7d32; } .failed .verdict { background: #c62828; } .skipped .verdict { background: #757575; }
.file, .facts, .legend, .more { color: #555; margin: 2px 0; }
pre.failure { background: #fdecea; padding: 8px; white-space: pre-wrap; }
figure { margin: 10px 0; } figcaption { font-weight: 600; }
svg.chart { background: #fafafa; border: 1px solid #ddd; }
.axis { stroke: #888; } .label { font-size: 11px; fill: #555; }
polyline { fill: none; stroke-width: 1.5; } polyline.used { stroke: #1565c0; } polyline.charged { stroke: #ef6c00; }
line.budget { stroke: #c62828; stroke-dasharray: 6 3; } line.peak { stroke: #6a1b9a; stroke-dasharray: 2 3; }
line.fault { stroke: #d50000; stroke-width: 1; opacity: 0.6; }
.key { display: inline-block; width: 18px; height: 3px; vertical-align: middle; margin: 0 4px 0 10px; }
.key.used { background: #1565c0; } .key.charged { background: #ef6c00; } .key.budget { background: #c62828; }
.key.peak { background: #6a1b9a; } .key.fault { background: #d50000; }
table.steps { border-collapse: collapse; margin-top: 8px; font-size: 12px; }
table.steps th, table.steps td { border: 1px solid #ddd; padding: 2px 6px; text-align: left; vertical-align: top; }
tr.error td { background: #fff8e1; } tr.failed td { background: #fdecea; font-weight: 600; }
body.failing-only tr.ok { display: none; }
)css";

// Wires the filter and states what rendered; a failure to render is an error
// on the console, which the browser test watches.
const char* const script = R"js(
(function () {
  var box = document.getElementById('failing-only');
  box.addEventListener('change', function () { document.body.classList.toggle('failing-only', box.checked); });
  var sections = document.querySelectorAll('section.scenario').length;
  var charts = document.querySelectorAll('svg.chart').length;
  var lines = document.querySelectorAll('svg.chart polyline').length;
  if (sections !== Number(document.body.dataset.scenarios) || lines !== 2 * charts) {
    console.error('residency report incomplete: ' + sections + ' scenarios, ' + charts + ' charts, ' + lines + ' lines');
  } else {
    console.info('residency report rendered: ' + sections + ' scenarios, ' + charts + ' charts');
  }
})();
)js";

}  // namespace

std::string html_report(const std::vector<ScenarioResult>& results) {
  std::size_t passed = 0, failed = 0, skipped = 0;
  for (const auto& result : results) {
    passed += result.verdict == "passed";
    failed += result.verdict == "failed";
    skipped += result.verdict == "skipped";
  }
  std::ostringstream out;
  out << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      << "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
         "script-src 'unsafe-inline'\">\n<title>residency-replay report</title>\n<style>"
      << style << "</style>\n</head>\n<body data-scenarios=\"" << results.size() << "\">\n"
      << "<h1>residency-replay: " << passed << " passed, " << failed << " failed, " << skipped << " skipped</h1>\n"
      << "<label><input type=\"checkbox\" id=\"failing-only\"> show only steps that did not succeed</label>\n";
  for (const auto& result : results) ScenarioSection(result).write(out);
  out << "<script>" << script << "</script>\n</body>\n</html>\n";
  return out.str();
}

}  // namespace fhelium::harness
