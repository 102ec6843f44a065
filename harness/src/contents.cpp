#include "fhelium/harness/contents.hpp"

#include <algorithm>

namespace fhelium::harness {

bool same_contents(const residency::ResidentValue& a, const residency::ResidentValue& b) {
  if (a.type_name() != b.type_name() || a.attributes() != b.attributes() || a.fields().size() != b.fields().size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.fields().size(); ++i) {
    const auto& [name_a, x] = a.fields()[i];
    const auto& [name_b, y] = b.fields()[i];
    if (name_a != name_b || !x.sizes().equals(y.sizes()) || x.scalar_type() != y.scalar_type()) return false;
    // Virtual payloads (one element broadcast to the whole shape) compare by that element.
    const auto broadcast = [](const at::Tensor& t) {
      return t.numel() > 1 && std::all_of(t.strides().begin(), t.strides().end(), [](std::int64_t s) { return s == 0; });
    };
    if (broadcast(x) != broadcast(y)) return false;
    if (broadcast(x)) {
      if (!x.as_strided({1}, {1}).view(at::kByte).equal(y.as_strided({1}, {1}).view(at::kByte))) return false;
      continue;
    }
    // Compare bytes, so NaN payloads and negative zeros count as different.
    if (!x.contiguous().view(at::kByte).equal(y.contiguous().view(at::kByte))) return false;
  }
  return true;
}

}  // namespace fhelium::harness
