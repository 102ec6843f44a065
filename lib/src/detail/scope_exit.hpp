// ScopeExit: runs a callable when the scope ends, on every path out of it.
#pragma once

#include <utility>

namespace fhelium::residency::detail {

// Calls `f` on scope exit unless dismissed; used for release-on-every-path.
template <class F>
class ScopeExit {
 public:
  explicit ScopeExit(F f) : f_(std::move(f)) {}
  ~ScopeExit() {
    if (armed_) f_();
  }
  void dismiss() { armed_ = false; }
  ScopeExit(const ScopeExit&) = delete;
  ScopeExit& operator=(const ScopeExit&) = delete;

 private:
  F f_;
  bool armed_ = true;
};

}  // namespace fhelium::residency::detail
