#include "fhelium/harness/swarm.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>

#include "fhelium/harness/scenario_loader.hpp"
#include "fhelium/harness/shrink.hpp"

namespace fhelium::harness {

namespace {

std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The step kinds a run may use; each run switches some off and weighs the rest.
enum class Op {
  create, ensure, copy, move, drop, discard, execute, explain, scope, acquire, add_stream, release_lease, hold,
  release_hold, reserve, release_reservation, abandon, work, complete, advance, verify, snapshot, decide, use, end_use,
  metadata, arm_disarm
};
constexpr std::array<const char*, 27> op_names{
    "create", "ensure", "copy", "move", "drop", "discard", "execute", "explain", "scope", "acquire", "add_stream",
    "release_lease", "hold", "release_hold", "reserve", "release_reservation", "abandon", "work", "complete",
    "advance", "verify", "snapshot", "decide", "use", "end_use", "metadata", "arm_disarm"};

struct FaultKind {
  const char* operation;
  const char* effect;
};
constexpr std::array<FaultKind, 9> fault_kinds{{{"copy", "fail"},
                                                {"copy", "alias"},
                                                {"record_event", "fail"},
                                                {"record_event", "delay"},
                                                {"record_event", "never_complete"},
                                                {"query_event", "fail"},
                                                {"synchronize_event", "fail"},
                                                {"synchronize_stream", "fail"},
                                                {"allocator_stats", "fail"}}};

struct GenValue {
  std::string name;
  std::int64_t bytes = 0;
  bool source = false;
  bool deferred = false;
  bool created = false;
  std::string at;
  // Where the generator believes it is resident (its transitions may have
  // failed at run time, so only a guide for picking likely-legal steps).
  std::set<std::string> likely;
  // Another value aliases its storage: no step may move, drop or discard
  // it, or the aliasing adoption (or load) would be legal.
  bool frozen = false;
};

struct Open {
  std::string name;
  std::string kind;  // lease | hold | reservation | scope | use
};

class Generator {
  // A value and a location a lease was taken at.
  struct Place {
    std::string value, at;
  };

 public:
  Generator(std::uint64_t seed, std::size_t steps) : rng_(seed), seed_(seed), steps_(steps) {}

  SwarmScenario generate() {
    choose_mix();
    declare_values();
    declare_plans();
    for (std::size_t i = 0; i < steps_; ++i) workload_step();
    closing_steps();
    SwarmScenario result;
    result.yaml = header() + values_.str() + plans_.str() + "steps:\n" + steps_text_.str();
    result.mix = mix_;
    result.steps = step_count_;
    return result;
  }

 private:
  // --- randomness --------------------------------------------------------

  std::uint64_t next() { return rng_(); }
  std::int64_t uniform(std::int64_t lo, std::int64_t hi) {  // inclusive
    return lo + static_cast<std::int64_t>(next() % static_cast<std::uint64_t>(hi - lo + 1));
  }
  bool chance(double p) { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_) < p; }
  template <class T>
  const T& pick(const std::vector<T>& items) {
    return items[static_cast<std::size_t>(next() % items.size())];
  }

  // --- the mix -----------------------------------------------------------

  void choose_mix() {
    cuda_devices_ = chance(0.5) ? 1 : 2;
    locations_ = {"pageable-host", "pinned-host", "cuda:0"};
    if (cuda_devices_ == 2) locations_.push_back("cuda:1");
    virtual_payload_ = chance(0.3);
    copy_ns_per_mib_ = chance(0.5) ? uniform(1, 200000) : 0;
    can_pin_ = !chance(0.05);
    source_faults_ = chance(0.4);
    std::vector<std::string> off;
    for (std::size_t op = 0; op < op_names.size(); ++op) {
      const bool core = op == static_cast<std::size_t>(Op::ensure) || op == static_cast<std::size_t>(Op::move);
      const bool on = core || chance(0.7);
      weights_[op] = on ? static_cast<int>(uniform(1, 10)) : 0;
      if (!on) off.push_back(op_names[op]);
    }
    std::ostringstream faults;
    for (const auto& kind : fault_kinds) {
      if (!chance(0.45)) continue;
      // Log-uniform from 1/1000 to 1/2: some fault kinds almost never, some constantly.
      const double probability = std::pow(10.0, -3.0 + 2.7 * std::uniform_real_distribution<double>(0.0, 1.0)(rng_));
      // Which calls the rule sees: half the rules every call; the others only
      // the steps' own calls (so the replay's snapshots neither use up nor
      // absorb their fires), or only the replay's checks (a failing query
      // there keeps the checks from reaping, so the next steps find more
      // leases still pending).
      const std::int64_t window = uniform(1, 10);
      const std::string during = window <= 5 ? "" : window <= 8 ? "step" : "checks";
      rules_.push_back("{name: f" + std::to_string(rules_.size()) + ", operation: " + kind.operation + ", effect: " +
                       kind.effect + (std::string(kind.effect) == "delay" ? ", delay_ns: " + std::to_string(uniform(1, 100000)) : "") +
                       (chance(0.3) ? ", location: " + device_location() : "") +
                       ", probability: " + format_probability(probability) +
                       (during.empty() ? "" : ", during: " + during) + "}");
      faults << (faults.tellp() > 0 ? " " : "") << kind.operation << "/" << kind.effect << "@" << format_probability(probability)
             << (during.empty() ? "" : "/" + during);
    }
    mix_ = (virtual_payload_ ? "virtual" : "real") + std::string(" payloads, ") + std::to_string(cuda_devices_) +
           " GPU(s); faults: " + (rules_.empty() ? "none" : faults.str()) + (source_faults_ ? " +source" : "") +
           "; off: " + (off.empty() ? "none" : join(off, " "));
  }

  static std::string format_probability(double p) {
    std::ostringstream out;
    out.precision(3);
    out << p;
    return out.str();
  }

  static std::string join(const std::vector<std::string>& items, const char* separator) {
    std::string text;
    for (const auto& item : items) text += (text.empty() ? "" : separator) + item;
    return text;
  }

  std::string device_location() { return "cuda:" + std::to_string(uniform(0, cuda_devices_ - 1)); }
  std::string location() { return pick(locations_); }

  std::string header() const {
    std::ostringstream out;
    out << "name: swarm-" << seed_ << "\n"
        << "description: 'generated swarm run; " << mix_ << "'\n"
        << "seed: " << seed_ << "\n";
    if (!budgets_.empty()) out << "manager: {budgets: {" << join(budgets_, ", ") << "}}\n";
    out << "runtime: {cuda_devices: " << cuda_devices_ << ", can_pin: " << (can_pin_ ? "true" : "false")
        << ", copy_ns_per_mib: " << copy_ns_per_mib_;
    if (!capacity_.empty()) out << ", capacity: {" << join(capacity_, ", ") << "}";
    out << "}\n";
    if (!rules_.empty()) {
      out << "faults:\n";
      for (const auto& rule : rules_) out << "  - " << rule << "\n";
    }
    if (virtual_payload_) out << "limits: {value_bytes: 64GiB}\n";
    return out.str();
  }

  // --- declarations ------------------------------------------------------

  void declare_values() {
    const auto count = uniform(2, 8);
    std::map<std::string, std::int64_t> adopted_at_start;
    values_ << "values:\n";
    for (std::int64_t i = 0; i < count; ++i) {
      GenValue value;
      value.name = "v" + std::to_string(i);
      value.source = chance(0.4);
      value.deferred = chance(0.2);
      value.created = !value.deferred;
      value.at = location();
      if (!can_pin_ && value.at == "pinned-host") value.at = "pageable-host";
      if (!value.source) value.likely.insert(value.at);
      static const std::vector<std::pair<std::string, std::int64_t>> dtypes{
          {"float32", 4}, {"int64", 8}, {"uint8", 1}, {"float16", 2}, {"float64", 8}};
      const auto& [dtype, size] = pick(dtypes);
      const std::int64_t elements = virtual_payload_ ? uniform(1, 1024) * (std::int64_t{1} << 20) / size
                                                     : uniform(16, 2048);
      value.bytes = elements * size;
      values_ << "  " << value.name << ": {elements: " << elements << ", dtype: " << dtype
              << (chance(0.4) ? ", mode: replicable" : "") << (value.source ? ", source_at: " : ", adopt_at: ")
              << value.at << (value.deferred ? ", deferred: true" : "") << (virtual_payload_ ? ", payload: virtual" : "");
      if (value.source && source_faults_ && chance(0.4)) {
        static const std::vector<std::string> misbehaviours{"fail_on_load", "reenter_on_load", "wrong"};
        const std::string& how = pick(misbehaviours);
        if (how == "wrong") {
          static const std::vector<std::string> wrongs{"size", "type", "location"};
          values_ << ", wrong: " << pick(wrongs);
        } else {
          values_ << ", " << how << ": " << uniform(1, 4);
        }
      }
      if (!virtual_payload_ && source_faults_ && (value.source || value.deferred) && chance(0.3)) {
        for (auto& other : decls_) {
          if (!other.source && !other.deferred && other.at == value.at) {
            other.frozen = true;
            values_ << ", aliases: " << other.name;
            break;
          }
        }
      }
      values_ << "}\n";
      if (!value.source && !value.deferred) adopted_at_start[value.at] += value.bytes;
      total_bytes_ += value.bytes;
      decls_.push_back(value);
    }
    // Budgets and allocator capacities: room for what starts there, plus a
    // slack from tight to generous.
    for (const auto& at : locations_) {
      const std::int64_t start = adopted_at_start[at];
      if (chance(0.5)) {
        budgets_.push_back(at + ": " + std::to_string(start + total_bytes_ * uniform(10, 150) / 100));
      }
      if (at != "pageable-host" && chance(0.25)) {  // the simulated allocator limits only pinned and CUDA memory
        capacity_.push_back(at + ": " + std::to_string(start + total_bytes_ * uniform(20, 200) / 100));
      }
    }
  }

  std::string action(const GenValue& value) {
    switch (uniform(0, 9)) {
      case 0:
      case 1:
      case 2:
        return "{ensure: {value: " + value.name + ", at: " + location() + "}}";
      case 3:
      case 4:
      case 5:
        return "{move: {value: " + value.name + ", to: " + location() + "}}";
      case 6:
        return "{move: {value: " + value.name + ", to: " + location() + ", from: " + location() + "}}";
      case 7:
      case 8:
        return "{drop: {value: " + value.name + ", at: " + location() + "}}";
      default:
        return chance(0.3) ? "{discard: {value: " + value.name + "}}" : "{drop: {value: " + value.name + ", at: " + location() + "}}";
    }
  }

  // A place a lease released without waiting may still protect, or
  // nullptr when there is none.
  const Place* pending_place() {
    if (pending_places_.empty()) return nullptr;
    return &pending_places_[static_cast<std::size_t>(next() % pending_places_.size())];
  }

  // An action on such a place: a drop there, or a move away from it. Empty
  // when there is none.
  std::string aimed_action() {
    const Place* place = pending_place();
    if (place == nullptr) return {};
    if (chance(0.7)) return "{drop: {value: " + place->value + ", at: " + place->at + "}}";
    return "{move: {value: " + place->value + ", to: " + location() + ", from: " + place->at + "}}";
  }

  std::string actions(std::int64_t lo, std::int64_t hi) {
    std::vector<std::string> list;
    const auto count = uniform(lo, hi);
    // Frozen values take no actions; some value always is not frozen.
    while (static_cast<std::int64_t>(list.size()) < count) {
      if (chance(0.3)) {
        if (std::string aimed = aimed_action(); !aimed.empty()) {
          list.push_back(std::move(aimed));
          continue;
        }
      }
      const GenValue& value = pick(decls_);
      if (!value.frozen) list.push_back(action(value));
    }
    return "[" + join(list, ", ") + "]";
  }

  std::string reservation() {
    return "{at: " + location() + ", bytes: " + std::to_string(uniform(1, std::max<std::int64_t>(1, total_bytes_ / 4))) +
           ", label: r" + std::to_string(labels_++) + "}";
  }

  void declare_plans() {
    plan_count_ = static_cast<int>(uniform(0, 3));
    if (plan_count_ == 0) return;
    plans_ << "plans:\n";
    for (int i = 0; i < plan_count_; ++i) {
      plans_ << "  p" << i << ":\n";
      plans_ << "    reclaim: " << actions(0, 2) << "\n";
      if (chance(0.4)) plans_ << "    reservations: [" << reservation() << "]\n";
      plans_ << "    enter: " << actions(1, 3) << "\n";
      plans_ << "    exit: " << actions(0, 2) << "\n";
    }
  }

  // --- steps -------------------------------------------------------------

  // A stream for a transition to `at`: mostly one of at's device (or none
  // for a host location), sometimes a mismatched one the manager must refuse.
  std::string stream_for(const std::string& at) {
    if (chance(0.05)) return ", stream: " + stream();
    if (at.rfind("cuda:", 0) != 0 || chance(0.4)) return "";
    return ", stream: {device: " + at.substr(5) + ", id: " + std::to_string(uniform(0, 3)) + "}";
  }

  std::string stream() {
    return "{device: " + std::to_string(uniform(0, cuda_devices_ - 1)) + ", id: " + std::to_string(uniform(0, 3)) + "}";
  }

  void emit(const std::string& step, bool maybe = true) {
    steps_text_ << "  - " << step << "\n";
    if (maybe) steps_text_ << "    expect: {error: maybe}\n";
    ++step_count_;
  }

  GenValue* created_value() {
    std::vector<GenValue*> live;
    // Values discarded earlier (if the discard succeeded) only sometimes:
    // the refusal is worth a step now and then, not most of them.
    for (auto& value : decls_) {
      if (value.created && !value.frozen && (discarded_.count(value.name) == 0 || chance(0.1))) live.push_back(&value);
    }
    if (live.empty()) return nullptr;
    return live[static_cast<std::size_t>(next() % live.size())];
  }

  // Mostly where the value likely is, sometimes anywhere.
  std::string likely_location(const GenValue& value) {
    if (value.likely.empty() || chance(0.2)) return location();
    auto at = value.likely.begin();
    std::advance(at, static_cast<std::ptrdiff_t>(next() % value.likely.size()));
    return *at;
  }

  // `first` and up to most - 1 other values, preferring those likely at `at`.
  std::string values_at(const GenValue& first, const std::string& at, std::int64_t most) {
    std::vector<std::string> names{first.name};
    const auto count = uniform(1, most);
    for (std::int64_t i = 1; i < count; ++i) {
      const GenValue* value = created_value();
      if (value == nullptr || (value->likely.count(at) == 0 && !chance(0.2))) continue;
      if (std::find(names.begin(), names.end(), value->name) == names.end()) names.push_back(value->name);
    }
    return "[" + join(names, ", ") + "]";
  }

  // A lease at CUDA needs a consumer stream of that device, a host one none;
  // now and then the generator breaks the rule to test the refusal.
  std::string lease_stream(const std::string& at) {
    if (chance(0.05)) return chance(0.5) ? "" : ", stream: " + stream();
    if (at.rfind("cuda:", 0) != 0) return "";
    return ", stream: {device: " + at.substr(5) + ", id: " + std::to_string(uniform(0, 3)) + "}";
  }

  std::string fresh(const char* prefix, const char* kind) {
    const std::string name = prefix + std::to_string(lifetimes_++);
    open_.push_back({name, kind});
    return name;
  }

  // An open lifetime of `kind`, removed from the open list; empty when none.
  std::string close_one(const char* kind) {
    std::vector<std::size_t> matching;
    for (std::size_t i = 0; i < open_.size(); ++i) {
      if (open_[i].kind == kind) matching.push_back(i);
    }
    if (matching.empty()) return {};
    const std::size_t at = matching[static_cast<std::size_t>(next() % matching.size())];
    const std::string name = open_[at].name;
    open_.erase(open_.begin() + static_cast<std::ptrdiff_t>(at));
    return name;
  }

  std::string open_lease() {
    for (const auto& lifetime : open_) {
      if (lifetime.kind == "lease" && chance(0.5)) return lifetime.name;
    }
    return {};
  }

  std::string request(const GenValue& first, bool use) {
    std::vector<std::string> requirements;
    std::map<std::string, std::string> streams;
    const auto count = uniform(1, 2);
    for (std::int64_t i = 0; i < count; ++i) {
      const GenValue* value = created_value();
      if (value == nullptr) value = &first;
      const std::string at = location();
      const std::string requirement = "{value: " + value->name + ", at: " + at + "}";
      if (std::find(requirements.begin(), requirements.end(), requirement) != requirements.end()) continue;
      requirements.push_back(requirement);
      if (at.rfind("cuda:", 0) == 0) streams[at] = "{device: " + at.substr(5) + ", id: " + std::to_string(uniform(0, 3)) + "}";
    }
    std::string text = "{name: q" + std::to_string(requests_++) + ", requirements: [" + join(requirements, ", ") + "]";
    if (chance(0.3)) text += ", reservations: [" + reservation() + "]";
    if (use) {
      std::vector<std::string> entries;
      for (const auto& [at, stream] : streams) entries.push_back(at + ": " + stream);
      text += ", streams: {" + join(entries, ", ") + "}";
    }
    return text;
  }

  Op choose_op() {
    int total = 0;
    for (int weight : weights_) total += weight;
    auto roll = static_cast<int>(next() % static_cast<std::uint64_t>(total));
    for (std::size_t op = 0; op < weights_.size(); ++op) {
      if (roll < weights_[op]) return static_cast<Op>(op);
      roll -= weights_[op];
    }
    return Op::ensure;
  }

  void workload_step() {
    // A kind with nothing to act on (no open lease to release...) is drawn again.
    for (int attempt = 0; attempt < 8; ++attempt) {
      if (try_step(choose_op())) return;
    }
    emit("snapshot: {}");
  }

  bool try_step(Op op) {
    GenValue* value = created_value();
    switch (op) {
      case Op::create: {
        for (auto& candidate : decls_) {
          if (candidate.created) continue;
          candidate.created = true;
          emit(std::string(candidate.source ? "register_source" : "adopt") + ": {value: " + candidate.name + "}");
          return true;
        }
        break;
      }
      case Op::ensure: {
        if (value == nullptr) break;
        const std::string at = location();
        emit("ensure: {value: " + value->name + ", at: " + at + stream_for(at) + "}");
        value->likely.insert(at);
        return true;
      }
      case Op::copy:
        if (value == nullptr) break;
      {
        const std::string at = location();
        emit("copy: {value: " + value->name + ", at: " + at + "}");
        value->likely.insert(at);
        return true;
      }
      case Op::move: {
        if (value == nullptr) break;
        const std::string to = location();
        emit("move: {value: " + value->name + ", to: " + to + (chance(0.2) ? ", from: " + location() : "") +
             stream_for(to) + "}");
        value->likely = {to};
        return true;
      }
      case Op::drop:
        if (!pending_places_.empty() && chance(0.4)) {
          const Place* place = pending_place();
          emit("drop: {value: " + place->value + ", at: " + place->at + "}");
          return true;
        }
        if (value == nullptr) break;
      {
        const std::string at = likely_location(*value);
        emit("drop: {value: " + value->name + ", at: " + at + "}");
        value->likely.erase(at);
        return true;
      }
      case Op::discard:
        if (value == nullptr || !chance(0.3)) break;
        emit("discard: {value: " + value->name + "}");
        discarded_.insert(value->name);
        return true;
      case Op::execute:
        emit("execute: {name: x" + std::to_string(requests_++) + ", actions: " + actions(1, 4) +
             (chance(0.3) ? ", streams: {cuda:0: {device: 0, id: " + std::to_string(uniform(0, 3)) + "}}" : "") + "}");
        return true;
      case Op::explain:
        if (plan_count_ == 0) break;
        emit("explain: {plan: p" + std::to_string(uniform(0, plan_count_ - 1)) + "}");
        return true;
      case Op::scope: {
        const std::string scope = close_one("scope");
        if (!scope.empty() && chance(0.7)) {
          emit("scope_close: {scope: " + scope + "}");
          return true;
        }
        if (plan_count_ == 0) break;
        emit("scope_enter: {plan: p" + std::to_string(uniform(0, plan_count_ - 1)) + ", as: " + fresh("s", "scope") + "}");
        return true;
      }
      case Op::acquire: {
        if (value == nullptr) break;
        const std::string at = likely_location(*value);
        const std::string lease = fresh("l", "lease");
        emit("acquire: {values: " + values_at(*value, at, 3) + ", at: " + at + lease_stream(at) + ", as: " + lease + "}");
        lease_places_[lease] = {value->name, at};
        return true;
      }
      case Op::add_stream: {
        const std::string lease = open_lease();
        if (lease.empty()) break;
        emit("add_consumer_stream: {lease: " + lease + ", stream: " + stream() + "}");
        return true;
      }
      case Op::release_lease: {
        const std::string lease = close_one("lease");
        if (lease.empty()) break;
        const bool wait = chance(0.5);
        emit("release: {lease: " + lease + ", wait: " + (wait ? "true" : "false") + "}");
        auto place = lease_places_.extract(lease);
        if (!wait && !place.empty()) {
          pending_places_.push_back(std::move(place.mapped()));
          if (pending_places_.size() > 8) pending_places_.erase(pending_places_.begin());
        }
        return true;
      }
      case Op::hold:
        if (value == nullptr) break;
      {
        const std::string at = likely_location(*value);
        emit("hold: {values: " + values_at(*value, at, 2) + ", at: " + at + ", as: " + fresh("h", "hold") + "}");
        return true;
      }
      case Op::release_hold: {
        const std::string hold = close_one("hold");
        if (hold.empty()) break;
        emit("release: {hold: " + hold + "}");
        return true;
      }
      case Op::reserve:
        emit("reserve: {at: " + location() + ", bytes: " + std::to_string(uniform(1, std::max<std::int64_t>(1, total_bytes_ / 3))) +
             ", label: w" + std::to_string(labels_++) + ", as: " + fresh("r", "reservation") + "}");
        return true;
      case Op::release_reservation: {
        const std::string reservation = close_one("reservation");
        if (reservation.empty()) break;
        emit("release: {reservation: " + reservation + "}");
        return true;
      }
      case Op::abandon: {
        if (open_.empty()) break;
        const Open lifetime = open_[static_cast<std::size_t>(next() % open_.size())];
        close_named(lifetime.name);
        lease_places_.erase(lifetime.name);
        emit("abandon: {" + lifetime.kind + ": " + lifetime.name + "}");
        return true;
      }
      case Op::work:
        emit("work: {stream: " + stream() + ", ns: " + (chance(0.05) ? std::string("never") : std::to_string(uniform(1, 1000000))) + "}",
             false);
        return true;
      case Op::complete:
        emit("complete: {stream: " + stream() + "}", false);
        return true;
      case Op::advance:
        emit("advance: {ns: " + std::to_string(uniform(1, 2000000)) + "}", false);
        return true;
      case Op::verify:
        emit("verify: {}");
        return true;
      case Op::snapshot:
        emit("snapshot: {}");
        return true;
      case Op::decide:
        if (value == nullptr) break;
        if (chance(0.5)) {
          const std::string decision = "d" + std::to_string(lifetimes_++);
          emit("decide: " + request(*value, false) + ", as: " + decision + "}");
          emit("scope_enter: {decision: " + decision + ", as: " + fresh("s", "scope") + "}");
        } else {
          emit("decide: " + request(*value, false) + "}");
        }
        return true;
      case Op::use:
        if (value == nullptr) break;
        emit("use: " + request(*value, true) + ", as: " + fresh("u", "use") + "}");
        return true;
      case Op::end_use: {
        const std::string use = close_one("use");
        if (use.empty()) break;
        emit("end_use: {use: " + use + "}");
        return true;
      }
      case Op::metadata:
        if (value == nullptr) break;
        emit("set_policy_metadata: {value: " + value->name + ", priority: " + std::to_string(uniform(-5, 5)) +
             (chance(0.5) ? ", stable_key: k" + value->name : "") + "}");
        return true;
      case Op::arm_disarm: {
        if (rules_.empty()) break;
        const std::string rule = "f" + std::to_string(uniform(0, static_cast<std::int64_t>(rules_.size()) - 1));
        // A rule already disarmed is no step: draw another kind.
        if (!disarmed_.insert(rule).second) break;
        emit("disarm: {name: " + rule + "}", false);
        return true;
      }
    }
    return false;
  }

  void close_named(const std::string& name) {
    open_.erase(std::remove_if(open_.begin(), open_.end(), [&](const Open& open) { return open.name == name; }),
                open_.end());
  }

  // Faults off, streams drained, every lifetime ended, everything verified;
  // then (sometimes) the manager closed.
  void closing_steps() {
    for (std::size_t i = 0; i < rules_.size(); ++i) {
      const std::string rule = "f" + std::to_string(i);
      if (disarmed_.count(rule) == 0) emit("disarm: {name: " + rule + "}", false);
    }
    for (const auto& lifetime : std::vector<Open>(open_)) {
      if (lifetime.kind == "lease") emit("release: {lease: " + lifetime.name + ", wait: true}");
      if (lifetime.kind == "hold") emit("release: {hold: " + lifetime.name + "}");
      if (lifetime.kind == "reservation") emit("release: {reservation: " + lifetime.name + "}");
      if (lifetime.kind == "scope") emit("scope_close: {scope: " + lifetime.name + "}");
      if (lifetime.kind == "use") emit("end_use: {use: " + lifetime.name + "}");
    }
    for (int device = 0; device < cuda_devices_; ++device) {
      for (int id = 0; id <= 3; ++id) {
        emit("complete: {stream: {device: " + std::to_string(device) + ", id: " + std::to_string(id) + "}}", false);
      }
    }
    emit("verify: {}");
    if (chance(0.5)) emit(std::string("close: {wait: true, force: ") + (chance(0.5) ? "true" : "false") + "}");
  }

  std::vector<GenValue> decls_;
  std::mt19937_64 rng_;
  std::uint64_t seed_;
  std::size_t steps_;
  std::size_t step_count_ = 0;
  int cuda_devices_ = 2;
  std::vector<std::string> locations_;
  bool virtual_payload_ = false;
  std::int64_t copy_ns_per_mib_ = 0;
  bool can_pin_ = true;
  bool source_faults_ = false;
  std::array<int, op_names.size()> weights_{};
  std::vector<std::string> rules_;
  std::set<std::string> disarmed_, discarded_;
  std::vector<std::string> budgets_, capacity_;
  std::string mix_;
  std::int64_t total_bytes_ = 0;
  int plan_count_ = 0;
  int labels_ = 0;
  int lifetimes_ = 0;
  int requests_ = 0;
  std::vector<Open> open_;
  // Where each open lease was taken (its first value and location), and the
  // places of leases released without waiting, newest last: their
  // protection may still be pending, so steps and plans aim at them.
  std::map<std::string, Place> lease_places_;
  std::vector<Place> pending_places_;
  std::ostringstream values_, plans_, steps_text_;
};

}  // namespace

std::uint64_t swarm_run_seed(std::uint64_t seed, std::size_t index) {
  return splitmix(splitmix(seed) ^ static_cast<std::uint64_t>(index)) % 1000000000000ULL + 1;
}

SwarmScenario generate_swarm_scenario(std::uint64_t seed, std::size_t steps) {
  return Generator(seed, steps).generate();
}

SwarmReport run_swarm(const SwarmOptions& options) {
  if (options.runs == 0) throw std::invalid_argument("swarm: runs must be at least 1");
  if (options.steps == 0) throw std::invalid_argument("swarm: steps must be at least 1");
  SwarmReport report;
  report.seed = options.seed;
  report.runs = options.runs;
  report.steps_per_run = options.steps;
  if (!options.reproducer_dir.empty()) std::filesystem::create_directories(options.reproducer_dir);
  for (std::size_t index = 0; index < options.runs; ++index) {
    SwarmRun run;
    run.index = index;
    run.seed = swarm_run_seed(options.seed, index);
    const SwarmScenario generated = generate_swarm_scenario(run.seed, options.steps);
    const std::string file = "swarm-" + std::to_string(options.seed) + "-" + std::to_string(index) + ".yaml";
    run.mix = generated.mix;
    const Scenario scenario = parse_scenario(generated.yaml, file);
    const ScenarioResult result = replay(scenario, options.replay);
    run.steps = result.steps_run;
    run.invariant_checks = result.invariant_checks;
    run.content_checks = result.content_checks;
    run.faults_fired = result.faults.size();
    run.verdict = result.verdict;
    report.steps += result.steps_run;
    report.invariant_checks += result.invariant_checks;
    report.content_checks += result.content_checks;
    report.faults_fired += result.faults.size();
    for (const auto& fault : result.faults) report.faults_by_kind[fault.operation + "/" + fault.effect] += 1;
    for (const auto& [kind, count] : result.error_paths) report.error_paths[kind] += count;
    if (!result.passed()) {
      run.failure = result.failure;
      run.signature = failure_signature(result);
      ShrinkOptions shrink;
      shrink.max_replays = options.shrink_replays;
      shrink.replay = options.replay;
      const ShrinkResult shrunk = shrink_scenario(generated.yaml, file, shrink);
      run.shrunk_steps = shrunk.steps_after;
      run.shrink_replays = shrunk.replays;
      if (!options.reproducer_dir.empty()) {
        run.reproducer = (std::filesystem::path(options.reproducer_dir) / file).string();
        std::ofstream out(run.reproducer);
        out << "# swarm seed " << options.seed << " run " << index << " (" << generated.mix << ")\n" << shrunk.yaml;
        if (!out) throw std::runtime_error("swarm: cannot write " + run.reproducer);
      }
      report.failures.push_back(run);
    }
    if (options.on_run) options.on_run(run);
  }
  return report;
}

std::string swarm_text(const SwarmReport& report) {
  std::ostringstream out;
  out << "swarm seed " << report.seed << ": " << report.runs << " runs of " << report.steps_per_run
      << " workload steps, " << report.steps << " steps replayed, " << report.invariant_checks
      << " invariant checks, " << report.content_checks << " content checks, " << report.faults_fired
      << " faults fired, " << report.failures.size() << " failing runs\n";
  out << "faults fired by kind:";
  if (report.faults_by_kind.empty()) out << " none";
  for (const auto& [kind, count] : report.faults_by_kind) out << " " << kind << "=" << count;
  out << "\nerror paths reached:";
  if (report.error_paths.empty()) out << " none";
  for (const auto& [kind, count] : report.error_paths) out << " " << kind << "=" << count;
  out << "\n";
  for (const auto& run : report.failures) {
    out << "FAILED run " << run.index << " (seed " << run.seed << "; " << run.mix << "): " << run.signature << "\n"
        << "  " << run.failure << "\n"
        << "  shrunk from " << run.steps << " to " << run.shrunk_steps << " steps in " << run.shrink_replays
        << " replays\n";
    if (!run.reproducer.empty()) out << "  reproduce: residency-replay " << run.reproducer << "\n";
  }
  return out.str();
}

std::string swarm_json(const SwarmReport& report) {
  nlohmann::ordered_json json;
  json["seed"] = report.seed;
  json["runs"] = report.runs;
  json["steps_per_run"] = report.steps_per_run;
  json["steps"] = report.steps;
  json["invariant_checks"] = report.invariant_checks;
  json["content_checks"] = report.content_checks;
  json["faults_fired"] = report.faults_fired;
  json["faults_by_kind"] = report.faults_by_kind;
  json["error_paths"] = report.error_paths;
  json["failures"] = nlohmann::ordered_json::array();
  for (const auto& run : report.failures) {
    json["failures"].push_back({{"run", run.index},
                                {"seed", run.seed},
                                {"mix", run.mix},
                                {"steps", run.steps},
                                {"failure", run.failure},
                                {"signature", run.signature},
                                {"shrunk_steps", run.shrunk_steps},
                                {"shrink_replays", run.shrink_replays},
                                {"reproducer", run.reproducer}});
  }
  return json.dump(2) + "\n";
}

}  // namespace fhelium::harness
