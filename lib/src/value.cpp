#include "fhelium/residency/value.hpp"

#include <algorithm>
#include <stdexcept>
#include <string_view>
#include <unordered_set>

namespace fhelium::residency {

namespace {

// Names of one kind (fields or attributes) must be non-empty and unique.
// Checked in order, one at a time, against the earlier ones: a scan for the
// few a value usually has, a hash set beyond that. Nothing is copied.
template <class Item>
class UniqueNames {
 public:
  UniqueNames(const std::vector<Item>& items, const char* what) : items_(items), what_(what) {
    if (items_.size() > scan_limit) seen_.reserve(items_.size());
  }

  void check(std::size_t index) {
    const std::string& name = items_[index].first;
    if (name.empty()) throw std::invalid_argument(std::string("ResidentValue ") + what_ + " name must be non-empty");
    bool repeated = false;
    if (items_.size() <= scan_limit) {
      for (std::size_t earlier = 0; earlier < index && !repeated; ++earlier) repeated = items_[earlier].first == name;
    } else {
      repeated = !seen_.insert(std::string_view(name)).second;
    }
    if (repeated) throw std::invalid_argument(std::string("ResidentValue has duplicate ") + what_ + " '" + name + "'");
  }

 private:
  static constexpr std::size_t scan_limit = 32;
  const std::vector<Item>& items_;
  const char* what_;
  std::unordered_set<std::string_view> seen_;
};

}  // namespace

ResidentValue::ResidentValue(std::string type_name, std::vector<Field> fields, std::vector<Attribute> attributes)
    : type_name_(std::move(type_name)), fields_(std::move(fields)), attributes_(std::move(attributes)) {
  if (type_name_.empty()) throw std::invalid_argument("ResidentValue type name must be non-empty");
  UniqueNames field_names(fields_, "field");
  for (std::size_t index = 0; index < fields_.size(); ++index) {
    field_names.check(index);
    const auto& [name, tensor] = fields_[index];
    if (!tensor.defined()) throw std::invalid_argument("ResidentValue field '" + name + "' holds no tensor");
    logical_nbytes_ += static_cast<std::int64_t>(tensor.numel()) * static_cast<std::int64_t>(tensor.element_size());
    const c10::Storage& storage = tensor.storage();
    const StorageKey key{tensor.device(), reinterpret_cast<std::uintptr_t>(storage.unsafeGetStorageImpl())};
    if (std::find(storage_keys_.begin(), storage_keys_.end(), key) == storage_keys_.end()) {
      storage_keys_.push_back(key);
      storage_nbytes_ += static_cast<std::int64_t>(storage.nbytes());
    }
  }
  UniqueNames attribute_names(attributes_, "attribute");
  for (std::size_t index = 0; index < attributes_.size(); ++index) attribute_names.check(index);
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
