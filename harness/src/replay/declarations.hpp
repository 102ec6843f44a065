// Declarations: the bridge between a scenario's words and the manager's.
// It turns declared actions, plans, requests and streams into manager inputs
// (resolving value names to the handles the run issued), and turns handle ids
// in manager output (descriptions, messages) back into the scenario's value
// names.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fhelium/harness/scenario.hpp"
#include "fhelium/residency.hpp"

namespace fhelium::harness::replay_detail {

class Declarations {
 public:
  Declarations(const Scenario& scenario, std::string manager_id)
      : scenario_(&scenario), manager_id_(std::move(manager_id)) {}

  // Records the handle the manager issued for value `name`.
  void bind(const std::string& name, residency::ResidencyHandle handle);
  const std::map<std::string, residency::ResidencyHandle>& handles() const { return handles_; }
  // The handle of `value`; one the manager never issued when not created yet.
  residency::ResidencyHandle handle(const std::string& value) const;
  // The step's handle: its value's, or one the scenario writes out.
  residency::ResidencyHandle step_handle(const Step& step) const;

  static c10::Stream stream(const StreamRef& ref);
  residency::ResidencyAction action(const ActionDecl& decl) const;
  std::vector<residency::ResidencyAction> actions(const std::vector<ActionDecl>& decls) const;
  residency::ResidencyPlan plan(const std::string& name) const;
  residency::ResidencyRequest request(const Step& step) const;
  residency::ConsumerStreams consumer_streams(const Step& step) const;
  residency::TransferStreams transfer_streams(const Step& step) const;

  // Handle ids in a description replaced by the scenario's value names,
  // word by word ("move 3 auto -> cuda:0" -> "move w auto -> cuda:0").
  std::string named(const std::string& text) const;
  std::string described(const residency::ResidencyAction& action) const;
  // The manager quotes handle ids in its messages ("value '3' (Tensor) ...");
  // a scenario speaks of its values by name.
  std::string quoted_names(std::string message) const;
  // The scenario's name of handle id `id`, or `id` itself.
  std::string value_name(const std::string& id) const;

 private:
  const Scenario* scenario_;
  std::string manager_id_;
  std::map<std::string, residency::ResidencyHandle> handles_;
  std::map<std::string, std::string> names_by_id_;
};

}  // namespace fhelium::harness::replay_detail
