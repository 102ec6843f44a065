// FirstSeen: which items of a sequence were seen before, for keeping first
// occurrences (a lifetime's handles) or refusing repeats (a value's field
// names, its storages).
//
// Most sequences are short, where comparing with each earlier item beats
// hashing: up to scan_limit items are kept inline and scanned. A sequence
// expected to be longer goes to a hash set from the start, so long ones stay
// linear. Items are views (pointers, string_views, small keys): nothing
// large is copied.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <unordered_set>

#include "fhelium/residency/inline_vector.hpp"

namespace fhelium::residency::detail {

template <class View, class Hash = std::hash<View>, class Equal = std::equal_to<View>>
class FirstSeen {
 public:
  static constexpr std::size_t scan_limit = 32;

  // `expected`: how many items will be offered, at most.
  explicit FirstSeen(std::size_t expected) {
    if (expected > scan_limit) set_.emplace().reserve(expected);
  }

  // True when no equal item was offered before; remembers `item`.
  bool insert(const View& item) {
    if (set_) return set_->insert(item).second;
    for (const View& seen : few_) {
      if (Equal{}(seen, item)) return false;
    }
    few_.push_back(item);
    return true;
  }

 private:
  InlineVector<View, scan_limit> few_;
  std::optional<std::unordered_set<View, Hash, Equal>> set_;  // only for long sequences
};

}  // namespace fhelium::residency::detail
