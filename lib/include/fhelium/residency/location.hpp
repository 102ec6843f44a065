// Memory-tier locations for managed value residency.
//
// A ResidencyLocation names one storage class (pageable host RAM, pinned host
// RAM, or one indexed CUDA device). It is a small immutable value type used as
// the key of budgets, plans, snapshots and accounting records. All functions
// here are pure and safe to call from any thread.
#pragma once

#include <c10/core/Device.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fhelium::residency {

enum class ResidencyLocationKind : std::uint8_t { pageable_host, pinned_host, cuda };

// Highest CUDA device index a location may name.
inline constexpr int max_cuda_device_index = 127;

class ResidencyLocation {
 public:
  // Pageable host. Use the constants below or cuda_location() for the others.
  constexpr ResidencyLocation() noexcept = default;

  // Throws std::invalid_argument when `kind` is cuda and `cuda_index` is outside
  // 0..127, or when a host kind is given a non-zero index.
  ResidencyLocation(ResidencyLocationKind kind, int cuda_index = 0);

  ResidencyLocationKind kind() const noexcept { return kind_; }
  bool is_cuda() const noexcept { return kind_ == ResidencyLocationKind::cuda; }
  bool is_host() const noexcept { return !is_cuda(); }
  // CUDA device index; -1 for host kinds.
  int cuda_index() const noexcept { return is_cuda() ? index_ : -1; }
  // CPU for host kinds, cuda:N for CUDA.
  c10::Device device() const;
  // "pageable-host", "pinned-host" or "cuda:N".
  std::string name() const;

  // Parses a canonical name. Throws std::invalid_argument naming the text for
  // anything else, including "cuda", "cuda:-1", "cuda:01" and indices above 127.
  static ResidencyLocation parse(std::string_view text);

  // Dense ordinal: 0 pageable, 1 pinned, 2 + N for cuda:N. Also the source
  // preference order (pageable, then pinned, then CUDA by index).
  int ordinal() const noexcept { return static_cast<int>(kind_) + (is_cuda() ? index_ : 0); }
  static constexpr int ordinal_count = 2 + max_cuda_device_index + 1;

  friend bool operator==(const ResidencyLocation& a, const ResidencyLocation& b) noexcept {
    return a.kind_ == b.kind_ && a.index_ == b.index_;
  }
  friend bool operator<(const ResidencyLocation& a, const ResidencyLocation& b) noexcept {
    return a.ordinal() < b.ordinal();
  }

 private:
  ResidencyLocationKind kind_ = ResidencyLocationKind::pageable_host;
  std::int16_t index_ = 0;
};

inline const ResidencyLocation PAGEABLE_HOST{};
inline const ResidencyLocation PINNED_HOST{ResidencyLocationKind::pinned_host};

// Location of CUDA device `index`. Throws std::invalid_argument outside 0..127.
ResidencyLocation cuda_location(int index);

// Byte counts per location in the caller's order, such as strict budgets:
// (location, bytes) pairs. Users of this type reject a location listed twice.
using LocationBudgets = std::vector<std::pair<ResidencyLocation, std::int64_t>>;

}  // namespace fhelium::residency

template <>
struct std::hash<fhelium::residency::ResidencyLocation> {
  std::size_t operator()(const fhelium::residency::ResidencyLocation& location) const noexcept {
    return static_cast<std::size_t>(location.ordinal());
  }
};
