// TokenTable: the live lifetimes of one kind (leases, holds or reservations)
// keyed by their token, in token order, which is creation order.
//
// Tokens only grow, so the table is a flat vector that only ever appends;
// a lookup is a binary search and an erase leaves a tombstone. Tombstones are
// swept on insertion once they outnumber the live entries; on erase only
// trailing ones are dropped, which iteration tolerates, so erasing while
// iterating (reaping finished leases) is safe. After warm-up
// a lifetime taken and released costs no allocation of the table's own.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "detail/check.hpp"
#include "detail/line_allocator.hpp"

namespace fhelium::residency::detail {

template <class T>
class TokenTable {
 public:
  using Entry = std::pair<std::uint64_t, T>;

  template <class Table, class Value>
  class Iterator {
   public:
    Iterator(Table* table, std::size_t index) : table_(table), index_(index) { skip(); }
    Value& operator*() const { return *table_->items_[index_]; }
    Value* operator->() const { return &*table_->items_[index_]; }
    Iterator& operator++() {
      ++index_;
      skip();
      return *this;
    }
    // Every position at or past the last entry is the end: erasing the last
    // entries while iterating drops them from the table.
    friend bool operator==(const Iterator& left, const Iterator& right) { return left.position() == right.position(); }

   private:
    friend class TokenTable;
    std::size_t position() const { return std::min(index_, table_->items_.size()); }
    void skip() {
      while (index_ < table_->items_.size() && !table_->items_[index_]) ++index_;
    }
    Table* table_;
    std::size_t index_;
  };
  using iterator = Iterator<TokenTable, Entry>;
  using const_iterator = Iterator<const TokenTable, const Entry>;

  iterator begin() { return {this, 0}; }
  iterator end() { return {this, items_.size()}; }
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, items_.size()}; }
  std::size_t size() const noexcept { return live_; }
  // The greatest token ever inserted (0 for none), erased and cleared ones included.
  std::uint64_t last_token() const noexcept { return last_token_; }
  bool empty() const noexcept { return live_ == 0; }

  // Builds the entry of `token` in place from `args` and returns it. `token`
  // must be greater than every token inserted before, even erased or cleared ones.
  template <class... Args>
  T& emplace(std::uint64_t token, Args&&... args) {
    FHELIUM_CHECK(token > last_token_, "lifetime tokens out of order");
    if (items_.size() - live_ > std::max<std::size_t>(live_, 16)) sweep();
    if (tokens_.size() == tokens_.capacity()) tokens_.reserve(std::max<std::size_t>(8, tokens_.size() * 2));
    std::optional<Entry>& entry = items_.emplace_back(std::in_place, std::piecewise_construct,
                                                      std::forward_as_tuple(token),
                                                      std::forward_as_tuple(std::forward<Args>(args)...));
    tokens_.push_back(token);
    last_token_ = token;
    ++live_;
    return entry->second;
  }

  // Visits the live entries whose tokens are above `after`, in token order,
  // as visit(token, entry).
  template <class Visit>
  void for_each_after(std::uint64_t after, Visit&& visit) {
    const auto first = std::upper_bound(tokens_.begin(), tokens_.end(), after);
    for (auto index = static_cast<std::size_t>(first - tokens_.begin()); index < items_.size(); ++index) {
      if (items_[index]) visit(items_[index]->first, items_[index]->second);
    }
  }

  iterator find(std::uint64_t token) { return {this, locate(token)}; }
  const_iterator find(std::uint64_t token) const { return {this, locate(token)}; }
  // The live entry of `token`, or nullptr: find() without an iterator.
  const T* get(std::uint64_t token) const {
    const std::size_t index = locate(token);
    return index == items_.size() ? nullptr : &items_[index]->second;
  }
  T* get(std::uint64_t token) { return const_cast<T*>(std::as_const(*this).get(token)); }

  void erase(const iterator& at) {
    FHELIUM_CHECK(at.index_ < items_.size() && items_[at.index_], "erasing a lifetime that is not in the table");
    erase_at(at.index_);
  }
  // Erases the live entry of `token`; false when there is none.
  bool erase(std::uint64_t token) {
    const std::size_t index = locate(token);
    if (index == items_.size()) return false;
    erase_at(index);
    return true;
  }

  void clear() noexcept {
    items_.clear();
    tokens_.clear();
    live_ = 0;
  }

 private:
  void erase_at(std::size_t index) {
    items_[index].reset();
    --live_;
    // Trailing tombstones go at once, so a table whose newest lifetimes end
    // first (a lease taken and released) stays as short as its live entries.
    while (!items_.empty() && !items_.back()) {
      items_.pop_back();
      tokens_.pop_back();
    }
  }

  // The index of live `token`, or items_.size().
  std::size_t locate(std::uint64_t token) const {
    // The newest lifetime is the one most often ended (taken and released).
    if (!tokens_.empty() && tokens_.back() == token) return items_.back() ? items_.size() - 1 : items_.size();
    const auto found = std::lower_bound(tokens_.begin(), tokens_.end(), token);
    const auto index = static_cast<std::size_t>(found - tokens_.begin());
    return found != tokens_.end() && *found == token && items_[index] ? index : items_.size();
  }

  void sweep() {
    std::size_t kept = 0;
    for (std::size_t index = 0; index < items_.size(); ++index) {
      if (!items_[index]) continue;
      if (kept != index) {
        items_[kept].emplace(std::move(*items_[index]));
        items_[index].reset();
        tokens_[kept] = tokens_[index];
      }
      ++kept;
    }
    items_.resize(kept);
    tokens_.resize(kept);
  }

  // In lines of their own: a lane's table is written on every lease it
  // grants or ends, alongside other lanes' (LineAllocator).
  std::vector<std::optional<Entry>, LineAllocator<std::optional<Entry>>> items_;
  std::vector<std::uint64_t, LineAllocator<std::uint64_t>> tokens_;  // ascending, parallel to items_
  std::size_t live_ = 0;
  std::uint64_t last_token_ = 0;  // tokens start at 1; kept across clear()
};

}  // namespace fhelium::residency::detail
