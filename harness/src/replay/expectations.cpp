#include "replay/expectations.hpp"

#include "fhelium/harness/text_report.hpp"

namespace fhelium::harness::replay_detail {

using namespace residency;

namespace {

class Checks {
 public:
  explicit Checks(const Declarations& names) : names_(names) {}

  void check_outcome(const Step& step, const Outcome& outcome) {
    const Expectation& expect = step.expect;
    const std::string expected_error = expect.error.value_or("none");
    if (outcome.error) {
      if (expected_error == "none") {
        mismatch("unexpected " + outcome.error->kind + " error: " + outcome.error->message);
      }
      if (expected_error != "any" && expected_error != "maybe" && expected_error != outcome.error->kind) {
        mismatch("expected error " + expected_error + ", got " + outcome.error->kind + ": " +
                              outcome.error->message);
      }
      if (expect.message && outcome.error->message.find(*expect.message) == std::string::npos) {
        mismatch("expected the error message to contain '" + *expect.message + "', got: " +
                              outcome.error->message);
      }
      if (expect.injected && *expect.injected != outcome.error->injected) {
        mismatch(std::string("expected an ") + (*expect.injected ? "injected" : "organic") +
                              " error, got: " + outcome.error->message);
      }
      compare("phase", expect.phase, outcome.error->phase);
      compare("failed_index", expect.failed_index, outcome.error->failed_index);
      compare("committed transitions", expect.committed, outcome.error->committed);
      check_error_fields(step, *outcome.error);
      return;
    }
    if (expect.budget_error || expect.stale_expected || expect.stale_actual || expect.failed_action ||
        expect.failed_reservation) {
      mismatch("budget_error, stale, failed_action and failed_reservation apply only to failing steps");
    }
    if (expected_error != "none" && expected_error != "maybe") {
      mismatch("expected error " + expected_error + ", but the step succeeded");
    }
    if (expect.no_op && *expect.no_op != outcome.no_op) {
      mismatch(std::string("expected no_op ") + (*expect.no_op ? "true" : "false") + ", got " +
                            (outcome.no_op ? "true" : "false"));
    }
    if (expect.source && *expect.source != outcome.source) {
      mismatch("expected source " + name_of(*expect.source) + ", got " + name_of(outcome.source));
    }
    if (expect.destination && *expect.destination != outcome.destination) {
      mismatch("expected destination " + name_of(*expect.destination) + ", got " + name_of(outcome.destination));
    }
    if (expect.reason && outcome.reason.value_or("").find(*expect.reason) == std::string::npos) {
      mismatch("expected the reason to contain '" + *expect.reason + "', got '" + outcome.reason.value_or("") + "'");
    }
    compare("committed transitions", expect.committed, outcome.committed);
    check_decision_expectations(step, outcome);
    check_report_expectations(step, outcome);
    if (outcome.explanation) {
      if (expect.feasible && *expect.feasible != outcome.explanation->feasible) {
        mismatch(std::string("expected the plan to be ") + (*expect.feasible ? "feasible" : "infeasible") +
                              ", explain said " + (outcome.explanation->feasible ? "feasible" : "infeasible: ") +
                              outcome.explanation->reason.value_or(""));
      }
      for (const auto& [location, bytes] : expect.predicted_peak) {
        compare_bytes("predicted peak at " + location.name(), std::optional(bytes),
                outcome.explanation->predicted_peak(location));
      }
    } else if (expect.feasible || !expect.predicted_peak.empty()) {
      mismatch("feasible and predicted_peak apply only to explain steps");
    }
  }

  void check_decision_expectations(const Step& step, const Outcome& outcome) {
    const Expectation& expect = step.expect;
    const bool wanted = expect.reclaim || expect.enter || expect.evictions || expect.explored_states;
    if (!outcome.decision) {
      if (wanted) mismatch("reclaim, enter, evictions and explored_states apply only to decide and use steps");
      return;
    }
    const ResidencyDecision& decision = *outcome.decision;
    const auto listed = [](const std::vector<ResidencyAction>& list) {
      std::string out = "[";
      for (const auto& action : list) out += (out.size() > 1 ? ", " : "") + describe(action);
      return out + "]";
    };
    const auto same = [&](const char* what, const std::optional<std::vector<ActionDecl>>& expected,
                          const std::vector<ResidencyAction>& actual) {
      if (!expected) return;
      const std::vector<ResidencyAction> wanted_actions = names_.actions(*expected);
      if (wanted_actions != actual) {
        mismatch(std::string("expected the decision's ") + what + " actions " + names_.named(listed(wanted_actions)) +
                              ", got " + names_.named(listed(actual)));
      }
    };
    same("reclaim", expect.reclaim, decision.plan.reclaim);
    same("enter", expect.enter, decision.plan.enter);
    compare("evictions", expect.evictions,
            std::optional(static_cast<std::int64_t>(decision.evictions.size())));
    compare("explored states", expect.explored_states, std::optional(decision.explored_states));
  }

  // Handle ids in a description replaced by the scenario's value names,
  // word by word ("move 3 auto -> cuda:0" -> "move w auto -> cuda:0").
  void check_error_fields(const Step& step, const Classified& error) {
    const Expectation& expect = step.expect;
    if (expect.budget_error) {
      const BudgetErrorExpect& want = *expect.budget_error;
      if (!error.budget_location) mismatch("expected a budget error's numbers, got a " + error.kind + " error");
      if (want.location && *want.location != *error.budget_location) {
        mismatch("expected the budget error at " + want.location->name() + ", got " +
                              error.budget_location->name());
      }
      compare_bytes("budget error budget", want.budget, error.budget_bytes);
      compare_bytes("budget error used bytes", want.used, error.used_bytes);
      compare_bytes("budget error reserved bytes", want.reserved, error.reserved_bytes);
      compare_bytes("budget error requested bytes", want.requested, error.requested_bytes);
    }
    const auto version = [&](const char* what, const std::optional<std::uint64_t>& want,
                             const std::optional<std::uint64_t>& got) {
      if (!want) return;
      if (!got) mismatch(std::string("expected a stale error's ") + what + " version, got a " + error.kind + " error");
      if (*want != *got) {
        mismatch(std::string("expected the stale error's ") + what + " version " + std::to_string(*want) +
                              ", got " + std::to_string(*got));
      }
    };
    version("expected", expect.stale_expected, error.stale_expected);
    version("actual", expect.stale_actual, error.stale_actual);
    if (expect.failed_action) {
      if (!error.failed_action) mismatch("expected a failed action, the error names none");
      if (names_.described(*error.failed_action) != *expect.failed_action) {
        mismatch("expected failed action '" + *expect.failed_action + "', got '" +
                              names_.described(*error.failed_action) + "'");
      }
    }
    if (expect.failed_reservation) {
      if (!error.failed_reservation) mismatch("expected a failed reservation, the error names none");
      if (*error.failed_reservation != *expect.failed_reservation) {
        mismatch("expected failed reservation '" + *expect.failed_reservation + "', got '" +
                              *error.failed_reservation + "'");
      }
    }
  }

  static bool reason_matches(const std::optional<std::string>& want, const std::optional<std::string>& got) {
    if (!want) return true;
    if (*want == "none") return !got;
    return got && got->find(*want) != std::string::npos;
  }

  // The fields transition reports and action explanations share.
  template <class Want, class Got>
  void check_report_fields(const std::string& at, const Want& want,
                           const Got& got) {
    if (want.action && *want.action != names_.described(got.action)) {
      mismatch("expected " + at + " to be '" + *want.action + "'");
    }
    if (want.no_op && *want.no_op != got.no_op) {
      mismatch("expected " + at + " no_op " + (*want.no_op ? "true" : "false"));
    }
    if (want.source && *want.source != got.source) {
      mismatch("expected " + at + " source " + name_of(*want.source) + ", got " + name_of(got.source));
    }
    if (want.destination && *want.destination != got.destination) {
      mismatch("expected " + at + " destination " + name_of(*want.destination) + ", got " +
                            name_of(got.destination));
    }
    compare_bytes(at + " logical bytes", want.logical_bytes, std::optional(got.logical_nbytes));
    compare_bytes(at + " storage bytes", want.storage_bytes, std::optional(got.storage_nbytes));
    if (!reason_matches(want.reason, got.reason)) {
      mismatch("expected " + at + " reason '" + *want.reason + "', got '" + got.reason.value_or("none") + "'");
    }
  }

  void check_report_expectations(const Step& step, const Outcome& outcome) {
    const Expectation& expect = step.expect;
    if (expect.transitions) {
      if (!outcome.reports) {
        mismatch("transitions apply to steps that return transition reports (primitives, execute, "
                          "scope_close, end_use)");
      }
      const auto& reports = *outcome.reports;
      std::string listed;
      for (const auto& report : reports) listed += (listed.empty() ? "" : ", ") + names_.described(report.action);
      if (reports.size() != expect.transitions->size()) {
        mismatch("expected " + std::to_string(expect.transitions->size()) + " transition(s), got " +
                              std::to_string(reports.size()) + ": [" + listed + "]");
      }
      for (std::size_t i = 0; i < reports.size(); ++i) {
        const TransitionExpect& want = (*expect.transitions)[i];
        const ResidencyTransitionReport& got = reports[i];
        const std::string at = "transition " + std::to_string(i) + " (" + names_.described(got.action) + ")";
        check_report_fields(at, want, got);
        if (want.allocator_device) {
          const std::optional<ResidencyLocation>& device = *want.allocator_device;
          const bool same = device ? got.allocator_device && *got.allocator_device == device->device()
                                   : !got.allocator_device.has_value();
          if (!same) {
            mismatch("expected " + at + " to sample the allocator of " + name_of(device) + ", got " +
                                  (got.allocator_device ? got.allocator_device->str() : std::string("none")));
          }
        }
      }
    }
    if (expect.explanation) {
      if (!outcome.explanation) mismatch("explanation applies only to explain steps");
      const auto& actions = outcome.explanation->actions;
      if (actions.size() != expect.explanation->size()) {
        mismatch("expected " + std::to_string(expect.explanation->size()) + " explained action(s), got " +
                              std::to_string(actions.size()));
      }
      for (std::size_t i = 0; i < actions.size(); ++i) {
        const ExplanationExpect& want = (*expect.explanation)[i];
        const ResidencyActionExplanation& got = actions[i];
        const std::string at = "explained action " + std::to_string(i) + " (" + names_.described(got.action) + ")";
        check_report_fields(at, want, got);
        if (want.executable && *want.executable != got.executable) {
          mismatch("expected " + at + " executable " + (*want.executable ? "true" : "false"));
        }
      }
    }
  }

  void check_state_expectations(const Step& step, const ResidencySnapshot* snapshot,
                                const std::optional<std::uint64_t>& version_before,
                                const std::vector<std::string>& transitions) {
    const Expectation& expect = step.expect;
    const bool wanted = expect.state_version || expect.version_delta || expect.trace || !expect.facts.empty() ||
                        !expect.unregistered.empty();
    if (!wanted) return;
    if (snapshot == nullptr) mismatch("state expectations need an open manager");
    if (expect.state_version && *expect.state_version != snapshot->state_version) {
      mismatch("expected state_version " + std::to_string(*expect.state_version) + ", got " +
                            std::to_string(snapshot->state_version));
    }
    if (expect.version_delta) {
      if (!version_before) mismatch("version_delta needs a state before the step");
      const auto delta = static_cast<std::int64_t>(snapshot->state_version - *version_before);
      if (delta != *expect.version_delta) {
        mismatch("expected the step to change state_version by " + std::to_string(*expect.version_delta) +
                              ", it changed by " + std::to_string(delta) + " (" + std::to_string(*version_before) +
                              " -> " + std::to_string(snapshot->state_version) + ")");
      }
    }
    if (expect.trace) {
      const std::vector<std::string>& got = transitions;  // already in value names
      if (got != *expect.trace) {
        std::string listed;
        for (const auto& entry : got) listed += (listed.empty() ? "" : ", ") + entry;
        mismatch("expected the trace [" + [&] {
          std::string want;
          for (const auto& entry : *expect.trace) want += (want.empty() ? "" : ", ") + entry;
          return want;
        }() + "], got [" + listed + "]");
      }
    }
    for (const auto& [value, want] : expect.facts) {
      const ResidencyValueSnapshot* entry = snapshot->value(names_.handle(value));
      if (entry == nullptr) mismatch("expected value '" + value + "' in the snapshot");
      const std::string of = " of value '" + value + "'";
      if (want.has_source && *want.has_source != entry->has_source) {
        mismatch("expected has_source " + std::string(*want.has_source ? "true" : "false") + of);
      }
      if (want.source_at && *want.source_at != entry->source_location) {
        mismatch("expected source location " + name_of(*want.source_at) + of + ", got " +
                              name_of(entry->source_location));
      }
      if (want.type && *want.type != entry->spec.value_type) {
        mismatch("expected type " + *want.type + of + ", got " + entry->spec.value_type);
      }
      if (want.mode && *want.mode != to_string(entry->spec.replica_mode)) {
        mismatch("expected mode " + *want.mode + of + ", got " + std::string(to_string(entry->spec.replica_mode)));
      }
      if (want.recoverability && *want.recoverability != to_string(entry->spec.recoverability)) {
        mismatch("expected recoverability " + *want.recoverability + of + ", got " +
                              std::string(to_string(entry->spec.recoverability)));
      }
      compare_bytes("logical bytes" + of, want.logical_bytes, std::optional(entry->spec.logical_nbytes));
      compare_bytes("storage bytes" + of, want.storage_bytes, std::optional(entry->spec.storage_nbytes));
      for (const auto& [location, facts] : want.at) {
        const MaterializationSnapshot* item = entry->at(location);
        if (item == nullptr) mismatch("expected value '" + value + "' materialized at " + location.name());
        const std::string here = of + " at " + location.name();
        compare_bytes("charged bytes" + here, facts.charged, std::optional(item->charged_nbytes));
        compare_bytes("logical bytes" + here, facts.logical, std::optional(item->logical_nbytes));
        compare_bytes("storage bytes" + here, facts.storage, std::optional(item->storage_nbytes));
        compare("use count" + here, facts.uses, std::optional(item->use_count));
        compare("hold count" + here, facts.holds, std::optional(item->hold_count));
        compare("pending event count" + here, facts.pending, std::optional(item->pending_event_count));
      }
    }
    for (const auto& location : expect.unregistered) {
      if (snapshot->location(location) != nullptr) {
        mismatch("expected location " + location.name() + " not to be registered");
      }
    }
  }

  template <class T>
  void compare(const std::string& what, const std::optional<T>& expected,
               const std::optional<T>& actual) {
    if (!expected) return;
    if (!actual) mismatch("expected " + what + " " + text(*expected) + ", got none");
    if (*expected != *actual) mismatch("expected " + what + " " + text(*expected) + ", got " + text(*actual));
  }

  static std::string text(const std::string& value) { return value; }
  static std::string text(std::int64_t value) { return std::to_string(value); }

  // Byte counts in the units people write them in, exact count alongside:
  // "48.0 MiB (50331648 B)".
  static std::string bytes_text(std::int64_t bytes) {
    const std::string human = format_bytes(bytes);
    return bytes > -1024 && bytes < 1024 ? human : human + " (" + std::to_string(bytes) + " B)";
  }
  void compare_bytes(const std::string& what,
                     const std::optional<std::int64_t>& expected, const std::optional<std::int64_t>& actual) {
    if (!expected) return;
    if (!actual) mismatch("expected " + what + " " + bytes_text(*expected) + ", got none");
    if (*expected != *actual) {
      mismatch("expected " + what + " " + bytes_text(*expected) + ", got " + bytes_text(*actual));
    }
  }

  void check_snapshot_expectations(const Step& step, const ResidencySnapshot* snapshot, std::int64_t faults_fired,
                                   const std::function<std::int64_t()>& diagnostics) {
    const Expectation& expect = step.expect;
    const bool needs_snapshot = !expect.locations.empty() || !expect.resident.empty() || !expect.discarded.empty();
    if (expect.faults_fired) {
      const auto fired = faults_fired;
      compare("faults fired", expect.faults_fired, std::optional(fired));
    }
    if (!needs_snapshot && !expect.diagnostics) return;
    if (snapshot == nullptr) mismatch("snapshot expectations need an open manager");
    if (expect.diagnostics) {
      compare("diagnostics", expect.diagnostics,
              std::optional(diagnostics()));
    }
    for (const auto& [location, want] : expect.locations) {
      const ResidencyLocationSnapshot* got = snapshot->location(location);
      if (got == nullptr) mismatch("expected location " + location.name() + " to be registered");
      const std::string at = " at " + location.name();
      if (want.budget) compare_bytes("budget" + at, want.budget, got->budget_bytes);
      compare_bytes("used bytes" + at, want.used, std::optional(got->used_bytes));
      compare_bytes("reserved bytes" + at, want.reserved, std::optional(got->reserved_bytes));
      if (want.remaining && *want.remaining != got->remaining_budget_bytes) {
        mismatch("expected remaining bytes" + at + " " +
                              (*want.remaining ? bytes_text(**want.remaining) : "none") + ", got " +
                              (got->remaining_budget_bytes ? bytes_text(*got->remaining_budget_bytes) : "none"));
      }
      compare_bytes("peak used bytes" + at, want.peak_used, std::optional(got->peak_used_bytes));
      compare_bytes("peak charged bytes" + at, want.peak_charged,
                    std::optional(got->peak_charged_bytes));
      compare("value count" + at, want.values, std::optional(got->value_count));
      compare("reservation count" + at, want.reservations, std::optional(got->reservation_count));
      compare("use count" + at, want.uses, std::optional(got->use_count));
      compare("hold count" + at, want.holds, std::optional(got->hold_count));
      compare("pending event count" + at, want.pending, std::optional(got->pending_event_count));
    }
    for (const auto& [value, places] : expect.resident) {
      const ResidencyValueSnapshot* entry = snapshot->value(names_.handle(value));
      std::vector<ResidencyLocation> actual;
      if (entry != nullptr) {
        for (const auto& item : entry->materializations) actual.push_back(item.location);
      }
      if (actual != places) {
        const auto list = [](const std::vector<ResidencyLocation>& locations) {
          std::string out = "[";
          for (const auto& location : locations) out += (out.size() > 1 ? ", " : "") + location.name();
          return out + "]";
        };
        mismatch("expected value '" + value + "' resident at " + list(places) + ", got " + list(actual));
      }
    }
    for (const auto& [value, discarded] : expect.discarded) {
      const ResidencyValueSnapshot* entry = snapshot->value(names_.handle(value));
      const bool actual = entry != nullptr && entry->discarded;
      if (actual != discarded) {
        mismatch("expected value '" + value + "' " + (discarded ? "" : "not ") + "discarded");
      }
    }
  }


 private:
  [[noreturn]] static void mismatch(const std::string& message) { throw ExpectationMismatch{message}; }

  const Declarations& names_;
};

}  // namespace

void check_outcome(const Declarations& names, const Step& step, const Outcome& outcome) {
  Checks(names).check_outcome(step, outcome);
}

void check_snapshot(const Declarations& names, const Step& step, const ResidencySnapshot* snapshot,
                    std::int64_t faults_fired, const std::function<std::int64_t()>& diagnostics) {
  Checks(names).check_snapshot_expectations(step, snapshot, faults_fired, diagnostics);
}

void check_state(const Declarations& names, const Step& step, const ResidencySnapshot* snapshot,
                 const std::optional<std::uint64_t>& version_before, const std::vector<std::string>& transitions) {
  Checks(names).check_state_expectations(step, snapshot, version_before, transitions);
}

}  // namespace fhelium::harness::replay_detail
