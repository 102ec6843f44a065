// InlineVector: a contiguous sequence that keeps its first N elements inside
// the object and spills to the heap only beyond them.
//
// Snapshots hold each value's materializations in one: nearly every value
// has at most one, so a snapshot of many values is built, copied and freed
// without one heap block per value. The manager's value records use it the
// same way. It reads like a std::vector (size, indexing, iteration over
// pointers, push_back, equality) and converts to and from one, so code
// written against a vector of records keeps working.
#pragma once

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace fhelium::residency {

template <class T, std::size_t N>
class InlineVector {
  static_assert(N > 0, "an InlineVector keeps at least one element inline");
  static_assert(std::is_nothrow_move_constructible_v<T>, "elements are moved when the buffer grows");

 public:
  using value_type = T;
  using size_type = std::size_t;
  using difference_type = std::ptrdiff_t;
  using reference = T&;
  using const_reference = const T&;
  using pointer = T*;
  using const_pointer = const T*;
  using iterator = T*;
  using const_iterator = const T*;

  // User-provided, so that value-initialization leaves the inline buffer
  // alone instead of zeroing it.
  InlineVector() noexcept {}
  InlineVector(std::initializer_list<T> items) { assign(items.begin(), items.end()); }
  // Implicit, so a std::vector of elements passes where an InlineVector is taken.
  InlineVector(const std::vector<T>& items) { assign(items.begin(), items.end()); }
  InlineVector(std::vector<T>&& items) {
    reserve(items.size());
    for (T& item : items) emplace_back(std::move(item));
  }
  InlineVector(const InlineVector& other) { assign(other.begin(), other.end()); }
  InlineVector& operator=(const InlineVector& other) {
    if (this != &other) {
      InlineVector copy(other);
      *this = std::move(copy);
    }
    return *this;
  }
  InlineVector(InlineVector&& other) noexcept { take(std::move(other)); }
  InlineVector& operator=(InlineVector&& other) noexcept {
    if (this != &other) {
      clear();
      release();
      take(std::move(other));
    }
    return *this;
  }
  ~InlineVector() {
    clear();
    release();
  }

  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  T* begin() noexcept { return data_; }
  T* end() noexcept { return data_ + size_; }
  const T* begin() const noexcept { return data_; }
  const T* end() const noexcept { return data_ + size_; }
  const T* cbegin() const noexcept { return data_; }
  const T* cend() const noexcept { return data_ + size_; }
  std::size_t size() const noexcept { return size_; }
  std::size_t capacity() const noexcept { return capacity_; }
  bool empty() const noexcept { return size_ == 0; }
  // Whether the elements live in a heap block rather than inside the object.
  bool spilled() const noexcept { return data_ != inline_data(); }
  T& operator[](std::size_t index) noexcept { return data_[index]; }
  const T& operator[](std::size_t index) const noexcept { return data_[index]; }
  T& front() noexcept { return data_[0]; }
  const T& front() const noexcept { return data_[0]; }
  T& back() noexcept { return data_[size_ - 1]; }
  const T& back() const noexcept { return data_[size_ - 1]; }

  // Makes room for `capacity` elements; never shrinks.
  void reserve(std::size_t capacity) {
    if (capacity > capacity_) grow(capacity);
  }

  // Taken by value, so an element of this vector may be appended.
  void push_back(T value) {
    if (size_ == capacity_) grow(capacity_ * 2);
    ::new (static_cast<void*>(data_ + size_)) T(std::move(value));
    ++size_;
  }

  // Builds an element in place from `args`, which must not refer into this vector.
  template <class... Args>
  T& emplace_back(Args&&... args) {
    if (size_ == capacity_) grow(capacity_ * 2);
    T* slot = ::new (static_cast<void*>(data_ + size_)) T(std::forward<Args>(args)...);
    ++size_;
    return *slot;
  }

  // Removes `*at`, keeping the order of the rest; returns the next element.
  T* erase(T* at) noexcept(std::is_nothrow_move_assignable_v<T>) {
    std::move(at + 1, end(), at);
    pop_back();
    return at;
  }

  void pop_back() noexcept {
    --size_;
    std::destroy_at(data_ + size_);
  }

  void clear() noexcept {
    std::destroy(begin(), end());
    size_ = 0;
  }

  std::vector<T> to_vector() const { return std::vector<T>(begin(), end()); }
  // Implicit, so code that copies the elements into a std::vector keeps working.
  operator std::vector<T>() const { return to_vector(); }

  friend bool operator==(const InlineVector& left, const InlineVector& right) {
    return std::equal(left.begin(), left.end(), right.begin(), right.end());
  }

 private:
  T* inline_data() noexcept { return std::launder(reinterpret_cast<T*>(inline_)); }
  const T* inline_data() const noexcept { return std::launder(reinterpret_cast<const T*>(inline_)); }

  // Appends [first, last) to an empty vector, in one block when it spills.
  // Called by constructors, whose destructor does not run when they throw:
  // a copy that throws destroys what it built and frees its block first.
  template <class It>
  void assign(It first, It last) {
    try {
      reserve(static_cast<std::size_t>(std::distance(first, last)));
      for (; first != last; ++first) emplace_back(*first);
    } catch (...) {
      clear();
      release();
      throw;
    }
  }

  void grow(std::size_t capacity) {
    T* fresh = static_cast<T*>(::operator new(capacity * sizeof(T), std::align_val_t(alignof(T))));
    std::uninitialized_move(begin(), end(), fresh);
    std::destroy(begin(), end());
    release();
    data_ = fresh;
    capacity_ = capacity;
  }

  void release() noexcept {
    if (spilled()) ::operator delete(data_, std::align_val_t(alignof(T)));
    data_ = inline_data();
    capacity_ = N;
  }

  // Leaves `other` empty and inline.
  void take(InlineVector&& other) noexcept {
    if (other.spilled()) {
      data_ = other.data_;
      capacity_ = other.capacity_;
      size_ = other.size_;
      other.data_ = other.inline_data();
      other.capacity_ = N;
      other.size_ = 0;
      return;
    }
    if constexpr (std::is_trivially_copyable_v<T> && N <= 4) {
      // A loop of constant length the compiler unrolls: a few register moves
      // where std::uninitialized_move would call memmove.
      for (std::size_t index = 0; index < N; ++index) {
        if (index < other.size_) ::new (static_cast<void*>(inline_data() + index)) T(other.inline_data()[index]);
      }
      size_ = other.size_;
      other.size_ = 0;
      return;
    }
    std::uninitialized_move(other.begin(), other.end(), inline_data());
    size_ = other.size_;
    other.clear();
  }

  // The bookkeeping first: a reader reaches data_ and size_ on the same cache
  // line as whatever precedes the vector, then the first element.
  T* data_ = inline_data();
  std::size_t size_ = 0;
  std::size_t capacity_ = N;
  alignas(T) unsigned char inline_[N * sizeof(T)];
};

}  // namespace fhelium::residency
