// CorePins: keeps an owner (the manager core) alive while lifetime objects
// that use it are active, including after the manager object is gone.
//
// Every active lease, hold and reservation object counts one pin. The first
// pin makes the owner hold itself (a shared_ptr to itself), so that an
// orphaned owner (its manager destroyed while lifetimes were still active)
// lives on until the last pin drops; the owner lets go of itself when it is
// orphaned with no pin left, or when the last pin drops after that. The
// self-reference is then handed back to the caller, which drops it once it
// is done with the owner (it may be the owner's last reference).
//
// Everything except add_stray() and has_strays() runs under the owner's
// state gate. A thread refused entry to the gate (a source load holds it, or
// the lifetime is destroyed from a callback of the holder's own call) cannot
// drop its pin under the gate: it counts a stray unpin instead, and whoever
// holds the gate next settles it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>

namespace fhelium::residency::detail {

template <class Owner>
class CorePins {
 public:
  // One pin more on `owner` (an enable_shared_from_this, owned by a
  // shared_ptr); the first makes it hold itself.
  void pin(Owner& owner) {
    if (!self_) self_ = owner.shared_from_this();
    ++pins_;
  }
  // Pins granted elsewhere (the gate's lanes) and folded in now.
  void add(std::int64_t pins) noexcept { pins_ += pins; }
  // Whether the owner holds itself: it was pinned at least once and has not
  // let go since.
  bool holds_itself() const noexcept { return static_cast<bool>(self_); }
  // Whether the owner was orphaned (its manager is gone).
  bool orphaned() const noexcept { return orphaned_; }

  // Drops one pin. Returns the owner's hold on itself when that was the last
  // pin of an orphaned owner (empty otherwise).
  [[nodiscard]] std::shared_ptr<Owner> unpin() noexcept {
    --pins_;
    if (!orphaned_ && strays_.load(std::memory_order_relaxed) == 0) [[likely]] return {};
    return settle();
  }
  // The manager object is gone. Returns the owner's hold on itself when no
  // pin is left.
  [[nodiscard]] std::shared_ptr<Owner> orphan() noexcept {
    orphaned_ = true;
    return settle();
  }
  // Folds in the stray unpins. Returns the owner's hold on itself when no pin
  // is left and the owner is orphaned.
  [[nodiscard]] std::shared_ptr<Owner> settle() noexcept {
    if (strays_.load(std::memory_order_relaxed) != 0) pins_ -= strays_.exchange(0);
    if (pins_ == 0 && orphaned_) return std::move(self_);
    return {};
  }

  // By a thread refused entry to the gate: one pin dropped, for the holder
  // to settle. Sequentially consistent: a thread that counts a stray and is
  // then refused because the holder is loading is certain the holder sees
  // the stray when it looks on its way out (has_strays), since turning
  // loading off is sequentially consistent too (StateGate::set_loading). A
  // thread that finds the gate merely held waits for it and settles the
  // stray itself.
  void add_stray() noexcept { strays_.fetch_add(1, std::memory_order_seq_cst); }
  bool has_strays() const noexcept { return strays_.load(std::memory_order_seq_cst) != 0; }

  // The pins counted under the gate; unsettled strays are not subtracted.
  std::int64_t count() const noexcept { return pins_; }

 private:
  std::int64_t pins_ = 0;
  bool orphaned_ = false;
  std::shared_ptr<Owner> self_;
  std::atomic<std::int64_t> strays_{0};
};

}  // namespace fhelium::residency::detail
