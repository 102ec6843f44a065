#include "fhelium/residency/value.hpp"

#include <algorithm>
#include <stdexcept>
#include <string_view>

#include "detail/blank_text.hpp"
#include "detail/first_seen.hpp"

namespace fhelium::residency {

namespace {

// Field and attribute names must be non-empty and unique, checked in order
// so that the first problem is the one reported.
void require_new_name(detail::FirstSeen<std::string_view>& seen, const std::string& name, const char* what) {
  if (name.empty()) throw std::invalid_argument(std::string("ResidentValue ") + what + " name must be non-empty");
  if (!seen.insert(name)) {
    throw std::invalid_argument(std::string("ResidentValue has duplicate ") + what + " '" + name + "'");
  }
}

}  // namespace

[[gnu::hot]]
ResidentValue::ResidentValue(std::string type_name, std::vector<Field> fields, std::vector<Attribute> attributes)
    : type_name_(std::move(type_name)), fields_(std::move(fields)), attributes_(std::move(attributes)) {
  // Blank as every non-empty text check means it: the type name becomes the
  // value_type of the value's spec and handles, which refuse the same blanks.
  if (detail::is_blank(type_name_)) throw std::invalid_argument("ResidentValue type name must be non-empty");
  detail::FirstSeen<std::string_view> field_names(fields_.size());
  detail::FirstSeen<StorageKey> storages(fields_.size());
  for (const auto& [name, tensor] : fields_) {
    require_new_name(field_names, name, "field");
    if (!tensor.defined()) throw std::invalid_argument("ResidentValue field '" + name + "' holds no tensor");
    logical_nbytes_ += static_cast<std::int64_t>(tensor.numel()) * static_cast<std::int64_t>(tensor.element_size());
    const c10::Storage& storage = tensor.storage();
    const StorageKey key{tensor.device(), reinterpret_cast<std::uintptr_t>(storage.unsafeGetStorageImpl())};
    if (storages.insert(key)) {
      storage_keys_.push_back(key);
      storage_nbytes_ += static_cast<std::int64_t>(storage.nbytes());
    }
  }
  detail::FirstSeen<std::string_view> attribute_names(attributes_.size());
  for (const auto& attribute : attributes_) require_new_name(attribute_names, attribute.first, "attribute");
}

const at::Tensor& ResidentValue::field(const std::string& name) const {
  for (const auto& [field_name, tensor] : fields_) {
    if (field_name == name) return tensor;
  }
  throw std::out_of_range("ResidentValue '" + type_name_ + "' has no field '" + name + "'");
}

ResidentValue ResidentValue::with_tensors(std::vector<at::Tensor> tensors) const {
  if (tensors.size() != fields_.size()) {
    throw std::invalid_argument("ResidentValue::with_tensors needs one tensor per field");
  }
  std::vector<Field> fields;
  fields.reserve(fields_.size());
  for (std::size_t i = 0; i < fields_.size(); ++i) fields.emplace_back(fields_[i].first, std::move(tensors[i]));
  return ResidentValue(type_name_, std::move(fields), attributes_);
}

}  // namespace fhelium::residency
