#include "fhelium/residency/location.hpp"

#include <charconv>
#include <stdexcept>

namespace fhelium::residency {

ResidencyLocation::ResidencyLocation(ResidencyLocationKind kind, int cuda_index) : kind_(kind) {
  if (kind != ResidencyLocationKind::pageable_host && kind != ResidencyLocationKind::pinned_host &&
      kind != ResidencyLocationKind::cuda) {
    throw std::invalid_argument("Unsupported residency location kind " + std::to_string(static_cast<int>(kind)) +
                                ": expected pageable_host, pinned_host or cuda");
  }
  if (kind == ResidencyLocationKind::cuda) {
    if (cuda_index < 0 || cuda_index > max_cuda_device_index) {
      throw std::invalid_argument("CUDA residency location index must be between 0 and 127, got " +
                                  std::to_string(cuda_index));
    }
    index_ = static_cast<std::int16_t>(cuda_index);
  } else if (cuda_index != 0) {
    throw std::invalid_argument("host residency locations take no device index, got " + std::to_string(cuda_index));
  }
}

c10::Device ResidencyLocation::device() const {
  if (is_cuda()) return c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index_));
  return c10::Device(c10::DeviceType::CPU);
}

std::string ResidencyLocation::name() const {
  switch (kind_) {
    case ResidencyLocationKind::pageable_host: return "pageable-host";
    case ResidencyLocationKind::pinned_host: return "pinned-host";
    case ResidencyLocationKind::cuda: return "cuda:" + std::to_string(index_);
  }
  return "unknown";
}

ResidencyLocation ResidencyLocation::parse(std::string_view text) {
  if (text == "pageable-host") return PAGEABLE_HOST;
  if (text == "pinned-host") return PINNED_HOST;
  const auto invalid = [&](const std::string& why) {
    return std::invalid_argument("invalid residency location '" + std::string(text) + "': " + why);
  };
  constexpr std::string_view prefix = "cuda:";
  if (text == "cuda") {
    throw invalid("a CUDA residency location requires an indexed device such as cuda:0");
  }
  if (text.substr(0, prefix.size()) != prefix) {
    throw invalid("expected a canonical name: pageable-host, pinned-host or an indexed device such as cuda:0");
  }
  const std::string_view digits = text.substr(prefix.size());
  const bool all_digits =
      !digits.empty() && digits.find_first_not_of("0123456789") == std::string_view::npos;
  if (!all_digits || (digits.size() > 1 && digits.front() == '0')) {
    throw invalid("expected a canonical indexed device such as cuda:0 (no sign, no leading zeros)");
  }
  int index = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
  if (error != std::errc{} || end != digits.data() + digits.size() || index > max_cuda_device_index) {
    throw invalid("CUDA residency location index must be between 0 and 127");
  }
  return ResidencyLocation(ResidencyLocationKind::cuda, index);
}

ResidencyLocation cuda_location(int index) { return ResidencyLocation(ResidencyLocationKind::cuda, index); }

}  // namespace fhelium::residency
