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

namespace {

// Every check of a spec, in the order that decides which error a spec with
// several faults gets. Out of line: nearly every spec passes plainly_valid.
[[gnu::noinline]] void check_in_order(const ResidencyValueSpec& spec) {
  if (detail::is_blank(spec.value_type)) throw std::invalid_argument("ResidencyValueSpec value_type must be non-empty");
  if (spec.logical_nbytes < 0) throw std::invalid_argument("ResidencyValueSpec logical_nbytes must be non-negative");
  if (spec.storage_nbytes < 0) throw std::invalid_argument("ResidencyValueSpec storage_nbytes must be non-negative");
  if (spec.storage_nbytes < spec.logical_nbytes) {
    throw std::invalid_argument("ResidencyValueSpec storage_nbytes (" + std::to_string(spec.storage_nbytes) +
                                ") must be greater than or equal to logical_nbytes (" +
                                std::to_string(spec.logical_nbytes) + ")");
  }
  validate(spec.replica_mode, "ResidencyValueSpec replica_mode");
  validate(spec.recoverability, "ResidencyValueSpec recoverability");
}

// The common case, decided without a call or a loop: a type whose first
// character is above the space (no blank text starts so), sizes in order and
// both enums in range. A spec it does not pass may still be valid (a type
// that starts with a space); check_in_order decides those.
bool plainly_valid(const ResidencyValueSpec& spec) noexcept {
  return !spec.value_type.empty() && static_cast<unsigned char>(spec.value_type.front()) > ' ' &&
         spec.logical_nbytes >= 0 && spec.storage_nbytes >= spec.logical_nbytes &&
         (spec.replica_mode == ReplicaMode::replicable || spec.replica_mode == ReplicaMode::exclusive) &&
         (spec.recoverability == Recoverability::reconstructible ||
          spec.recoverability == Recoverability::must_preserve);
}

}  // namespace

void ResidencyValueSpec::validate() const {
  if (plainly_valid(*this)) [[likely]] return;
  check_in_order(*this);
}

namespace {

class CallableSource final : public ResidencySource {
 public:
  explicit CallableSource(std::function<ResidentValue()> load) : load_(std::move(load)) {}
  [[gnu::hot]] ResidentValue load() override { return load_(); }

 private:
  std::function<ResidentValue()> load_;
};

}  // namespace

std::shared_ptr<ResidencySource> make_source(std::function<ResidentValue()> load) {
  if (!load) throw std::invalid_argument("make_source needs a callable");
  return std::make_shared<CallableSource>(std::move(load));
}

}  // namespace fhelium::residency
