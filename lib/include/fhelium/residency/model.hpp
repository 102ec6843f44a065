// Tensor-free identities and storage specifications of managed values.
//
// A ResidencyHandle is the opaque, hashable identity a manager issues for each
// adopt() or register_source() call; moving a value never changes it. A
// ResidencyValueSpec fixes a value's type, byte charges, replica mode and
// recoverability. A ResidencySource reconstructs a RECONSTRUCTIBLE value on
// demand. Handles and specs are immutable values, safe to share across threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace fhelium::residency {

class ResidentValue;

// Whether a value may have several simultaneous materializations.
enum class ReplicaMode { replicable, exclusive };
// Whether a value may lose its final materialization (it can be rebuilt).
enum class Recoverability { reconstructible, must_preserve };

std::string_view to_string(ReplicaMode mode) noexcept;          // "replicable" | "exclusive"
std::string_view to_string(Recoverability recoverability) noexcept;  // "reconstructible" | "must-preserve"

// Throw std::invalid_argument for a value outside the enumerators (as a cast
// from a binding or a deserialiser can produce), naming `what`.
void validate(ReplicaMode mode, std::string_view what);
void validate(Recoverability recoverability, std::string_view what);

struct ResidencyHandle {
  std::string manager_id;
  std::string handle_id;
  std::string value_type;

  friend bool operator==(const ResidencyHandle&, const ResidencyHandle&) = default;
};

// Throws std::invalid_argument when a field of `handle` is empty or only
// whitespace: such a handle was never issued by any manager (the reference
// rejects it on construction). Managers call this wherever they accept one.
void validate_handle(const ResidencyHandle& handle);

// Immutable storage specification. logical_nbytes is the payload size;
// storage_nbytes is the fixed charge debited at every location the value is
// materialized, at least the payload size.
struct ResidencyValueSpec {
  std::string value_type;
  std::int64_t logical_nbytes = 0;
  std::int64_t storage_nbytes = 0;
  ReplicaMode replica_mode = ReplicaMode::exclusive;
  Recoverability recoverability = Recoverability::must_preserve;

  // Throws std::invalid_argument for an empty or whitespace-only type,
  // negative bytes, storage_nbytes < logical_nbytes, or an enum value outside
  // its enumerators.
  ResidencyValueSpec(std::string value_type, std::int64_t logical_nbytes, std::int64_t storage_nbytes,
                     ReplicaMode replica_mode, Recoverability recoverability);

  // The constructor's checks, for a spec whose public fields were changed
  // afterwards; register_source() calls it.
  void validate() const;

  friend bool operator==(const ResidencyValueSpec&, const ResidencyValueSpec&) = default;
};

// Synchronous reconstruction source. load() runs under the manager's state
// lock; it must return fresh storage at the registered source location and
// must not call back into the manager (such calls fail with
// ResidencyReentrancyError).
class ResidencySource {
 public:
  virtual ~ResidencySource() = default;
  virtual ResidentValue load() = 0;
};

// Adapts any callable returning a ResidentValue.
std::shared_ptr<ResidencySource> make_source(std::function<ResidentValue()> load);

}  // namespace fhelium::residency

template <>
struct std::hash<fhelium::residency::ResidencyHandle> {
  std::size_t operator()(const fhelium::residency::ResidencyHandle& handle) const noexcept {
    const std::hash<std::string> hash;
    return hash(handle.handle_id) * 31 + hash(handle.manager_id);
  }
};
