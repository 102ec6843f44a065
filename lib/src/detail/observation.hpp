// Observing one public call (observer.hpp): the record is built only when an
// observer is set, before the call (which may consume its arguments), and
// handed to the observer on either outcome. Observation never changes the
// call's outcome.
#pragma once

#include <exception>
#include <type_traits>
#include <utility>

#include "detail/manager_core.hpp"
#include "fhelium/residency/observer.hpp"

namespace fhelium::residency::detail {

// The observed path of observe_call, out of line: a call without an observer
// pays only for the check.
template <class Describe, class Body, class Complete>
[[gnu::noinline]] decltype(auto) observe_recorded(ManagerCore& core, Describe&& describe, Body&& body,
                                                  Complete&& complete) {
  using Result = decltype(body());
  ObservedOperation operation = describe();
  const auto failed = [&] {
    operation.error = std::current_exception();
    core.observe(std::move(operation));
  };
  if constexpr (std::is_void_v<Result>) {
    try {
      body();
    } catch (...) {
      failed();
      throw;
    }
    try {
      complete(operation);
    } catch (...) {
      // The call succeeded; a record missing a detail must not say otherwise.
    }
    core.observe(std::move(operation));
  } else {
    std::optional<Result> result;
    try {
      result.emplace(body());
    } catch (...) {
      failed();
      throw;
    }
    try {
      complete(operation, *result);
    } catch (...) {
    }
    core.observe(std::move(operation));
    return Result(std::move(*result));
  }
}

// `describe()` returns the record's arguments; `complete(record, result)`
// (or `complete(record)` for a void call) adds what the result tells.
template <class Describe, class Body, class Complete>
decltype(auto) observe_call(ManagerCore& core, Describe&& describe, Body&& body, Complete&& complete) {
  if (!core.observed()) [[likely]] return body();
  return observe_recorded(core, std::forward<Describe>(describe), std::forward<Body>(body),
                          std::forward<Complete>(complete));
}

// For calls whose result adds nothing to the record.
template <class Describe, class Body>
decltype(auto) observe_call(ManagerCore& core, Describe&& describe, Body&& body) {
  return observe_call(core, std::forward<Describe>(describe), std::forward<Body>(body), [](ObservedOperation&, auto&&...) {});
}

inline ObservedOperation observed(ObservedCall call) {
  ObservedOperation operation;
  operation.call = call;
  return operation;
}

}  // namespace fhelium::residency::detail
