#include "fhelium/residency/model.hpp"

#include <stdexcept>

#include "fhelium/residency/value.hpp"

namespace fhelium::residency {

std::string_view to_string(ReplicaMode mode) noexcept {
  return mode == ReplicaMode::replicable ? "replicable" : "exclusive";
}

std::string_view to_string(Recoverability recoverability) noexcept {
  return recoverability == Recoverability::reconstructible ? "reconstructible" : "must-preserve";
}

ResidencyValueSpec::ResidencyValueSpec(std::string value_type_, std::int64_t logical_nbytes_,
                                       std::int64_t storage_nbytes_, ReplicaMode replica_mode_,
                                       Recoverability recoverability_)
    : value_type(std::move(value_type_)),
      logical_nbytes(logical_nbytes_),
      storage_nbytes(storage_nbytes_),
      replica_mode(replica_mode_),
      recoverability(recoverability_) {
  if (value_type.empty()) throw std::invalid_argument("ResidencyValueSpec value_type must be non-empty");
  if (logical_nbytes < 0) throw std::invalid_argument("ResidencyValueSpec logical_nbytes must be non-negative");
  if (storage_nbytes < 0) throw std::invalid_argument("ResidencyValueSpec storage_nbytes must be non-negative");
  if (storage_nbytes < logical_nbytes) {
    throw std::invalid_argument("ResidencyValueSpec storage_nbytes (" + std::to_string(storage_nbytes) +
                                ") must be greater than or equal to logical_nbytes (" +
                                std::to_string(logical_nbytes) + ")");
  }
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
