#include "replay/values.hpp"

#include <ATen/ops/arange.h>
#include <ATen/ops/full.h>

#include <algorithm>

#include "fhelium/harness/fault_injecting_runtime.hpp"

namespace fhelium::harness::replay_detail {

using namespace residency;

namespace {

class InjectedSourceFailure final : public std::runtime_error, public InjectedFault {
 public:
  InjectedSourceFailure(const std::string& rule, const std::string& message)
      : std::runtime_error(message), InjectedFault(rule) {}
};

at::ScalarType scalar_type(const std::string& dtype) {
  static const std::map<std::string, at::ScalarType> types{{"float32", at::kFloat}, {"float64", at::kDouble},
                                                           {"float16", at::kHalf},  {"int64", at::kLong},
                                                           {"int32", at::kInt},     {"uint8", at::kByte}};
  return types.at(dtype);
}

std::int64_t name_seed(const std::string& name) {
  std::int64_t seed = 17;
  for (const char c : name) seed = (seed * 31 + static_cast<unsigned char>(c)) % 1000003;
  return seed;
}

}  // namespace

ResidentValue expected_value(const ValueDecl& decl, std::int64_t elements) {
  if (decl.virtual_payload) {
    // One element broadcast to the declared size: O(1) to create, copy and compare.
    const at::Tensor element =
        at::full({1}, name_seed(decl.name) % 251, at::TensorOptions().dtype(scalar_type(decl.dtype)));
    return ResidentValue(decl.type_name, {{"data", element.expand({elements})}}, {{"name", decl.name}});
  }
  const at::Tensor data = at::arange(elements, at::TensorOptions().dtype(at::kLong))
                              .add_(name_seed(decl.name))
                              .remainder_(251)
                              .to(scalar_type(decl.dtype));
  return ResidentValue(decl.type_name, {{"data", data}}, {{"name", decl.name}});
}

ScenarioValues::ScenarioValues(const Scenario& scenario, std::shared_ptr<DeviceRuntime> placement, FaultLog log)
    : scenario_(scenario), placement_(std::move(placement)), log_(std::move(log)) {}

ResidentValue ScenarioValues::placed(const ResidentValue& value, const ResidencyLocation& location) {
  if (location == PAGEABLE_HOST) return value;
  return placement_->copy_to(value, location, std::nullopt);
}

bool ScenarioValues::aliased(const std::string& name) const {
  return std::any_of(scenario_.values.begin(), scenario_.values.end(),
                     [&](const ValueDecl& value) { return value.aliases && *value.aliases == name; });
}

ResidencyHandle ScenarioValues::create(ResidencyManager& manager, const ValueDecl& decl) {
  if (!decl.source) {
    if (decl.aliases) {
      // The other value's own storage: the manager must refuse to own it twice.
      const ResidentValue& storage = aliased_storage(decl);
      log_("alias:" + decl.name, "adopt", "alias", 1, "adopt shares the storage of '" + *decl.aliases + "'");
      return manager.adopt(storage, decl.at, decl.mode);
    }
    ResidentValue value = placed(expected_value(decl, decl.elements), decl.at);
    if (aliased(decl.name)) adopted_.insert_or_assign(decl.name, value);
    return manager.adopt(std::move(value), decl.at, decl.mode);
  }
  const std::int64_t charge = decl.elements * c10::elementSize(scalar_type(decl.dtype));
  const ResidencyValueSpec spec(decl.type_name, charge, charge, decl.mode, Recoverability::reconstructible);
  return manager.register_source(
      spec, [this, &manager, decl] { return load(manager, decl); }, decl.at);
}

std::vector<std::string> ScenarioValues::alias_targets() const {
  std::vector<std::string> names;
  for (const auto& [name, value] : adopted_) {
    if (freed_.count(name) == 0) names.push_back(name);
  }
  return names;
}

void ScenarioValues::storage_freed(const std::string& target, std::size_t step) { freed_.emplace(target, step); }

const ResidentValue& ScenarioValues::aliased_storage(const ValueDecl& decl) {
  const auto freed = freed_.find(*decl.aliases);
  if (freed != freed_.end()) {
    misuse_ = "value '" + decl.name + "' aliases '" + *decl.aliases + "', whose storage the manager gave up at step " +
              std::to_string(freed->second) +
              " (moved, dropped or discarded): owning it again is legal, so the alias tests nothing; alias a value "
              "while it still holds its storage";
    throw std::logic_error(misuse_);
  }
  return adopted_.at(*decl.aliases);
}

ResidentValue ScenarioValues::load(ResidencyManager& manager, const ValueDecl& decl) {
  const std::int64_t count = ++loads_[decl.name];
  const std::string rule = "source:" + decl.name;
  if (decl.fail_on_load && *decl.fail_on_load == count) {
    log_(rule, "load", "fail", count, "load " + std::to_string(count) + " of '" + decl.name + "' fails");
    throw InjectedSourceFailure(rule,
                                "injected source failure: load " + std::to_string(count) + " of '" + decl.name + "'");
  }
  if (decl.reenter_on_load && *decl.reenter_on_load == count) {
    // A callback that calls back into the manager: the manager must refuse
    // (ResidencyReentrancyError), and that refusal ends the load.
    log_(rule, "load", "reenter", count,
         "load " + std::to_string(count) + " of '" + decl.name + "' re-enters the manager");
    manager.snapshot();
  }
  if (decl.aliases) {
    const ResidentValue& storage = aliased_storage(decl);
    log_(rule, "load", "alias", count, "load returns the storage of '" + *decl.aliases + "'");
    return storage;
  }
  if (decl.wrong) {
    log_(rule, "load", "wrong_" + *decl.wrong, count, "load returns a value of the wrong " + *decl.wrong);
    if (*decl.wrong == "size") return placed(expected_value(decl, decl.elements + 1), decl.at);
    if (*decl.wrong == "contents") {
      // Right size, type and place, another value's bytes: only a content check can tell.
      ValueDecl other = decl;
      other.name += "-swapped";
      ResidentValue swapped = expected_value(other, decl.elements);
      return placed(ResidentValue(decl.type_name, {{"data", swapped.field("data")}}, {{"name", decl.name}}), decl.at);
    }
    if (*decl.wrong == "type") {
      ValueDecl other = decl;
      other.type_name += "Mismatch";
      return placed(expected_value(other, decl.elements), decl.at);
    }
    const ResidencyLocation elsewhere = decl.at == PAGEABLE_HOST ? PINNED_HOST : PAGEABLE_HOST;
    return placed(expected_value(decl, decl.elements), elsewhere);
  }
  return placed(expected_value(decl, decl.elements), decl.at);
}

}  // namespace fhelium::harness::replay_detail
