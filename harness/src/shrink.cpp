// Delta debugging over a scenario's YAML tree. Each candidate is the current
// tree with one change (a chunk of a list removed, a map entry removed, a
// selector or size simplified), emitted as YAML, loaded and replayed; it is
// kept when it still fails with the original signature. Changes are tried in
// a fixed order, so the search is deterministic.
#include "fhelium/harness/shrink.hpp"

#include <yaml-cpp/yaml.h>

#include <functional>
#include <stdexcept>
#include <variant>

#include "fhelium/harness/scenario_loader.hpp"

namespace fhelium::harness {

namespace {

using Key = std::variant<std::string, std::size_t>;  // map key or sequence index
using Path = std::vector<Key>;

// The node at `path`, which must exist (non-const access would create it).
YAML::Node at(YAML::Node node, const Path& path) {
  for (const auto& key : path) {
    if (const auto* name = std::get_if<std::string>(&key)) {
      node.reset(node[*name]);
    } else {
      node.reset(node[std::get<std::size_t>(key)]);
    }
  }
  return node;
}

// The lists and maps whose entries may go: steps (top level, in repeat
// blocks), plan action lists, execute actions, fault rules, values, plans.
void collect(const YAML::Node& node, Path& path, std::vector<Path>& containers, const std::string& key) {
  static const std::vector<std::string> lists{"steps", "faults", "enter", "exit", "reclaim", "actions"};
  static const std::vector<std::string> maps{"values", "plans"};
  const bool listed = std::find(lists.begin(), lists.end(), key) != lists.end();
  const bool mapped = std::find(maps.begin(), maps.end(), key) != maps.end();
  if ((node.IsSequence() && listed) || (node.IsMap() && mapped && path.size() == 1)) containers.push_back(path);
  if (node.IsMap()) {
    for (const auto& entry : node) {
      if (!entry.first.IsScalar()) continue;
      const std::string child = entry.first.Scalar();
      path.emplace_back(child);
      collect(entry.second, path, containers, child);
      path.pop_back();
    }
  } else if (node.IsSequence()) {
    for (std::size_t i = 0; i < node.size(); ++i) {
      path.emplace_back(i);
      collect(node[i], path, containers, "");
      path.pop_back();
    }
  }
}

std::size_t entries(const YAML::Node& node) { return node.size(); }

// The node at `path`, or an undefined one; never changes the tree.
YAML::Node find(const YAML::Node& root, const Path& path) {
  YAML::Node node = root;
  for (const auto& key : path) {
    const YAML::Node& current = node;
    if (!current.IsDefined() || !(current.IsMap() || current.IsSequence())) return YAML::Node(YAML::NodeType::Undefined);
    if (const auto* name = std::get_if<std::string>(&key)) {
      if (!current.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
      const YAML::Node child = current[*name];
      if (!child) return YAML::Node(YAML::NodeType::Undefined);  // a missing key (never reset to it)
      node.reset(child);
    } else {
      if (!current.IsSequence() || std::get<std::size_t>(key) >= current.size()) {
        return YAML::Node(YAML::NodeType::Undefined);
      }
      node.reset(current[std::get<std::size_t>(key)]);
    }
  }
  return node;
}

// `node` without entries [begin, end).
YAML::Node without(const YAML::Node& node, std::size_t begin, std::size_t end) {
  YAML::Node result = node.IsSequence() ? YAML::Node(YAML::NodeType::Sequence) : YAML::Node(YAML::NodeType::Map);
  result.SetStyle(node.Style());
  std::size_t index = 0;
  for (const auto& entry : node) {
    const bool dropped = index >= begin && index < end;
    ++index;
    if (dropped) continue;
    if (node.IsSequence()) {
      result.push_back(entry);
    } else {
      result[entry.first] = entry.second;
    }
  }
  return result;
}

std::string emit(const YAML::Node& root) {
  YAML::Emitter out;
  out << root;
  return std::string(out.c_str()) + "\n";
}

std::string first_clause(const std::string& text) {
  const std::size_t end = text.find_first_of(":\n");
  return text.substr(0, end);
}

class Shrinker {
 public:
  Shrinker(const std::string& file, const ShrinkOptions& options) : file_(file), options_(options) {}

  // The signature of `text`'s failure, or "" when it passes or is invalid.
  std::string outcome(const std::string& text) {
    if (replays_ >= options_.max_replays) {
      exhausted_ = true;
      return "";
    }
    Scenario scenario;
    try {
      scenario = parse_scenario(text, file_);
    } catch (const std::exception&) {
      return "";  // removing a declaration something still uses: not a candidate
    }
    ++replays_;
    const ScenarioResult result = replay(scenario, options_.replay);
    return result.verdict == "failed" ? failure_signature(result) : "";
  }

  // Keeps `candidate` (replacing the tree) when it fails the same way.
  bool attempt(YAML::Node& root, const YAML::Node& candidate, const std::string& signature) {
    const std::string text = emit(candidate);
    if (outcome(text) != signature) return false;
    root = candidate;
    return true;
  }

  // Removes chunks of every container, halving the chunk size, to a fixpoint.
  bool remove_entries(YAML::Node& root, const std::string& signature) {
    bool changed = false;
    for (bool again = true; again && !exhausted_;) {
      again = false;
      std::vector<Path> containers;
      Path path;
      collect(root, path, containers, "");
      for (const Path& container : containers) {
        for (std::size_t chunk = std::max<std::size_t>(1, entries(at(root, container)) / 2); chunk >= 1 && !exhausted_;
             chunk /= 2) {
          for (std::size_t begin = 0; begin < entries(at(root, container)) && !exhausted_;) {
            YAML::Node candidate = YAML::Clone(root);
            YAML::Node target = at(candidate, container);
            const std::size_t end = std::min(begin + chunk, entries(target));
            replace(candidate, container, without(target, begin, end));
            if (attempt(root, candidate, signature)) {
              again = changed = true;  // the same begin now names the next chunk
            } else {
              begin += chunk;
            }
          }
          if (chunk == 1) break;
        }
        if (again) break;  // paths may have moved: collect again
      }
    }
    return changed;
  }

  // Simpler parameters: fault selectors dropped or set to the first call,
  // value sizes shrunk, expectations of other steps dropped.
  bool simplify(YAML::Node& root, const std::string& signature) {
    bool changed = false;
    std::vector<std::pair<Path, std::function<void(YAML::Node&)>>> edits;
    const auto each_map = [&](const Path& list, const std::function<void(const Path&, const YAML::Node&)>& visit) {
      const YAML::Node node = find(root, list);
      if (!node.IsDefined()) return;
      if (node.IsSequence()) {
        for (std::size_t i = 0; i < node.size(); ++i) {
          Path item = list;
          item.emplace_back(i);
          visit(item, node[i]);
        }
      } else if (node.IsMap()) {
        for (const auto& entry : node) {
          Path item = list;
          item.emplace_back(entry.first.Scalar());
          visit(item, entry.second);
        }
      }
    };
    each_map({std::string("faults")}, [&](const Path& rule, const YAML::Node& node) {
      for (const char* selector : {"probability", "every", "max_fires"}) {
        if (node[selector]) edits.emplace_back(rule, [selector](YAML::Node& n) { n.remove(selector); });
      }
      if (node["nth"] && node["nth"].Scalar() != "1") edits.emplace_back(rule, [](YAML::Node& n) { n["nth"] = 1; });
    });
    each_map({std::string("values")}, [&](const Path& value, const YAML::Node& node) {
      if (node.IsMap() && node["bytes"] && node["bytes"].Scalar() != "1KiB") {
        edits.emplace_back(value, [](YAML::Node& n) { n["bytes"] = "1KiB"; });
      }
    });
    // Anywhere in the tree: a step's expectations dropped, a repeat cut to
    // its first round, the description dropped.
    std::function<void(const Path&, const YAML::Node&)> walk = [&](const Path& path, const YAML::Node& node) {
      if (node.IsMap()) {
        if (node["expect"] && !path.empty() && std::holds_alternative<std::size_t>(path.back())) {
          edits.emplace_back(path, [](YAML::Node& n) { n.remove("expect"); });
        }
        const YAML::Node repeat = node["repeat"];
        const bool repeats = repeat && repeat.IsMap();
        if (repeats && repeat["range"] && repeat["range"].IsScalar()) {
          // Fewer rounds: one, else half as many (repeated to a fixpoint).
          std::int64_t rounds = 0;
          try {
            rounds = repeat["range"].as<std::int64_t>();
          } catch (const YAML::Exception&) {
          }
          if (rounds > 1) edits.emplace_back(path, [](YAML::Node& n) { n["repeat"]["range"] = 1; });
          if (rounds / 2 > 1) {
            edits.emplace_back(path, [half = rounds / 2](YAML::Node& n) { n["repeat"]["range"] = half; });
          }
        }
        if (repeats && repeat["in"] && repeat["in"].IsSequence() && repeat["in"].size() > 1) {
          edits.emplace_back(path, [](YAML::Node& n) {
            YAML::Node first(YAML::NodeType::Sequence);
            first.SetStyle(YAML::EmitterStyle::Flow);
            first.push_back(n["repeat"]["in"][0]);
            n["repeat"]["in"] = first;
          });
        }
        for (const auto& entry : node) {
          Path child = path;
          child.emplace_back(entry.first.Scalar());
          walk(child, entry.second);
        }
      } else if (node.IsSequence()) {
        for (std::size_t i = 0; i < node.size(); ++i) {
          Path child = path;
          child.emplace_back(i);
          walk(child, node[i]);
        }
      }
    };
    walk({}, root);
    // Optional sections: the description, the top-level fault rules and
    // controller settings, plan reservations.
    for (const char* section : {"description", "faults", "controller"}) {
      if (root[section]) edits.emplace_back(Path{}, [section](YAML::Node& n) { n.remove(section); });
    }
    each_map({std::string("plans")}, [&](const Path& plan, const YAML::Node& node) {
      if (node.IsMap() && node["reservations"]) {
        edits.emplace_back(plan, [](YAML::Node& n) { n.remove("reservations"); });
      }
    });
    for (const auto& [path, edit] : edits) {
      if (exhausted_) break;
      YAML::Node candidate = YAML::Clone(root);
      YAML::Node target = at(candidate, path);
      edit(target);
      changed = attempt(root, candidate, signature) || changed;
    }
    return changed;
  }

  std::size_t replays() const { return replays_; }
  bool exhausted() const { return exhausted_; }

 private:
  static void replace(YAML::Node& root, const Path& path, const YAML::Node& value) {
    YAML::Node parent = at(root, Path(path.begin(), path.end() - 1));
    if (const auto* name = std::get_if<std::string>(&path.back())) {
      parent[*name] = value;
    } else {
      parent[std::get<std::size_t>(path.back())] = value;
    }
  }

  const std::string& file_;
  const ShrinkOptions& options_;
  std::size_t replays_ = 0;
  bool exhausted_ = false;
};

}  // namespace

std::string failure_signature(const ScenarioResult& result) {
  const std::string& failure = result.failure;
  if (const std::size_t at = failure.find("invariant "); at != std::string::npos) {
    const std::size_t end = failure.find(" violated", at);
    if (end != std::string::npos) return failure.substr(at, end - at);
  }
  if (failure.find("content of value") != std::string::npos) return "content of a value";
  if (failure.rfind("canary", 0) == 0) return first_clause(failure);
  // "FILE:LINE: step N (kind): message": the kind and the message's first clause.
  const std::size_t open = failure.find(" (");
  const std::size_t close = failure.find("): ", open == std::string::npos ? 0 : open);
  if (result.failed_step && open != std::string::npos && close != std::string::npos) {
    return "step " + failure.substr(open + 2, close - open - 2) + ": " + first_clause(failure.substr(close + 3));
  }
  return first_clause(failure);
}

ShrinkResult shrink_scenario(const std::string& text, const std::string& file, const ShrinkOptions& options) {
  const Scenario original = parse_scenario(text, file);  // a load error is the caller's to see
  const ScenarioResult first = replay(original, options.replay);
  if (first.verdict != "failed") {
    throw std::invalid_argument(file + " " + first.verdict + " (" + std::to_string(first.steps_run) +
                                " steps): there is no failure to shrink");
  }
  ShrinkResult result;
  result.signature = failure_signature(first);
  result.steps_before = original.steps.size();
  result.bytes_before = text.size();
  Shrinker shrinker(file, options);
  YAML::Node root = YAML::Load(text);
  for (bool changed = true; changed && !shrinker.exhausted();) {
    changed = shrinker.remove_entries(root, result.signature);
    changed = shrinker.simplify(root, result.signature) || changed;
  }
  result.yaml = emit(root);
  result.replays = shrinker.replays() + 1;
  result.steps_after = parse_scenario(result.yaml, file).steps.size();
  result.bytes_after = result.yaml.size();
  result.budget_exhausted = shrinker.exhausted();
  return result;
}

}  // namespace fhelium::harness
