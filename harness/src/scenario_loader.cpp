// YAML -> Scenario. A Reader walks the document, checks every mapping against
// the keys allowed there, and turns each scalar into its typed value, raising
// ScenarioError with the node's position on the first problem.
#include "fhelium/harness/scenario_loader.hpp"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

namespace fhelium::harness {

using residency::ResidencyLocation;

ScenarioError::ScenarioError(std::string file, int line, int column, const std::string& message)
    : std::runtime_error(file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message),
      file_(std::move(file)),
      line_(line),
      column_(column) {}

std::int64_t parse_size(const std::string& text) {
  const auto invalid = [&](const std::string& why) {
    return std::invalid_argument("malformed size '" + text + "': " + why);
  };
  const std::string expected = "expected a byte count such as 4096, 64KiB or 1.5MiB";
  // Exact integer arithmetic: sizes near INT64_MAX must read back exactly.
  std::size_t end = 0;
  __int128 whole = 0;
  constexpr __int128 limit = std::numeric_limits<std::int64_t>::max();
  while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) {
    whole = whole * 10 + (text[end] - '0');
    if (whole > limit) throw invalid("it does not fit in a signed 64-bit byte count (at most 9223372036854775807)");
    ++end;
  }
  if (end == 0) throw invalid(expected);
  __int128 fraction = 0;
  __int128 scale = 1;
  if (end < text.size() && text[end] == '.') {
    ++end;
    const std::size_t first = end;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) {
      if (end - first >= 18) throw invalid("too many fractional digits");
      fraction = fraction * 10 + (text[end] - '0');
      scale *= 10;
      ++end;
    }
    if (end == first) throw invalid(expected);
  }
  std::string unit = text.substr(end);
  unit.erase(0, unit.find_first_not_of(' '));
  static const std::map<std::string, std::int64_t> units{
      {"", 1},           {"B", 1},           {"KB", 1000},          {"MB", 1000000}, {"GB", 1000000000},
      {"TB", 1000000000000}, {"KiB", 1024}, {"MiB", 1048576}, {"GiB", 1073741824}, {"TiB", 1099511627776}};
  const auto found = units.find(unit);
  if (found == units.end()) {
    throw invalid("unknown unit '" + unit + "' (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)");
  }
  const __int128 multiplier = found->second;
  if ((fraction * multiplier) % scale != 0) throw invalid("it is not a whole number of bytes");
  const __int128 bytes = whole * multiplier + fraction * multiplier / scale;
  if (bytes > limit) throw invalid("it does not fit in a signed 64-bit byte count (at most 9223372036854775807)");
  return static_cast<std::int64_t>(bytes);
}

namespace {

const std::map<std::string, StepKind>& step_kinds() {
  static const std::map<std::string, StepKind> kinds{
      {"adopt", StepKind::adopt},
      {"register_source", StepKind::register_source},
      {"ensure", StepKind::ensure},
      {"copy", StepKind::copy},
      {"move", StepKind::move},
      {"drop", StepKind::drop},
      {"discard", StepKind::discard},
      {"execute", StepKind::execute},
      {"explain", StepKind::explain},
      {"scope_enter", StepKind::scope_enter},
      {"scope_close", StepKind::scope_close},
      {"acquire", StepKind::acquire},
      {"add_consumer_stream", StepKind::add_consumer_stream},
      {"release", StepKind::release},
      {"abandon", StepKind::abandon},
      {"hold", StepKind::hold},
      {"reserve", StepKind::reserve},
      {"snapshot", StepKind::snapshot},
      {"close", StepKind::close},
      {"advance", StepKind::advance},
      {"complete", StepKind::complete},
      {"work", StepKind::work},
      {"verify", StepKind::verify},
      {"arm", StepKind::arm},
      {"disarm", StepKind::disarm},
      {"decide", StepKind::decide},
      {"use", StepKind::use},
      {"end_use", StepKind::end_use},
      {"set_policy_metadata", StepKind::set_policy_metadata},
  };
  return kinds;
}

const std::map<std::string, std::int64_t> dtype_bytes{{"float32", 4}, {"float64", 8}, {"float16", 2},
                                                      {"int64", 8},   {"int32", 4},   {"uint8", 1}};

const std::set<std::string> error_kinds{"none",      "any",         "maybe",         "budget",          "handle",       "unavailable",
                                        "in_use",    "ownership",   "materialization", "plan",         "stale",
                                        "plan_execution", "reentrancy", "lifetime_closed", "closed",
                                        "invalid_argument", "out_of_memory", "device", "runtime", "logic",
                                        "search_limit"};

// " (did you mean 'x'?)" when a candidate is a small edit away from `word`.
template <class Names>
std::string did_you_mean(const std::string& word, const Names& candidates) {
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(2, word.size() / 3) + 1;
  for (const auto& candidate : candidates) {
    const std::string& name = candidate;
    // Levenshtein distance, one row at a time.
    std::vector<std::size_t> row(name.size() + 1);
    for (std::size_t j = 0; j <= name.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= word.size(); ++i) {
      std::size_t diagonal = row[0];
      row[0] = i;
      for (std::size_t j = 1; j <= name.size(); ++j) {
        const std::size_t above = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (word[i - 1] == name[j - 1] ? 0 : 1)});
        diagonal = above;
      }
    }
    if (row[name.size()] < best_distance) {
      best_distance = row[name.size()];
      best = name;
    }
  }
  return best.empty() ? "" : " (did you mean '" + best + "'?)";
}

class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  // CUDA devices the declared runtime has (simulated runtimes only): a
  // location past them is a load error in declarations, and in a step unless
  // that step expects an error.
  void set_cuda_devices(std::optional<int> devices) const { cuda_devices_ = devices; }
  // While reading a step, references to missing devices are remembered for the
  // step to judge instead of failing at once.
  void begin_step() const { missing_device_.reset(); in_step_ = true; }
  std::optional<std::pair<YAML::Node, std::string>> end_step() const {
    in_step_ = false;
    return std::exchange(missing_device_, std::nullopt);
  }

  [[noreturn]] void fail(const YAML::Node& node, const std::string& message) const {
    const YAML::Mark mark = node.Mark();
    const bool known = mark.line >= 0;
    throw ScenarioError(file_, known ? mark.line + 1 : 0, known ? mark.column + 1 : 0, message);
  }

  void require_map(const YAML::Node& node, const std::string& what) const {
    if (!node.IsMap()) fail(node, what + " must be a mapping");
  }

  void require_keys(const YAML::Node& node, const std::string& what, const std::set<std::string>& allowed) const {
    require_map(node, what);
    for (const auto& entry : node) {
      const std::string key = entry.first.as<std::string>();
      if (allowed.count(key) == 0) {
        std::string list;
        for (const auto& name : allowed) list += (list.empty() ? "" : ", ") + name;
        fail(entry.first, "unknown key '" + key + "' in " + what + did_you_mean(key, allowed) + " (allowed: " + list +
                              ")");
      }
    }
  }

  const YAML::Node required(const YAML::Node& map, const std::string& key, const std::string& what) const {
    const YAML::Node node = map[key];
    if (!node) fail(map, what + " needs '" + key + "'");
    return node;
  }

  std::string text(const YAML::Node& node, const std::string& what) const {
    if (!node.IsScalar()) fail(node, what + " must be a scalar");
    return substitute(node, node.Scalar());
  }

  // Repetition: while a `repeat` block is read, `${name}` (and, for integer
  // bindings, `${name+K}` / `${name-K}`) in any scalar is replaced by the
  // current binding; the innermost binding of a name wins.
  void bind(const std::string& name, std::string value) const { bindings_.emplace_back(name, std::move(value)); }
  void unbind() const { bindings_.pop_back(); }

  // `$name` (a bound name, letters, digits and underscores) works anywhere,
  // also inside flow collections; `${expression}` needs quotes there, as YAML
  // reads its braces.
  std::string substitute(const YAML::Node& node, const std::string& raw) const {
    // Outside repeat blocks text is taken as written (a description may say "${x}").
    if (bindings_.empty() || raw.find('$') == std::string::npos) return raw;
    const auto identifier = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
    std::string result;
    std::size_t at = 0;
    while (at < raw.size()) {
      const std::size_t dollar = raw.find('$', at);
      if (dollar == std::string::npos) break;
      result += raw.substr(at, dollar - at);
      if (dollar + 1 < raw.size() && raw[dollar + 1] == '{') {
        const std::size_t close = raw.find('}', dollar);
        if (close == std::string::npos) fail(node, "unterminated '${' in '" + raw + "'");
        result += expand(node, raw.substr(dollar + 2, close - dollar - 2), raw);
        at = close + 1;
        continue;
      }
      std::size_t end = dollar + 1;
      while (end < raw.size() && identifier(raw[end])) ++end;
      const std::string name = raw.substr(dollar + 1, end - dollar - 1);
      const bool bound = !name.empty() && std::any_of(bindings_.begin(), bindings_.end(),
                                                      [&](const auto& binding) { return binding.first == name; });
      result += bound ? expand(node, name, raw) : raw.substr(dollar, end - dollar);
      at = end;
    }
    return result + raw.substr(std::min(at, raw.size()));
  }

  std::string expand(const YAML::Node& node, std::string expression, const std::string& raw) const {
    expression.erase(std::remove(expression.begin(), expression.end(), ' '), expression.end());
    std::size_t op = expression.find_first_of("+-");
    const std::string name = expression.substr(0, op);
    const std::string* value = nullptr;
    for (auto it = bindings_.rbegin(); it != bindings_.rend() && value == nullptr; ++it) {
      if (it->first == name) value = &it->second;
    }
    if (value == nullptr) {
      std::vector<std::string> bound;
      for (const auto& [bound_name, bound_value] : bindings_) bound.push_back(bound_name);
      fail(node, "'${" + expression + "}' in '" + raw + "' names no repetition variable in scope" +
                     did_you_mean(name, bound));
    }
    if (op == std::string::npos) return *value;
    try {
      std::size_t used = 0;
      const long long base = std::stoll(*value, &used);
      if (used != value->size()) throw std::invalid_argument(*value);
      const long long offset = std::stoll(expression.substr(op + 1), &used);
      if (used != expression.size() - op - 1) throw std::invalid_argument(expression);
      return std::to_string(expression[op] == '+' ? base + offset : base - offset);
    } catch (const std::logic_error&) {
      fail(node, "'${" + expression + "}' needs an integer binding of '" + name + "' and an integer offset (got '" +
                     *value + "')");
    }
  }

  std::string name(const YAML::Node& node, const std::string& what) const {
    const std::string value = text(node, what);
    if (value.empty()) fail(node, what + " must be non-empty");
    return value;
  }

  std::int64_t integer(const YAML::Node& node, const std::string& what) const {
    const std::string value = text(node, what);
    try {
      std::size_t used = 0;
      const long long parsed = std::stoll(value, &used);
      if (used != value.size()) throw std::invalid_argument(value);
      return parsed;
    } catch (const std::logic_error&) {
      fail(node, what + " must be an integer, got '" + value + "'");
    }
  }

  std::int64_t count(const YAML::Node& node, const std::string& what) const {
    const std::int64_t value = integer(node, what);
    if (value < 0) fail(node, what + " must be non-negative");
    return value;
  }

  double real(const YAML::Node& node, const std::string& what) const {
    const std::string value = text(node, what);
    try {
      std::size_t used = 0;
      const double parsed = std::stod(value, &used);
      if (used != value.size()) throw std::invalid_argument(value);
      return parsed;
    } catch (const std::logic_error&) {
      fail(node, what + " must be a number, got '" + value + "'");
    }
  }

  bool boolean(const YAML::Node& node, const std::string& what) const {
    const std::string value = text(node, what);
    if (value == "true") return true;
    if (value == "false") return false;
    fail(node, what + " must be true or false, got '" + value + "'");
  }

  std::int64_t size(const YAML::Node& node, const std::string& what) const {
    try {
      return parse_size(text(node, what));
    } catch (const std::invalid_argument& error) {
      fail(node, what + ": " + error.what());
    }
  }

  ResidencyLocation location(const YAML::Node& node, const std::string& what) const {
    ResidencyLocation result;
    try {
      result = ResidencyLocation::parse(text(node, what));
    } catch (const std::invalid_argument& error) {
      fail(node, what + ": " + error.what());
    }
    if (result.is_cuda() && cuda_devices_ && result.cuda_index() >= *cuda_devices_) {
      const std::string message = what + ": " + result.name() + " is not a device of this scenario's runtime (it has " +
                                  std::to_string(*cuda_devices_) + " CUDA device(s); runtime: {cuda_devices: N} adds more)";
      if (!in_step_) fail(node, message);
      if (!missing_device_) missing_device_ = std::make_pair(node, message);
    }
    return result;
  }

  std::optional<ResidencyLocation> optional_location(const YAML::Node& node, const std::string& what) const {
    if (text(node, what) == "none") return std::nullopt;
    return location(node, what);
  }

  StreamRef stream(const YAML::Node& node, const std::string& what) const {
    require_keys(node, what, {"device", "id"});
    StreamRef result;
    result.device = static_cast<int>(count(required(node, "device", what), what + " device"));
    if (node["id"]) result.id = count(node["id"], what + " id");
    if (cuda_devices_ && result.device >= *cuda_devices_) {
      const std::string message = what + ": device " + std::to_string(result.device) +
                                  " is not a device of this scenario's runtime (it has " +
                                  std::to_string(*cuda_devices_) + " CUDA device(s))";
      if (!in_step_) fail(node, message);
      if (!missing_device_) missing_device_ = std::make_pair(node, message);
    }
    return result;
  }

  std::vector<std::string> names(const YAML::Node& node, const std::string& what) const {
    if (!node.IsSequence()) fail(node, what + " must be a list");
    std::vector<std::string> result;
    for (const auto& item : node) result.push_back(name(item, what + " entry"));
    return result;
  }

  template <class F>
  residency::LocationBudgets location_list(const YAML::Node& node, const std::string& what, F&& value) const {
    require_map(node, what);
    residency::LocationBudgets result;  // in the file's order
    for (const auto& entry : node) {
      const ResidencyLocation where = location(entry.first, what + " key");
      for (const auto& [seen, bytes] : result) {
        if (seen == where) fail(entry.first, "duplicate location " + where.name() + " in " + what);
      }
      result.emplace_back(where, value(entry.second, what + " for " + where.name()));
    }
    return result;
  }

  template <class F>
  std::map<ResidencyLocation, std::int64_t> location_map(const YAML::Node& node, const std::string& what,
                                                         F&& value) const {
    const residency::LocationBudgets list = location_list(node, what, std::forward<F>(value));
    return {list.begin(), list.end()};
  }

  const std::string& file() const { return file_; }

 private:
  std::string file_;
  mutable std::optional<int> cuda_devices_;
  mutable bool in_step_ = false;
  mutable std::vector<std::pair<std::string, std::string>> bindings_;
  mutable std::optional<std::pair<YAML::Node, std::string>> missing_device_;
};

int line_of(const YAML::Node& node) { return node.Mark().line + 1; }

FaultRule parse_fault(const Reader& reader, const YAML::Node& node, const std::string& what) {
  reader.require_keys(node, what,
                      {"name", "operation", "location", "stream", "nth", "every", "probability", "max_fires",
                       "effect", "delay_ns", "during"});
  FaultRule rule;
  rule.name = reader.name(reader.required(node, "name", what), what + " name");
  const std::string context = what + " '" + rule.name + "'";
  const YAML::Node operation = reader.required(node, "operation", context);
  try {
    rule.operation = parse_fault_operation(reader.text(operation, context + " operation"));
  } catch (const std::invalid_argument& error) {
    reader.fail(operation, error.what());
  }
  if (const YAML::Node effect = node["effect"]) {
    try {
      rule.effect = parse_fault_effect(reader.text(effect, context + " effect"));
    } catch (const std::invalid_argument& error) {
      reader.fail(effect, error.what());
    }
  }
  if (node["location"]) rule.location = reader.location(node["location"], context + " location");
  if (node["stream"]) rule.stream_id = reader.count(node["stream"], context + " stream");
  if (node["nth"]) rule.nth = reader.integer(node["nth"], context + " nth");
  if (node["every"]) rule.every = reader.integer(node["every"], context + " every");
  if (node["probability"]) rule.probability = reader.real(node["probability"], context + " probability");
  if (node["max_fires"]) rule.max_fires = reader.integer(node["max_fires"], context + " max_fires");
  if (node["delay_ns"]) rule.delay_ns = reader.integer(node["delay_ns"], context + " delay_ns");
  if (const YAML::Node during = node["during"]) {
    const std::string text = reader.text(during, context + " during");
    if (text == "step") {
      rule.during = FaultCalls::step;
    } else if (text == "checks") {
      rule.during = FaultCalls::checks;
    } else if (text != "any") {
      reader.fail(during, context + " during must be any (every matching call), step (only the steps' own calls) "
                          "or checks (only the replay's checks between steps), got '" + text + "'");
    }
  }
  try {
    rule.validate();
  } catch (const std::invalid_argument& error) {
    reader.fail(node, error.what());
  }
  return rule;
}

class ScenarioParser {
 public:
  ScenarioParser(const Reader& reader, Scenario& scenario) : reader_(reader), scenario_(scenario) {}

  void parse(const YAML::Node& root) {
    reader_.require_keys(root, "scenario",
                         {"name", "description", "seed", "must_fail", "manager", "runtime", "controller", "faults",
                          "values", "plans", "steps", "limits"});
    if (root["limits"]) parse_limits(root["limits"]);
    scenario_.name = reader_.name(reader_.required(root, "name", "scenario"), "scenario name");
    if (root["description"]) scenario_.description = reader_.text(root["description"], "description");
    if (root["seed"]) scenario_.seed = static_cast<std::uint64_t>(reader_.count(root["seed"], "seed"));
    if (root["must_fail"]) scenario_.must_fail = reader_.name(root["must_fail"], "must_fail");
    // The runtime first: it says which CUDA devices every other part may name.
    if (root["runtime"]) parse_runtime(root["runtime"]);
    if (scenario_.runtime == "simulated") reader_.set_cuda_devices(scenario_.cuda_devices);
    if (root["manager"]) parse_manager(root["manager"]);
    if (root["controller"]) parse_controller(root["controller"]);
    if (root["faults"]) {
      if (!root["faults"].IsSequence()) reader_.fail(root["faults"], "faults must be a list");
      for (const auto& fault : root["faults"]) scenario_.faults.push_back(parse_fault(reader_, fault, "fault"));
    }
    if (root["values"]) parse_values(root["values"]);
    if (root["plans"]) parse_plans(root["plans"]);
    const YAML::Node steps = reader_.required(root, "steps", "scenario");
    if (!steps.IsSequence()) reader_.fail(steps, "steps must be a list");
    const auto step_count = static_cast<std::int64_t>(steps.size());
    if (step_count > scenario_.limits.steps) {
      reader_.fail(steps, "the scenario has " + std::to_string(step_count) + " steps, over the limit of " +
                              std::to_string(scenario_.limits.steps) + " (raise it with limits: {steps: N})");
    }
    parse_steps(steps);
    check_value_bytes(root);
  }

  // `repeat: {for: NAME, in: [A, B, ...]}` or `{for: NAME, range: N}` /
  // `{for: NAME, range: [START, STOP]}` (STOP excluded): runs `body` once per
  // binding of NAME, innermost bindings shadowing outer ones.
  template <class Body>
  void repeat(const YAML::Node& spec, const std::string& what, Body&& body) {
    reader_.require_keys(spec, what, {"for", "in", "range"});
    const std::string name = reader_.name(reader_.required(spec, "for", what), what + " for");
    if (!std::all_of(name.begin(), name.end(), [](unsigned char c) { return std::isalnum(c) || c == '_'; })) {
      reader_.fail(spec["for"], what + " variable '" + name + "' must be letters, digits and underscores");
    }
    if (spec["in"].IsDefined() == spec["range"].IsDefined()) {
      reader_.fail(spec, what + " needs exactly one of 'in' (a list) and 'range' (N or [START, STOP])");
    }
    std::vector<std::string> values;
    if (const YAML::Node list = spec["in"]) {
      if (!list.IsSequence()) reader_.fail(list, what + " in must be a list");
      for (const auto& item : list) values.push_back(reader_.text(item, what + " in"));
    } else {
      const YAML::Node range = spec["range"];
      std::int64_t start = 0, stop = 0;
      if (range.IsSequence()) {
        if (range.size() != 2) reader_.fail(range, what + " range must be N or [START, STOP]");
        start = reader_.integer(range[0], what + " range start");
        stop = reader_.integer(range[1], what + " range stop");
      } else {
        stop = reader_.count(range, what + " range");
      }
      if (stop < start) reader_.fail(range, what + " range stops before it starts");
      if (stop - start > scenario_.limits.steps) {
        reader_.fail(range, what + " range has " + std::to_string(stop - start) + " entries, over the step limit of " +
                                std::to_string(scenario_.limits.steps) + " (raise it with limits: {steps: N})");
      }
      for (std::int64_t value = start; value < stop; ++value) values.push_back(std::to_string(value));
    }
    for (const auto& value : values) {
      reader_.bind(name, value);
      try {
        body();
      } catch (...) {
        reader_.unbind();
        throw;
      }
      reader_.unbind();
    }
  }

  void parse_steps(const YAML::Node& steps) {
    for (const auto& step : steps) {
      if (step.IsMap() && step["repeat"]) {
        reader_.require_keys(step, "repeated steps", {"repeat", "steps"});
        const YAML::Node body = reader_.required(step, "steps", "repeated steps");
        if (!body.IsSequence()) reader_.fail(body, "repeated steps must be a list");
        repeat(step["repeat"], "steps repeat", [&] { parse_steps(body); });
        continue;
      }
      if (static_cast<std::int64_t>(scenario_.steps.size()) >= scenario_.limits.steps) {
        reader_.fail(step, "repeat blocks expand the scenario to more than " + std::to_string(scenario_.limits.steps) +
                               " steps, over the limit (raise it with limits: {steps: N})");
      }
      scenario_.steps.push_back(parse_step(step));
    }
  }

 private:
  void parse_manager(const YAML::Node& node) {
    reader_.require_keys(node, "manager", {"budgets", "trace_capacity"});
    if (node["budgets"]) {
      scenario_.budgets = reader_.location_list(node["budgets"], "budgets",
                                               [&](const YAML::Node& n, const std::string& w) { return reader_.size(n, w); });
    }
    if (node["trace_capacity"]) scenario_.trace_capacity = reader_.count(node["trace_capacity"], "trace_capacity");
  }

  void parse_controller(const YAML::Node& node) {
    reader_.require_keys(node, "controller", {"fallback_tiers", "search_state_limit"});
    if (const YAML::Node tiers = node["fallback_tiers"]) {
      reader_.require_map(tiers, "controller fallback_tiers");
      for (const auto& entry : tiers) {
        const ResidencyLocation source = reader_.location(entry.first, "controller fallback_tiers key");
        if (!entry.second.IsSequence()) {
          reader_.fail(entry.second, "controller fallback_tiers of " + source.name() + " must be a list of locations");
        }
        std::vector<ResidencyLocation> destinations;
        for (const auto& item : entry.second) {
          const ResidencyLocation destination =
              reader_.location(item, "controller fallback_tiers of " + source.name());
          if (destination == source) reader_.fail(item, "a fallback tier of " + source.name() + " cannot be itself");
          if (std::find(destinations.begin(), destinations.end(), destination) != destinations.end()) {
            reader_.fail(item, "fallback tier " + destination.name() + " of " + source.name() + " is listed twice");
          }
          destinations.push_back(destination);
        }
        scenario_.fallback_tiers.emplace_back(source, std::move(destinations));
      }
    }
    if (node["search_state_limit"]) {
      scenario_.search_state_limit = reader_.count(node["search_state_limit"], "controller search_state_limit");
      if (scenario_.search_state_limit < 1) {
        reader_.fail(node["search_state_limit"], "controller search_state_limit must be at least 1");
      }
    }
  }

  void parse_runtime(const YAML::Node& node) {
    reader_.require_keys(node, "runtime", {"kind", "cuda_devices", "capacity", "can_pin", "copy_ns_per_mib"});
    if (node["kind"]) {
      scenario_.runtime = reader_.text(node["kind"], "runtime kind");
      if (scenario_.runtime != "simulated" && scenario_.runtime != "torch") {
        reader_.fail(node["kind"], "runtime kind must be simulated or torch, got '" + scenario_.runtime + "'");
      }
    }
    if (node["cuda_devices"]) {
      scenario_.cuda_devices = static_cast<int>(reader_.count(node["cuda_devices"], "cuda_devices"));
      if (scenario_.cuda_devices > 128) reader_.fail(node["cuda_devices"], "cuda_devices must be at most 128");
    }
    if (node["capacity"]) {
      scenario_.capacity = reader_.location_map(node["capacity"], "capacity",
                                                [&](const YAML::Node& n, const std::string& w) { return reader_.size(n, w); });
    }
    if (node["can_pin"]) scenario_.can_pin = reader_.boolean(node["can_pin"], "can_pin");
    if (node["copy_ns_per_mib"]) scenario_.copy_ns_per_mib = reader_.count(node["copy_ns_per_mib"], "copy_ns_per_mib");
  }

  void parse_limits(const YAML::Node& node) {
    reader_.require_keys(node, "limits", {"value_bytes", "steps", "virtual_ns"});
    if (node["value_bytes"]) scenario_.limits.value_bytes = reader_.size(node["value_bytes"], "limits value_bytes");
    if (node["steps"]) scenario_.limits.steps = reader_.count(node["steps"], "limits steps");
    if (node["virtual_ns"]) scenario_.limits.virtual_ns = reader_.count(node["virtual_ns"], "limits virtual_ns");
  }

  // Values are real allocations: their declared total is bounded before anything runs.
  void check_value_bytes(const YAML::Node& root) const {
    std::int64_t total = 0;
    for (const auto& value : scenario_.values) {
      if (value.virtual_payload) continue;  // a few bytes each, whatever their size
      const std::int64_t bytes = value.elements * dtype_bytes.at(value.dtype);
      if (bytes > scenario_.limits.value_bytes - total) {
        const YAML::Node where = root["values"] && root["values"][value.name] ? root["values"][value.name] : root;
        reader_.fail(where, "value '" + value.name + "' brings the scenario's values past the limit of " +
                                std::to_string(scenario_.limits.value_bytes) +
                                " bytes of real payload (raise it with limits: {value_bytes: SIZE})");
      }
      total += bytes;
    }
  }

  // Each entry of a `values` or `plans` mapping, once per binding of its own
  // `repeat` key when it has one.
  template <class Parse>
  void each_entry(const YAML::Node& node, const std::string& kind, Parse&& parse) {
    for (const auto& entry : node) {
      if (entry.second.IsMap() && entry.second["repeat"]) {
        repeat(entry.second["repeat"], kind + " '" + entry.first.Scalar() + "' repeat", [&] { parse(entry); });
      } else {
        parse(entry);
      }
    }
  }

  void parse_values(const YAML::Node& node) {
    reader_.require_map(node, "values");
    each_entry(node, "value", [&](const auto& entry) { parse_value(entry.first, entry.second); });
  }

  void parse_value(const YAML::Node& key, const YAML::Node& spec) {
    ValueDecl value;
    value.name = reader_.name(key, "value name");
    value.line = line_of(key);
    const std::string what = "value '" + value.name + "'";
    if (scenario_.find_value(value.name) != nullptr) reader_.fail(key, "duplicate " + what);
    reader_.require_keys(spec, what,
                         {"type", "elements", "bytes", "dtype", "mode", "adopt_at", "source_at", "deferred",
                          "fail_on_load", "reenter_on_load", "wrong", "aliases", "repeat", "payload"});
    if (spec["adopt_at"].IsDefined() == spec["source_at"].IsDefined()) {
      reader_.fail(spec, what + " needs exactly one of 'adopt_at' and 'source_at'");
    }
    value.source = spec["source_at"].IsDefined();
    value.at = reader_.location(value.source ? spec["source_at"] : spec["adopt_at"], what + " location");
    if (spec["deferred"]) value.deferred = reader_.boolean(spec["deferred"], what + " deferred");
    parse_value_spec(spec, what, value);
    scenario_.values.push_back(value);
  }


  // An adopt/register_source step that carries its own declaration.
  void declare_inline(const YAML::Node& args, bool source, const std::string& what) {
    ValueDecl value;
    const YAML::Node name = reader_.required(args, "value", what);
    value.name = reader_.name(name, what + " value");
    value.line = line_of(name);
    if (scenario_.find_value(value.name) != nullptr) {
      reader_.fail(name, what + " declares value '" + value.name + "', which is already declared");
    }
    value.source = source;
    value.deferred = true;
    value.at = reader_.location(reader_.required(args, "at", what), what + " at");
    parse_value_spec(args, what + " value '" + value.name + "'", value);
    scenario_.values.push_back(value);
  }

  void parse_value_spec(const YAML::Node& spec, const std::string& what, ValueDecl& value) {
    if (spec["type"]) value.type_name = reader_.name(spec["type"], what + " type");
    if (spec["dtype"]) {
      value.dtype = reader_.text(spec["dtype"], what + " dtype");
      if (dtype_bytes.count(value.dtype) == 0) {
        reader_.fail(spec["dtype"], what + " dtype must be float32, float64, float16, int64, int32 or uint8");
      }
    }
    if (spec["elements"].IsDefined() == spec["bytes"].IsDefined()) {
      reader_.fail(spec, what + " needs exactly one of 'elements' and 'bytes'");
    }
    if (spec["elements"]) {
      value.elements = reader_.count(spec["elements"], what + " elements");
      if (value.elements > std::numeric_limits<std::int64_t>::max() / dtype_bytes.at(value.dtype)) {
        reader_.fail(spec["elements"], what + " elements do not fit in a signed 64-bit byte count");
      }
    } else {
      const std::int64_t bytes = reader_.size(spec["bytes"], what + " bytes");
      const std::int64_t element = dtype_bytes.at(value.dtype);
      if (bytes % element != 0) reader_.fail(spec["bytes"], what + " bytes must be a multiple of its dtype size");
      value.elements = bytes / element;
    }
    if (spec["mode"]) {
      const std::string mode = reader_.text(spec["mode"], what + " mode");
      if (mode != "exclusive" && mode != "replicable") {
        reader_.fail(spec["mode"], what + " mode must be exclusive or replicable, got '" + mode + "'");
      }
      value.mode = mode == "exclusive" ? residency::ReplicaMode::exclusive : residency::ReplicaMode::replicable;
    }
    if (!value.source && (spec["fail_on_load"] || spec["reenter_on_load"] || spec["wrong"])) {
      reader_.fail(spec, what + ": fail_on_load, reenter_on_load and wrong apply only to values with source_at");
    }
    if (spec["reenter_on_load"]) {
      value.reenter_on_load = reader_.integer(spec["reenter_on_load"], what + " reenter_on_load");
      if (*value.reenter_on_load < 1) {
        reader_.fail(spec["reenter_on_load"], what + " reenter_on_load must be at least 1");
      }
    }
    if (spec["fail_on_load"]) {
      value.fail_on_load = reader_.integer(spec["fail_on_load"], what + " fail_on_load");
      if (*value.fail_on_load < 1) reader_.fail(spec["fail_on_load"], what + " fail_on_load must be at least 1");
    }
    if (spec["wrong"]) {
      value.wrong = reader_.text(spec["wrong"], what + " wrong");
      if (std::none_of(wrong_load_kinds.begin(), wrong_load_kinds.end(),
                       [&](const char* kind) { return *value.wrong == kind; })) {
        reader_.fail(spec["wrong"], what + " wrong must be size, type, location or contents");
      }
    }
    if (spec["payload"]) {
      const std::string payload = reader_.text(spec["payload"], what + " payload");
      if (payload != "real" && payload != "virtual") {
        reader_.fail(spec["payload"], what + " payload must be real or virtual, got '" + payload + "'");
      }
      value.virtual_payload = payload == "virtual";
      if (value.virtual_payload && spec["aliases"]) {
        reader_.fail(spec["payload"], what + ": a virtual payload cannot alias another value's storage");
      }
    }
    if (spec["aliases"]) {
      // Shares the storage of an adopted value at the same location: the
      // manager must refuse it (ownership), whether adopted or loaded.
      value.aliases = value_ref(spec["aliases"], what + " aliases");
      const ValueDecl& other = *scenario_.find_value(*value.aliases);
      if (other.source || other.deferred || other.at != value.at) {
        reader_.fail(spec["aliases"], what + " aliases must name a value adopted at start at the same location (" +
                                          value.at.name() + ")");
      }
      if (!value.source && !value.deferred) {
        reader_.fail(spec["aliases"], what + ": an aliasing adopted value must be deferred, so a step expects the refusal");
      }
    }
  }

  std::string value_ref(const YAML::Node& node, const std::string& what) {
    const std::string value = reader_.name(node, what);
    if (scenario_.find_value(value) == nullptr) {
      std::vector<std::string> names;
      for (const auto& declared : scenario_.values) names.push_back(declared.name);
      reader_.fail(node, what + " names unknown value '" + value + "'" + did_you_mean(value, names));
    }
    return value;
  }

  ActionDecl parse_action(const YAML::Node& node, const std::string& what) {
    reader_.require_map(node, what);
    if (node.size() != 1) reader_.fail(node, what + " must have exactly one of ensure, move, drop, discard");
    const auto entry = *node.begin();
    const std::string kind = reader_.text(entry.first, what);
    const YAML::Node args = entry.second;
    ActionDecl action;
    action.line = line_of(entry.first);
    const std::string context = what + " " + kind;
    if (kind == "ensure" || kind == "drop") {
      reader_.require_keys(args, context, {"value", "at"});
      action.kind = kind == "ensure" ? ActionKind::ensure : ActionKind::drop;
      action.location = reader_.location(reader_.required(args, "at", context), context + " at");
    } else if (kind == "move") {
      reader_.require_keys(args, context, {"value", "to", "from"});
      action.kind = ActionKind::move;
      action.location = reader_.location(reader_.required(args, "to", context), context + " to");
      if (args["from"]) action.from = reader_.location(args["from"], context + " from");
    } else if (kind == "discard") {
      reader_.require_keys(args, context, {"value"});
      action.kind = ActionKind::discard;
    } else {
      reader_.fail(entry.first, "unknown action '" + kind + "' (expected ensure, move, drop or discard)");
    }
    action.value = value_ref(reader_.required(args, "value", context), context + " value");
    return action;
  }

  std::vector<ActionDecl> parse_actions(const YAML::Node& node, const std::string& what) {
    if (!node.IsSequence()) reader_.fail(node, what + " must be a list of actions");
    std::vector<ActionDecl> result;
    for (const auto& item : node) result.push_back(parse_action(item, what + " action"));
    return result;
  }

  std::vector<ReservationDecl> parse_reservations(const YAML::Node& reservations, const std::string& what) {
    if (!reservations.IsSequence()) reader_.fail(reservations, what + " reservations must be a list");
    std::vector<ReservationDecl> result;
    for (const auto& item : reservations) {
      reader_.require_keys(item, what + " reservation", {"at", "bytes", "label"});
      result.push_back(ReservationDecl{
          reader_.location(reader_.required(item, "at", what + " reservation"), what + " reservation at"),
          reader_.size(reader_.required(item, "bytes", what + " reservation"), what + " reservation bytes"),
          reader_.name(reader_.required(item, "label", what + " reservation"), what + " reservation label")});
    }
    return result;
  }

  // A controller request: `name`, `requirements: [{value, at}]`, `reservations`.
  void parse_request(const YAML::Node& args, const std::string& what, Step& step) {
    step.plan = args["name"] ? reader_.name(args["name"], what + " name") : "request";
    const YAML::Node requirements = reader_.required(args, "requirements", what);
    if (!requirements.IsSequence() || requirements.size() == 0) {
      reader_.fail(requirements, what + " requirements must be a non-empty list of {value, at}");
    }
    for (const auto& item : requirements) {
      reader_.require_keys(item, what + " requirement", {"value", "at"});
      RequirementDecl requirement;
      requirement.value = value_ref(reader_.required(item, "value", what + " requirement"), what + " requirement value");
      requirement.location = reader_.location(reader_.required(item, "at", what + " requirement"),
                                              what + " requirement at");
      for (const auto& earlier : step.requirements) {
        if (earlier.value == requirement.value && earlier.location == requirement.location) {
          reader_.fail(item, what + " requires value '" + requirement.value + "' at " +
                                 requirement.location.name() + " twice");
        }
      }
      step.requirements.push_back(std::move(requirement));
    }
    if (args["reservations"]) step.reservations = parse_reservations(args["reservations"], what);
  }

  void parse_plans(const YAML::Node& node) {
    reader_.require_map(node, "plans");
    each_entry(node, "plan", [&](const auto& entry) { parse_plan(entry.first, entry.second); });
  }

  void parse_plan(const YAML::Node& key, const YAML::Node& body) {
    PlanDecl plan;
    plan.name = reader_.name(key, "plan name");
    plan.line = line_of(key);
    const std::string what = "plan '" + plan.name + "'";
    if (scenario_.find_plan(plan.name) != nullptr) reader_.fail(key, "duplicate " + what);
    reader_.require_keys(body, what, {"reclaim", "reservations", "enter", "exit", "repeat"});
    if (body["reclaim"]) plan.reclaim = parse_actions(body["reclaim"], what + " reclaim");
    if (body["enter"]) plan.enter = parse_actions(body["enter"], what + " enter");
    if (body["exit"]) plan.exit = parse_actions(body["exit"], what + " exit");
    if (const YAML::Node reservations = body["reservations"]) plan.reservations = parse_reservations(reservations, what);
    scenario_.plans.push_back(std::move(plan));
  }


  void parse_location_expect(const YAML::Node& node, const std::string& what, LocationExpect& expect) {
    reader_.require_keys(node, what,
                         {"budget", "used", "reserved", "remaining", "peak_used", "peak_charged", "values",
                          "reservations", "uses", "holds", "pending"});
    const auto size = [&](const char* key, std::optional<std::int64_t>& field) {
      if (node[key]) field = reader_.size(node[key], what + " " + key);
    };
    const auto number = [&](const char* key, std::optional<std::int64_t>& field) {
      if (node[key]) field = reader_.count(node[key], what + " " + key);
    };
    size("budget", expect.budget);
    size("used", expect.used);
    size("reserved", expect.reserved);
    size("peak_used", expect.peak_used);
    size("peak_charged", expect.peak_charged);
    if (node["remaining"]) {
      expect.remaining = reader_.text(node["remaining"], what + " remaining") == "none"
                             ? std::optional<std::int64_t>()
                             : std::optional<std::int64_t>(reader_.size(node["remaining"], what + " remaining"));
    }
    number("values", expect.values);
    number("reservations", expect.reservations);
    number("uses", expect.uses);
    number("holds", expect.holds);
    number("pending", expect.pending);
  }

  Expectation parse_expect(const YAML::Node& node, const std::string& what) {
    reader_.require_keys(node, what,
                         {"error", "message", "injected", "no_op", "source", "destination", "reason", "phase",
                          "failed_index", "committed", "feasible", "predicted_peak", "locations", "resident",
                          "discarded", "faults_fired", "diagnostics", "reclaim", "enter", "evictions",
                          "explored_states", "state_version", "version_delta", "trace", "transitions",
                          "explanation", "facts", "unregistered", "budget_error", "stale", "failed_action",
                          "failed_reservation"});
    Expectation expect;
    if (node["error"]) {
      expect.error = reader_.text(node["error"], what + " error");
      if (error_kinds.count(*expect.error) == 0) {
        std::string list;
        for (const auto& kind : error_kinds) list += (list.empty() ? "" : ", ") + kind;
        reader_.fail(node["error"], "unknown error kind '" + *expect.error + "' (known: " + list + ")");
      }
    }
    if (node["message"]) expect.message = reader_.text(node["message"], what + " message");
    if (node["injected"]) expect.injected = reader_.boolean(node["injected"], what + " injected");
    if (node["no_op"]) expect.no_op = reader_.boolean(node["no_op"], what + " no_op");
    if (node["source"]) expect.source = reader_.optional_location(node["source"], what + " source");
    if (node["destination"]) {
      expect.destination = reader_.optional_location(node["destination"], what + " destination");
    }
    if (node["reason"]) expect.reason = reader_.text(node["reason"], what + " reason");
    if (node["phase"]) {
      expect.phase = reader_.text(node["phase"], what + " phase");
      static const std::set<std::string> phases{"execute", "reclaim", "reserve", "enter", "exit"};
      if (phases.count(*expect.phase) == 0) {
        reader_.fail(node["phase"], "phase must be execute, reclaim, reserve, enter or exit");
      }
    }
    if (node["failed_index"]) expect.failed_index = reader_.count(node["failed_index"], what + " failed_index");
    if (node["committed"]) expect.committed = reader_.count(node["committed"], what + " committed");
    if (node["feasible"]) expect.feasible = reader_.boolean(node["feasible"], what + " feasible");
    if (node["predicted_peak"]) {
      expect.predicted_peak = reader_.location_map(
          node["predicted_peak"], what + " predicted_peak",
          [&](const YAML::Node& n, const std::string& w) { return reader_.size(n, w); });
    }
    if (const YAML::Node locations = node["locations"]) {
      reader_.require_map(locations, what + " locations");
      for (const auto& entry : locations) {
        const ResidencyLocation where = reader_.location(entry.first, what + " locations key");
        parse_location_expect(entry.second, what + " location " + where.name(), expect.locations[where]);
      }
    }
    if (const YAML::Node resident = node["resident"]) {
      reader_.require_map(resident, what + " resident");
      for (const auto& entry : resident) {
        const std::string value = value_ref(entry.first, what + " resident key");
        std::vector<ResidencyLocation> places;
        if (!entry.second.IsSequence()) reader_.fail(entry.second, what + " resident entries must be lists");
        for (const auto& item : entry.second) places.push_back(reader_.location(item, what + " resident location"));
        expect.resident[value] = places;
      }
    }
    if (const YAML::Node discarded = node["discarded"]) {
      reader_.require_map(discarded, what + " discarded");
      for (const auto& entry : discarded) {
        expect.discarded[value_ref(entry.first, what + " discarded key")] =
            reader_.boolean(entry.second, what + " discarded");
      }
    }
    if (node["faults_fired"]) expect.faults_fired = reader_.count(node["faults_fired"], what + " faults_fired");
    if (node["diagnostics"]) expect.diagnostics = reader_.count(node["diagnostics"], what + " diagnostics");
    if (node["reclaim"]) expect.reclaim = parse_actions(node["reclaim"], what + " reclaim");
    if (node["enter"]) expect.enter = parse_actions(node["enter"], what + " enter");
    if (node["evictions"]) expect.evictions = reader_.count(node["evictions"], what + " evictions");
    if (node["explored_states"]) {
      expect.explored_states = reader_.count(node["explored_states"], what + " explored_states");
    }
    parse_state_expect(node, what, expect);
    return expect;
  }

  // Optional reason text: "none" expects no reason at all.
  void reason_key(const YAML::Node& node, const std::string& what, std::optional<std::string>& field) {
    if (node["reason"]) field = reader_.text(node["reason"], what + " reason");
  }

  // The fields transition reports and action explanations share.
  template <class Entry>
  void report_fields(const YAML::Node& item, const std::string& context, Entry& entry) {
    if (item["action"]) entry.action = reader_.text(item["action"], context + " action");
    if (item["no_op"]) entry.no_op = reader_.boolean(item["no_op"], context + " no_op");
    if (item["source"]) entry.source = reader_.optional_location(item["source"], context + " source");
    if (item["destination"]) entry.destination = reader_.optional_location(item["destination"], context + " destination");
    if (item["logical_bytes"]) entry.logical_bytes = reader_.size(item["logical_bytes"], context + " logical_bytes");
    if (item["storage_bytes"]) entry.storage_bytes = reader_.size(item["storage_bytes"], context + " storage_bytes");
    reason_key(item, context, entry.reason);
  }

  void parse_state_expect(const YAML::Node& node, const std::string& what, Expectation& expect) {
    if (node["state_version"]) {
      expect.state_version = static_cast<std::uint64_t>(reader_.count(node["state_version"], what + " state_version"));
    }
    if (node["version_delta"]) expect.version_delta = reader_.count(node["version_delta"], what + " version_delta");
    if (node["trace"]) expect.trace = reader_.names(node["trace"], what + " trace");
    if (const YAML::Node list = node["transitions"]) {
      if (!list.IsSequence()) reader_.fail(list, what + " transitions must be a list");
      expect.transitions.emplace();
      for (const auto& item : list) {
        const std::string context = what + " transition";
        reader_.require_keys(item, context, {"action", "no_op", "source", "destination", "logical_bytes",
                                             "storage_bytes", "allocator_device", "reason"});
        TransitionExpect entry;
        report_fields(item, context, entry);
        if (item["allocator_device"]) {
          entry.allocator_device = reader_.optional_location(item["allocator_device"], context + " allocator_device");
        }
        expect.transitions->push_back(std::move(entry));
      }
    }
    if (const YAML::Node list = node["explanation"]) {
      if (!list.IsSequence()) reader_.fail(list, what + " explanation must be a list, one entry per action");
      expect.explanation.emplace();
      for (const auto& item : list) {
        const std::string context = what + " explanation";
        reader_.require_keys(item, context, {"action", "executable", "no_op", "source", "destination",
                                             "logical_bytes", "storage_bytes", "reason"});
        ExplanationExpect entry;
        report_fields(item, context, entry);
        if (item["executable"]) entry.executable = reader_.boolean(item["executable"], context + " executable");
        expect.explanation->push_back(std::move(entry));
      }
    }
    if (const YAML::Node facts = node["facts"]) {
      reader_.require_map(facts, what + " facts");
      for (const auto& entry : facts) {
        const std::string value = value_ref(entry.first, what + " facts key");
        const std::string context = what + " facts of '" + value + "'";
        const YAML::Node item = entry.second;
        reader_.require_keys(item, context, {"has_source", "source_at", "type", "mode", "recoverability",
                                             "logical_bytes", "storage_bytes", "at"});
        ValueFactsExpect fact;
        if (item["has_source"]) fact.has_source = reader_.boolean(item["has_source"], context + " has_source");
        if (item["source_at"]) fact.source_at = reader_.optional_location(item["source_at"], context + " source_at");
        if (item["type"]) fact.type = reader_.text(item["type"], context + " type");
        if (item["mode"]) fact.mode = reader_.text(item["mode"], context + " mode");
        if (item["recoverability"]) fact.recoverability = reader_.text(item["recoverability"], context + " recoverability");
        if (item["logical_bytes"]) fact.logical_bytes = reader_.size(item["logical_bytes"], context + " logical_bytes");
        if (item["storage_bytes"]) fact.storage_bytes = reader_.size(item["storage_bytes"], context + " storage_bytes");
        if (const YAML::Node at = item["at"]) {
          reader_.require_map(at, context + " at");
          for (const auto& place : at) {
            const ResidencyLocation location = reader_.location(place.first, context + " at key");
            const std::string here = context + " at " + location.name();
            reader_.require_keys(place.second, here, {"charged", "logical", "storage", "uses", "holds", "pending"});
            MaterializationExpect facts_here;
            const auto size = [&](const char* key, std::optional<std::int64_t>& field) {
              if (place.second[key]) field = reader_.size(place.second[key], here + " " + key);
            };
            const auto number = [&](const char* key, std::optional<std::int64_t>& field) {
              if (place.second[key]) field = reader_.count(place.second[key], here + " " + key);
            };
            size("charged", facts_here.charged);
            size("logical", facts_here.logical);
            size("storage", facts_here.storage);
            number("uses", facts_here.uses);
            number("holds", facts_here.holds);
            number("pending", facts_here.pending);
            fact.at[location] = facts_here;
          }
        }
        expect.facts[value] = std::move(fact);
      }
    }
    if (const YAML::Node list = node["unregistered"]) {
      if (!list.IsSequence()) reader_.fail(list, what + " unregistered must be a list of locations");
      for (const auto& item : list) expect.unregistered.push_back(reader_.location(item, what + " unregistered"));
    }
    if (const YAML::Node budget = node["budget_error"]) {
      const std::string context = what + " budget_error";
      reader_.require_keys(budget, context, {"location", "budget", "used", "reserved", "requested"});
      BudgetErrorExpect entry;
      if (budget["location"]) entry.location = reader_.location(budget["location"], context + " location");
      const auto size = [&](const char* key, std::optional<std::int64_t>& field) {
        if (budget[key]) field = reader_.size(budget[key], context + " " + key);
      };
      size("budget", entry.budget);
      size("used", entry.used);
      size("reserved", entry.reserved);
      size("requested", entry.requested);
      expect.budget_error = entry;
    }
    if (const YAML::Node stale = node["stale"]) {
      reader_.require_keys(stale, what + " stale", {"expected", "actual"});
      if (stale["expected"]) {
        expect.stale_expected = static_cast<std::uint64_t>(reader_.count(stale["expected"], what + " stale expected"));
      }
      if (stale["actual"]) {
        expect.stale_actual = static_cast<std::uint64_t>(reader_.count(stale["actual"], what + " stale actual"));
      }
    }
    if (node["failed_action"]) expect.failed_action = reader_.text(node["failed_action"], what + " failed_action");
    if (node["failed_reservation"]) {
      expect.failed_reservation = reader_.text(node["failed_reservation"], what + " failed_reservation");
    }
  }

  // `value: NAME`, or `handle: {id, manager: this|foreign, type}` to pass a
  // handle the scenario writes out (malformed, unknown or foreign).
  void value_or_handle(const YAML::Node& args, const std::string& what, Step& step) {
    if (args["value"].IsDefined() == args["handle"].IsDefined()) {
      reader_.fail(args, what + " needs exactly one of 'value' and 'handle'");
    }
    if (args["value"]) {
      step.value = value_ref(args["value"], what + " value");
      return;
    }
    const YAML::Node node = args["handle"];
    reader_.require_keys(node, what + " handle", {"id", "manager", "type"});
    HandleSpec handle;
    handle.id = reader_.text(reader_.required(node, "id", what + " handle"), what + " handle id");
    if (node["manager"]) {
      const std::string manager = reader_.text(node["manager"], what + " handle manager");
      if (manager != "this" && manager != "foreign") {
        reader_.fail(node["manager"], what + " handle manager must be this or foreign");
      }
      handle.foreign = manager == "foreign";
    }
    if (node["type"]) handle.type_name = reader_.text(node["type"], what + " handle type");
    step.handle = handle;
  }

  void define_lifetime(const YAML::Node& node, const std::string& kind, const std::string& what, Step& step) {
    step.name = reader_.name(reader_.required(node, "as", what), what + " as");
    if (lifetimes_.count(step.name) != 0) {
      reader_.fail(node["as"], "lifetime name '" + step.name + "' is already used by a " + lifetimes_[step.name]);
    }
    lifetimes_[step.name] = kind;
  }

  std::string lifetime_ref(const YAML::Node& node, const std::string& kind, const std::string& what) {
    const std::string ref = reader_.name(node, what);
    const auto found = lifetimes_.find(ref);
    if (found == lifetimes_.end()) {
      std::vector<std::string> names;
      for (const auto& [name, earlier_kind] : lifetimes_) {
        if (earlier_kind == kind) names.push_back(name);
      }
      reader_.fail(node, what + " names no earlier " + kind + " '" + ref + "'" + did_you_mean(ref, names));
    }
    if (found->second != kind) reader_.fail(node, what + " '" + ref + "' is a " + found->second + ", not a " + kind);
    return ref;
  }

  void parse_version(const YAML::Node& args, const std::string& what, Step& step) {
    const YAML::Node version = args["expected_version"];
    if (!version) return;
    const std::string text = reader_.text(version, what + " expected_version");
    if (!text.empty() && std::isdigit(static_cast<unsigned char>(text[0]))) {
      step.expected_version = static_cast<std::uint64_t>(reader_.count(version, what + " expected_version"));
    } else {
      if (remembered_.count(text) == 0) reader_.fail(version, what + " expected_version names no remembered version");
      step.expected_version_ref = text;
    }
  }

  void parse_streams(const YAML::Node& args, const std::string& what, Step& step) {
    const YAML::Node streams = args["streams"];
    if (!streams) return;
    reader_.require_map(streams, what + " streams");
    for (const auto& entry : streams) {
      step.transfer_streams[reader_.location(entry.first, what + " streams key")] =
          reader_.stream(entry.second, what + " stream");
    }
  }

  Step parse_step(const YAML::Node& node) {
    reader_.require_map(node, "step");
    reader_.begin_step();
    Step step;
    step.line = line_of(node);
    std::optional<std::string> kind_name;
    YAML::Node args;
    for (const auto& entry : node) {
      const std::string key = reader_.text(entry.first, "step key");
      if (key == "expect" || key == "remember_version") continue;
      const auto found = step_kinds().find(key);
      if (found == step_kinds().end()) {
        std::vector<std::string> names{"expect", "remember_version", "repeat"};
        for (const auto& [name, kind] : step_kinds()) names.push_back(name);
        reader_.fail(entry.first, "unknown step '" + key + "'" + did_you_mean(key, names));
      }
      if (kind_name) reader_.fail(entry.first, "a step has exactly one operation; found '" + *kind_name + "' and '" + key + "'");
      kind_name = key;
      step.kind = found->second;
      args = entry.second;
    }
    if (!kind_name) reader_.fail(node, "step names no operation");
    const std::string what = "step '" + *kind_name + "'";
    if (args.IsNull()) args = YAML::Node(YAML::NodeType::Map);
    switch (step.kind) {
      case StepKind::adopt:
      case StepKind::register_source: {
        reader_.require_keys(args, what, {"value", "bytes", "elements", "dtype", "type", "mode", "at", "fail_on_load",
                                          "reenter_on_load", "wrong", "aliases", "payload"});
        if (args.size() > 1) declare_inline(args, step.kind == StepKind::register_source, what);
        step.value = value_ref(reader_.required(args, "value", what), what + " value");
        const ValueDecl& value = *scenario_.find_value(step.value);
        if (!value.deferred) reader_.fail(args, what + ": value '" + step.value + "' is not declared deferred");
        if (value.source != (step.kind == StepKind::register_source)) {
          reader_.fail(args, what + ": value '" + step.value + "' is declared with " +
                                 (value.source ? "source_at" : "adopt_at"));
        }
        break;
      }
      case StepKind::ensure:
      case StepKind::copy:
        reader_.require_keys(args, what, {"value", "handle", "at", "stream"});
        value_or_handle(args, what, step);
        step.location = reader_.location(reader_.required(args, "at", what), what + " at");
        if (args["stream"]) step.stream = reader_.stream(args["stream"], what + " stream");
        break;
      case StepKind::move:
        reader_.require_keys(args, what, {"value", "handle", "to", "from", "stream"});
        value_or_handle(args, what, step);
        step.location = reader_.location(reader_.required(args, "to", what), what + " to");
        if (args["from"]) step.from = reader_.location(args["from"], what + " from");
        if (args["stream"]) step.stream = reader_.stream(args["stream"], what + " stream");
        break;
      case StepKind::drop:
        reader_.require_keys(args, what, {"value", "handle", "at"});
        value_or_handle(args, what, step);
        step.location = reader_.location(reader_.required(args, "at", what), what + " at");
        break;
      case StepKind::discard:
        reader_.require_keys(args, what, {"value", "handle"});
        value_or_handle(args, what, step);
        break;
      case StepKind::execute:
        reader_.require_keys(args, what, {"name", "actions", "expected_version", "streams"});
        step.plan = args["name"] ? reader_.name(args["name"], what + " name") : "residency-actions";
        step.actions = parse_actions(reader_.required(args, "actions", what), what);
        parse_version(args, what, step);
        parse_streams(args, what, step);
        break;
      case StepKind::explain:
      case StepKind::scope_enter: {
        const bool scope = step.kind == StepKind::scope_enter;
        if (scope) {
          reader_.require_keys(args, what, {"plan", "decision", "as", "expected_version", "streams"});
        } else {
          reader_.require_keys(args, what, {"plan", "expected_version"});
        }
        if (scope && args["decision"]) {
          // The scope of a decision remembered by an earlier decide step.
          if (args["plan"] || args["expected_version"]) {
            reader_.fail(args, what + ": a decision brings its own plan and expected version");
          }
          step.decision = reader_.name(args["decision"], what + " decision");
          if (decisions_.count(step.decision) == 0) {
            reader_.fail(args["decision"], what + " names no earlier decide step's decision '" + step.decision + "'" +
                                               did_you_mean(step.decision, decisions_));
          }
          parse_streams(args, what, step);
          define_lifetime(args, "scope", what, step);
          break;
        }
        const YAML::Node plan = reader_.required(args, "plan", what);
        step.plan = reader_.name(plan, what + " plan");
        if (scenario_.find_plan(step.plan) == nullptr) {
          std::vector<std::string> names;
          for (const auto& declared : scenario_.plans) names.push_back(declared.name);
          reader_.fail(plan, what + " names unknown plan '" + step.plan + "'" + did_you_mean(step.plan, names));
        }
        parse_version(args, what, step);
        if (scope) {
          parse_streams(args, what, step);
          define_lifetime(args, "scope", what, step);
        }
        break;
      }
      case StepKind::scope_close:
        reader_.require_keys(args, what, {"scope"});
        step.name = lifetime_ref(reader_.required(args, "scope", what), "scope", what + " scope");
        break;
      case StepKind::acquire:
      case StepKind::hold:
        if (step.kind == StepKind::acquire) {
          reader_.require_keys(args, what, {"values", "at", "stream", "as"});
          if (args["stream"]) step.stream = reader_.stream(args["stream"], what + " stream");
        } else {
          reader_.require_keys(args, what, {"values", "at", "as"});
        }
        step.values = reader_.names(reader_.required(args, "values", what), what + " values");
        for (std::size_t i = 0; i < step.values.size(); ++i) value_ref(args["values"][i], what + " values");
        step.location = reader_.location(reader_.required(args, "at", what), what + " at");
        define_lifetime(args, step.kind == StepKind::acquire ? "lease" : "hold", what, step);
        break;
      case StepKind::add_consumer_stream:
        reader_.require_keys(args, what, {"lease", "stream"});
        step.name = lifetime_ref(reader_.required(args, "lease", what), "lease", what + " lease");
        step.stream = reader_.stream(reader_.required(args, "stream", what), what + " stream");
        break;
      case StepKind::release: {
        reader_.require_keys(args, what, {"lease", "hold", "reservation", "wait"});
        int refs = 0;
        for (const char* kind : {"lease", "hold", "reservation"}) {
          if (!args[kind]) continue;
          ++refs;
          step.lifetime_kind = kind;
          step.name = lifetime_ref(args[kind], kind, what + " " + kind);
        }
        if (refs != 1) reader_.fail(args, what + " needs exactly one of lease, hold, reservation");
        if (args["wait"]) {
          if (step.lifetime_kind != "lease") reader_.fail(args["wait"], what + ": wait applies only to leases");
          step.wait = reader_.boolean(args["wait"], what + " wait");
        }
        break;
      }
      case StepKind::abandon: {
        // Destroys the lifetime object without releasing it (the destructor path).
        reader_.require_keys(args, what, {"lease", "hold", "reservation", "scope", "use"});
        int refs = 0;
        for (const char* kind : {"lease", "hold", "reservation", "scope", "use"}) {
          if (!args[kind]) continue;
          ++refs;
          step.lifetime_kind = kind;
          step.name = lifetime_ref(args[kind], kind, what + " " + kind);
        }
        if (refs != 1) reader_.fail(args, what + " needs exactly one of lease, hold, reservation, scope, use");
        break;
      }
      case StepKind::reserve:
        reader_.require_keys(args, what, {"at", "bytes", "label", "as"});
        step.location = reader_.location(reader_.required(args, "at", what), what + " at");
        {
          // A negative count is passed through, so a scenario can test that
          // the manager refuses it (expect an invalid_argument error).
          const YAML::Node bytes = reader_.required(args, "bytes", what);
          const std::string text = reader_.text(bytes, what + " bytes");
          step.bytes = !text.empty() && text[0] == '-' ? reader_.integer(bytes, what + " bytes")
                                                       : reader_.size(bytes, what + " bytes");
        }
        step.label = reader_.text(reader_.required(args, "label", what), what + " label");
        define_lifetime(args, "reservation", what, step);
        break;
      case StepKind::snapshot:
        reader_.require_keys(args, what, {});
        break;
      case StepKind::close:
        reader_.require_keys(args, what, {"wait", "force"});
        step.wait = args["wait"] ? reader_.boolean(args["wait"], what + " wait") : true;
        if (args["force"]) step.force = reader_.boolean(args["force"], what + " force");
        break;
      case StepKind::advance:
        reader_.require_keys(args, what, {"ns"});
        step.ns = reader_.count(reader_.required(args, "ns", what), what + " ns");
        break;
      case StepKind::complete:
        reader_.require_keys(args, what, {"stream"});
        step.stream = reader_.stream(reader_.required(args, "stream", what), what + " stream");
        break;
      case StepKind::work: {
        reader_.require_keys(args, what, {"stream", "ns"});
        step.stream = reader_.stream(reader_.required(args, "stream", what), what + " stream");
        const YAML::Node ns = reader_.required(args, "ns", what);
        step.ns = reader_.text(ns, what + " ns") == "never" ? never_ns()
                                                             : reader_.count(ns, what + " ns");
        break;
      }
      case StepKind::verify:
        reader_.require_keys(args, what, {"values"});
        if (args["values"]) {
          step.values = reader_.names(args["values"], what + " values");
          for (std::size_t i = 0; i < step.values.size(); ++i) value_ref(args["values"][i], what + " values");
        }
        break;
      case StepKind::arm:
        step.fault = parse_fault(reader_, args, what);
        break;
      case StepKind::disarm:
        reader_.require_keys(args, what, {"name"});
        step.name = reader_.name(reader_.required(args, "name", what), what + " name");
        break;
      case StepKind::decide:
        reader_.require_keys(args, what, {"name", "requirements", "reservations", "as"});
        parse_request(args, what, step);
        if (args["as"]) {
          step.decision = reader_.name(args["as"], what + " as");
          if (!decisions_.insert(step.decision).second) {
            reader_.fail(args["as"], what + ": decision name '" + step.decision + "' is already used");
          }
        }
        break;
      case StepKind::use:
        reader_.require_keys(args, what, {"name", "requirements", "reservations", "streams", "transfer_streams", "as"});
        parse_request(args, what, step);
        if (const YAML::Node streams = args["streams"]) {
          reader_.require_map(streams, what + " streams");
          for (const auto& entry : streams) {
            step.consumer_streams[reader_.location(entry.first, what + " streams key")] =
                reader_.stream(entry.second, what + " stream");
          }
        }
        if (const YAML::Node streams = args["transfer_streams"]) {
          reader_.require_map(streams, what + " transfer_streams");
          for (const auto& entry : streams) {
            step.transfer_streams[reader_.location(entry.first, what + " transfer_streams key")] =
                reader_.stream(entry.second, what + " transfer stream");
          }
        }
        define_lifetime(args, "use", what, step);
        break;
      case StepKind::end_use:
        reader_.require_keys(args, what, {"use"});
        step.name = lifetime_ref(reader_.required(args, "use", what), "use", what + " use");
        break;
      case StepKind::set_policy_metadata:
        reader_.require_keys(args, what, {"value", "priority", "stable_key"});
        step.value = value_ref(reader_.required(args, "value", what), what + " value");
        if (args["priority"]) step.priority = reader_.integer(args["priority"], what + " priority");
        if (args["stable_key"]) step.stable_key = reader_.text(args["stable_key"], what + " stable_key");
        break;
    }
    if (node["expect"]) step.expect = parse_expect(node["expect"], what + " expect");
    if (node["remember_version"]) {
      step.remember_version = reader_.name(node["remember_version"], what + " remember_version");
      remembered_.insert(step.remember_version);
    }
    // A step may name a device the runtime lacks only to test that it is refused.
    if (const auto missing = reader_.end_step(); missing && (!step.expect.error || *step.expect.error == "none")) {
      reader_.fail(missing->first, missing->second + "; a step that means to test this needs expect: {error: ...}");
    }
    return step;
  }

  static std::int64_t never_ns() { return std::numeric_limits<std::int64_t>::max(); }

  const Reader& reader_;
  Scenario& scenario_;
  std::map<std::string, std::string> lifetimes_;
  std::set<std::string> remembered_;
  std::set<std::string> decisions_;
};

}  // namespace

const char* to_string(StepKind kind) noexcept {
  for (const auto& [name, value] : step_kinds()) {
    if (value == kind) return name.c_str();
  }
  return "unknown";
}

const ValueDecl* Scenario::find_value(const std::string& value) const {
  for (const auto& item : values) {
    if (item.name == value) return &item;
  }
  return nullptr;
}

const PlanDecl* Scenario::find_plan(const std::string& plan) const {
  for (const auto& item : plans) {
    if (item.name == plan) return &item;
  }
  return nullptr;
}

namespace {

// Walks the YAML event stream (yaml-cpp's node API keeps only the first of
// two equal keys) and rejects a key repeated within one mapping, naming both
// lines.
class DuplicateKeyFinder final : public YAML::EventHandler {
 public:
  explicit DuplicateKeyFinder(std::string file) : file_(std::move(file)) {}

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { node(mark, nullptr); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { node(mark, nullptr); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t, const std::string& value) override {
    node(mark, &value);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    begin(mark, false);
  }
  void OnSequenceEnd() override { end(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    begin(mark, true);
  }
  void OnMapEnd() override { end(); }

 private:
  struct Collection {
    bool map = false;
    bool at_key = true;                // a map's next node is a key
    std::map<std::string, int> lines;  // keys seen, with their lines
  };

  // A complete node (scalar, null, alias) or, with `key` null, a non-scalar.
  void node(const YAML::Mark& mark, const std::string* key) {
    if (!open_.empty() && open_.back().map && open_.back().at_key && key != nullptr && *key != "<<") {
      const auto [seen, inserted] = open_.back().lines.emplace(*key, mark.line + 1);
      if (!inserted) {
        throw ScenarioError(file_, mark.line + 1, mark.column + 1,
                            "duplicate key '" + *key + "' (first at line " + std::to_string(seen->second) +
                                "): a YAML mapping keeps only one of them");
      }
    }
    advance();
  }
  void begin(const YAML::Mark&, bool map) { open_.push_back(Collection{map, true, {}}); }
  void end() {
    open_.pop_back();
    advance();
  }
  void advance() {
    if (!open_.empty() && open_.back().map) open_.back().at_key = !open_.back().at_key;
  }

  std::string file_;
  std::vector<Collection> open_;
};

// YAML merge keys (`<<: *anchor`, or a list of anchors): keys the mapping does
// not set itself are taken from the merged mappings, earlier ones first.
// Bounded, because aliases let a small file describe a huge tree.
void merge_keys(YAML::Node node, std::size_t& budget, const std::string& file, int depth = 0) {
  if (budget == 0) throw ScenarioError(file, 0, 0, "the YAML aliases expand past 1000000 nodes");
  if (depth > 200) {
    throw ScenarioError(file, node.Mark().line + 1, node.Mark().column + 1, "YAML nested more than 200 levels deep");
  }
  --budget;
  if (node.IsSequence()) {
    for (auto item : node) merge_keys(item, budget, file, depth + 1);
    return;
  }
  if (!node.IsMap()) return;
  if (const YAML::Node merged = node["<<"]) {
    const YAML::Mark mark = merged.Mark();
    std::vector<YAML::Node> sources;
    if (merged.IsMap()) sources.push_back(merged);
    if (merged.IsSequence()) {
      for (const auto& item : merged) sources.push_back(item);
    }
    if (sources.empty() || std::any_of(sources.begin(), sources.end(), [](const YAML::Node& s) { return !s.IsMap(); })) {
      throw ScenarioError(file, mark.line + 1, mark.column + 1, "'<<' merges mappings: give it *anchor or [*a, *b]");
    }
    node.remove("<<");
    for (const auto& source : sources) {
      for (const auto& entry : source) {
        const std::string key = entry.first.as<std::string>();
        if (!node[key]) node[key] = entry.second;  // shared, as an alias is
      }
    }
  }
  for (auto entry : node) merge_keys(entry.second, budget, file, depth + 1);
}

// yaml-cpp's messages do not say "tab"; YAML indentation must be spaces.
void reject_tab_indentation(const std::string& text, const std::string& file) {
  int line = 1;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t column = start;
    while (column < text.size() && (text[column] == ' ' || text[column] == '\t')) {
      if (text[column] == '\t') {
        throw ScenarioError(file, line, static_cast<int>(column - start) + 1,
                            "tab character in indentation: YAML indents with spaces only");
      }
      ++column;
    }
    const std::size_t next = text.find('\n', start);
    if (next == std::string::npos) break;
    start = next + 1;
    ++line;
  }
}

}  // namespace

Scenario parse_scenario(const std::string& text, const std::string& file) {
  reject_tab_indentation(text, file);
  YAML::Node root;
  try {
    std::istringstream stream(text);
    YAML::Parser parser(stream);
    DuplicateKeyFinder finder(file);
    // One document, as YAML::Load reads: yaml-cpp can report a next document
    // for ever on some malformed input (",ver"), so never loop on it.
    parser.HandleNextDocument(finder);
    root = YAML::Load(text);
    std::size_t budget = 1'000'000;
    merge_keys(root, budget, file);
  } catch (const YAML::ParserException& error) {
    throw ScenarioError(file, error.mark.line + 1, error.mark.column + 1, "malformed YAML: " + error.msg);
  } catch (const YAML::Exception& error) {
    throw ScenarioError(file, error.mark.line + 1, error.mark.column + 1, "malformed YAML: " + error.msg);
  }
  Reader reader(file);
  Scenario scenario;
  scenario.file = file;
  try {
    ScenarioParser(reader, scenario).parse(root);
  } catch (const YAML::Exception& error) {
    throw ScenarioError(file, error.mark.line + 1, error.mark.column + 1, error.msg);
  }
  return scenario;
}

Scenario load_scenario_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ScenarioError(path, 0, 0, "cannot open scenario file");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_scenario(text.str(), path);
}

}  // namespace fhelium::harness
