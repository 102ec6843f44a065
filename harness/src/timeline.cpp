// The Trace Event Format timeline of replayed scenarios, on virtual time.
#include <map>
#include <set>

#include "fhelium/harness/reporters.hpp"
#include "fhelium/harness/text_report.hpp"

namespace fhelium::harness {

namespace {

// Trace times are microseconds; virtual time is nanoseconds.
double micros(std::int64_t ns) { return static_cast<double>(ns) / 1000.0; }

class ScenarioTrace {
 public:
  ScenarioTrace(nlohmann::json& events, std::int64_t pid, std::int64_t& next_async_id)
      : events_(events), pid_(pid), next_async_id_(next_async_id) {}

  void write(const ScenarioResult& result) {
    events_.push_back({{"ph", "M"}, {"pid", pid_}, {"name", "process_name"}, {"args", {{"name", result.name}}}});
    track("steps");
    std::int64_t end_ns = 0;
    for (const auto& step : result.steps) end_ns = std::max(end_ns, step.virtual_ns);
    for (const auto& slice : result.stream_activity) {
      end_ns = std::max(end_ns, slice.end_ns.value_or(slice.start_ns));
    }
    for (const auto& step : result.steps) write_step(step);
    write_activity(result.stream_activity, end_ns);
    write_protections(result.steps, end_ns);
    for (const auto& fault : result.faults) {
      events_.push_back({{"ph", "i"},
                         {"s", "p"},
                         {"pid", pid_},
                         {"tid", track("faults")},
                         {"ts", micros(fault.virtual_ns)},
                         {"name", "fault " + fault.rule + " (" + fault.operation + ")"},
                         {"args", {{"step", fault.step}, {"call_index", fault.call_index}, {"detail", fault.detail}}}});
    }
  }

 private:
  std::int64_t track(const std::string& name) {
    const auto found = tracks_.find(name);
    if (found != tracks_.end()) return found->second;
    const auto tid = static_cast<std::int64_t>(tracks_.size() + 1);
    tracks_[name] = tid;
    events_.push_back({{"ph", "M"}, {"pid", pid_}, {"tid", tid}, {"name", "thread_name"}, {"args", {{"name", name}}}});
    events_.push_back(
        {{"ph", "M"}, {"pid", pid_}, {"tid", tid}, {"name", "thread_sort_index"}, {"args", {{"sort_index", tid}}}});
    return tid;
  }

  void slice(const std::string& on, const std::string& name, std::int64_t start_ns, std::int64_t end_ns,
             nlohmann::json args) {
    events_.push_back({{"ph", "X"},
                       {"pid", pid_},
                       {"tid", track(on)},
                       {"ts", micros(start_ns)},
                       {"dur", micros(std::max<std::int64_t>(0, end_ns - start_ns))},
                       {"name", name},
                       {"args", std::move(args)}});
  }

  void write_step(const StepRecord& step) {
    slice("steps", step.kind + (step.outcome == "ok" ? "" : " [" + step.outcome + "]"), step.started_ns,
          step.virtual_ns,
          {{"index", step.index},
           {"line", step.line},
           {"outcome", step.outcome},
           {"message", step.message},
           {"state_version", step.state_version}});
    for (const auto& span : step.spans) {
      slice(span.location, span.description, span.start_ns, span.end_ns, {{"step", step.index}});
    }
    for (const auto& sample : step.locations) {
      track(sample.location);
      nlohmann::json args{{"used_bytes", sample.used_bytes},
                          {"reserved_bytes", sample.reserved_bytes},
                          {"peak_charged_bytes", sample.peak_charged_bytes}};
      if (sample.budget_bytes) args["budget_bytes"] = *sample.budget_bytes;
      events_.push_back({{"ph", "C"},
                         {"pid", pid_},
                         {"ts", micros(step.virtual_ns)},
                         {"name", sample.location + " bytes"},
                         {"args", std::move(args)}});
    }
  }

  void write_activity(const std::vector<StreamSlice>& activity, std::int64_t end_ns) {
    for (const auto& item : activity) {
      if (item.kind == "event") {
        events_.push_back(
            {{"ph", "i"},
             {"s", "t"},
             {"pid", pid_},
             {"tid", track(item.stream)},
             {"ts", micros(item.start_ns)},
             {"name", "event recorded"},
             {"args",
              {{"completes_at_us", item.end_ns ? nlohmann::json(micros(*item.end_ns)) : nlohmann::json("never")}}}});
        continue;
      }
      const std::string name = item.kind == "copy" ? "copy " + format_bytes(item.bytes) + " -> " + item.destination
                                                   : std::string(item.end_ns ? "work" : "work (never completes)");
      nlohmann::json args{{"kind", item.kind}};
      if (item.kind == "copy") args["bytes"] = item.bytes;
      slice(item.stream, name, item.start_ns, item.end_ns.value_or(std::max(end_ns, item.start_ns)), std::move(args));
    }
  }

  // Protection as async spans (they overlap freely): from the end of the
  // step where a count became positive to the end of the step where it fell
  // to zero, or the end of the run.
  void write_protections(const std::vector<StepRecord>& steps, std::int64_t end_ns) {
    struct Open {
      std::int64_t id;
      std::int64_t count;
    };
    std::map<std::tuple<std::string, std::string, std::string>, Open> open;
    const auto close = [&](const std::tuple<std::string, std::string, std::string>& key, std::int64_t at_ns) {
      events_.push_back({{"ph", "e"},
                         {"cat", "protection"},
                         {"id", open.at(key).id},
                         {"pid", pid_},
                         {"tid", track(std::get<1>(key))},
                         {"ts", micros(at_ns)},
                         {"name", std::get<2>(key) + " " + std::get<0>(key)}});
      open.erase(key);
    };
    for (const auto& step : steps) {
      std::set<std::tuple<std::string, std::string, std::string>> now;
      for (const auto& sample : step.protections) {
        for (const auto& [kind, count] : {std::pair<std::string, std::int64_t>{"read", sample.uses},
                                          {"held", sample.holds},
                                          {"pending", sample.pending_events}}) {
          if (count == 0) continue;
          const auto key = std::make_tuple(sample.value, sample.location, kind);
          now.insert(key);
          const auto found = open.find(key);
          if (found != open.end() && found->second.count == count) continue;
          if (found != open.end()) close(key, step.virtual_ns);  // a new count starts a new span
          const std::int64_t id = next_async_id_++;
          open.emplace(key, Open{id, count});
          events_.push_back({{"ph", "b"},
                             {"cat", "protection"},
                             {"id", id},
                             {"pid", pid_},
                             {"tid", track(sample.location)},
                             {"ts", micros(step.virtual_ns)},
                             {"name", kind + " " + sample.value},
                             {"args", {{"value", sample.value}, {"location", sample.location}, {"count", count}}}});
        }
      }
      std::vector<std::tuple<std::string, std::string, std::string>> ended;
      for (const auto& [key, state] : open) {
        if (now.count(key) == 0) ended.push_back(key);
      }
      for (const auto& key : ended) close(key, step.virtual_ns);
    }
    std::vector<std::tuple<std::string, std::string, std::string>> still;
    for (const auto& [key, state] : open) still.push_back(key);
    for (const auto& key : still) close(key, end_ns);
  }

  nlohmann::json& events_;
  const std::int64_t pid_;
  std::int64_t& next_async_id_;
  std::map<std::string, std::int64_t> tracks_;
};

}  // namespace

nlohmann::json timeline(const std::vector<ScenarioResult>& results) {
  nlohmann::json events = nlohmann::json::array();
  std::int64_t next_async_id = 1;
  for (std::size_t process = 0; process < results.size(); ++process) {
    ScenarioTrace(events, static_cast<std::int64_t>(process + 1), next_async_id).write(results[process]);
  }
  return {{"traceEvents", events}, {"displayTimeUnit", "ns"}};
}

}  // namespace fhelium::harness
