// The scenario's values: their deterministic contents, how each is created
// in the manager (adopted, or registered with a source), and what each
// source's loads return, including the source faults a declaration asks for
// (a failing, re-entering, aliasing or wrong load).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fhelium/harness/scenario.hpp"
#include "fhelium/residency.hpp"

namespace fhelium::harness::replay_detail {

// Contents of a declared value with `elements` elements: (i + seed(name))
// mod 251 as its dtype, or for a virtual payload one such element broadcast
// to the size (O(1) to create, copy and compare).
residency::ResidentValue expected_value(const ValueDecl& decl, std::int64_t elements);

class ScenarioValues {
 public:
  // Receives each source fault as it fires: (rule, operation, effect, call index, detail).
  using FaultLog = std::function<void(const std::string&, const std::string&, const std::string&, std::int64_t,
                                      const std::string&)>;

  // `placement` copies values to where they are declared, bypassing the
  // fault layer (placement is the test's business, not the manager's).
  ScenarioValues(const Scenario& scenario, std::shared_ptr<residency::DeviceRuntime> placement, FaultLog log);

  // Creates `decl` in `manager` and returns its handle. The source of a
  // registered value calls back into this object and `manager`: both must
  // outlive the manager's use of the value.
  residency::ResidencyHandle create(residency::ResidencyManager& manager, const ValueDecl& decl);

  // Values whose storage another value aliases, adopted so far.
  std::vector<std::string> alias_targets() const;
  // `target` no longer holds the storage it was adopted with (its
  // materialization there was removed at `step`, or it was discarded): the
  // manager may legally own that storage again, so aliasing it tests
  // nothing. An aliasing adoption or load after this refuses, and misuse()
  // says why.
  void storage_freed(const std::string& target, std::size_t step);
  const std::string& misuse() const { return misuse_; }

 private:
  residency::ResidentValue placed(const residency::ResidentValue& value, const residency::ResidencyLocation& location);
  bool aliased(const std::string& name) const;
  residency::ResidentValue load(residency::ResidencyManager& manager, const ValueDecl& decl);
  // The aliased storage of decl.aliases; throws (and records the misuse) once it was freed.
  const residency::ResidentValue& aliased_storage(const ValueDecl& decl);

  const Scenario& scenario_;
  std::shared_ptr<residency::DeviceRuntime> placement_;
  FaultLog log_;
  std::map<std::string, std::int64_t> loads_;
  // Adopted values whose storage another value aliases (kept to hand out).
  std::map<std::string, residency::ResidentValue> adopted_;
  std::map<std::string, std::size_t> freed_;  // alias target -> step that freed its storage
  std::string misuse_;
};

}  // namespace fhelium::harness::replay_detail
