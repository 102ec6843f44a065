// ResidentValue: the immutable tensor bundle the manager stores and moves.
//
// A value has a type name (for example "Ciphertext"), ordered named at::Tensor
// fields, and ordered named non-tensor attributes (a ciphertext's level and
// scale, say) that every move carries unchanged. Byte sizes are derived from
// the tensors: logical bytes are element bytes, storage bytes count each
// backing storage once, so views that share storage are not double counted.
// A ResidentValue is immutable after construction and may be read from any
// thread; the tensors it holds follow libtorch's own thread-safety rules.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "fhelium/residency/storage_key.hpp"

namespace fhelium::residency {

using AttributeValue = std::variant<std::int64_t, double, bool, std::string>;

class ResidentValue {
 public:
  using Field = std::pair<std::string, at::Tensor>;
  using Attribute = std::pair<std::string, AttributeValue>;
  // Most values hold one tensor in one storage: both are kept inside the
  // value, so making and releasing such a value allocates and frees no list.
  // Both read like a std::vector and convert to one.
  using Fields = InlineVector<Field, 1>;

  ResidentValue() = default;
  // Throws std::invalid_argument for a blank type name (empty or whitespace
  // only: it becomes the value_type of the value's handles, which may not be
  // blank), an empty or duplicate field/attribute name, or an undefined tensor.
  ResidentValue(std::string type_name, std::vector<Field> fields, std::vector<Attribute> attributes = {});

  const std::string& type_name() const noexcept { return type_name_; }
  const Fields& fields() const noexcept { return fields_; }
  const std::vector<Attribute>& attributes() const noexcept { return attributes_; }
  // The tensor named `name`; throws std::out_of_range when there is none.
  const at::Tensor& field(const std::string& name) const;
  // Sum of numel * element size over fields, in bytes.
  std::int64_t logical_nbytes() const noexcept { return logical_nbytes_; }
  // Bytes of the distinct backing storages, each counted once.
  std::int64_t storage_nbytes() const noexcept { return storage_nbytes_; }
  // Distinct storage identities in field order.
  const StorageKeys& storage_keys() const noexcept { return storage_keys_; }

  // A value with the same type name and attributes and new tensors, in the
  // same field order. Used by runtimes to build a copy.
  ResidentValue with_tensors(std::vector<at::Tensor> tensors) const;

 private:
  std::string type_name_;
  Fields fields_;
  std::vector<Attribute> attributes_;
  std::int64_t logical_nbytes_ = 0;
  std::int64_t storage_nbytes_ = 0;
  StorageKeys storage_keys_;
};

}  // namespace fhelium::residency
