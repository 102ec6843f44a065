#include "fhelium/residency/model.hpp"

#include <stdexcept>

#include "detail/blank_text.hpp"
#include "detail/handle_check.hpp"
#include "fhelium/residency/value.hpp"

namespace fhelium::residency {

std::string_view to_string(ReplicaMode mode) noexcept {
  return mode == ReplicaMode::replicable ? "replicable" : "exclusive";
}

std::string_view to_string(Recoverability recoverability) noexcept {
  return recoverability == Recoverability::reconstructible ? "reconstructible" : "must-preserve";
}

void validate(ReplicaMode mode, std::string_view what) {
  if (mode != ReplicaMode::replicable && mode != ReplicaMode::exclusive) {
    throw std::invalid_argument(std::string(what) + " must be a ReplicaMode (replicable or exclusive), got " +
                                std::to_string(static_cast<int>(mode)));
  }
}

void validate(Recoverability recoverability, std::string_view what) {
  if (recoverability != Recoverability::reconstructible && recoverability != Recoverability::must_preserve) {
    throw std::invalid_argument(std::string(what) +
                                " must be a Recoverability (reconstructible or must-preserve), got " +
                                std::to_string(static_cast<int>(recoverability)));
  }
}

void validate_handle(const ResidencyHandle& handle) {
  if (detail::plainly_well_formed(handle)) return;  // the common case, decided without a loop
  const auto require = [](const std::string& field, const char* name) {
    if (detail::is_blank(field)) throw std::invalid_argument(std::string("ResidencyHandle ") + name + " must be non-empty");
  };
  require(handle.manager_id, "manager_id");
  require(handle.handle_id, "handle_id");
  require(handle.value_type, "value_type");
}

ResidencyValueSpec::ResidencyValueSpec(std::string value_type_, std::int64_t logical_nbytes_,
                                       std::int64_t storage_nbytes_, ReplicaMode replica_mode_,
                                       Recoverability recoverability_)
    : value_type(std::move(value_type_)),
      logical_nbytes(logical_nbytes_),
      storage_nbytes(storage_nbytes_),
      replica_mode(replica_mode_),
      recoverability(recoverability_) {
  validate();
}

void ResidencyValueSpec::validate() const {
  if (detail::is_blank(value_type)) throw std::invalid_argument("ResidencyValueSpec value_type must be non-empty");
  if (logical_nbytes < 0) throw std::invalid_argument("ResidencyValueSpec logical_nbytes must be non-negative");
  if (storage_nbytes < 0) throw std::invalid_argument("ResidencyValueSpec storage_nbytes must be non-negative");
  if (storage_nbytes < logical_nbytes) {
    throw std::invalid_argument("ResidencyValueSpec storage_nbytes (" + std::to_string(storage_nbytes) +
                                ") must be greater than or equal to logical_nbytes (" +
                                std::to_string(logical_nbytes) + ")");
  }
  fhelium::residency::validate(replica_mode, "ResidencyValueSpec replica_mode");
  fhelium::residency::validate(recoverability, "ResidencyValueSpec recoverability");
}

namespace {

class CallableSource final : public ResidencySource {
 public:
  explicit CallableSource(std::function<ResidentValue()> load) : load_(std::move(load)) {}
  ResidentValue load() override { return load_(); }

 private:
  std::function<ResidentValue()> load_;
};

}  // namespace

std::shared_ptr<ResidencySource> make_source(std::function<ResidentValue()> load) {
  if (!load) throw std::invalid_argument("make_source needs a callable");
  return std::make_shared<CallableSource>(std::move(load));
}

}  // namespace fhelium::residency
