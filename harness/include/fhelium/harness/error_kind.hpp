// Names of error kinds, as scenario expectations, reports and property tests
// use them: budget, handle, unavailable, in_use, ownership, materialization,
// plan, stale, plan_execution, reentrancy, lifetime_closed, closed,
// invalid_argument, logic, out_of_memory, device, runtime, unknown.
#pragma once

#include <exception>
#include <string>

namespace fhelium::harness {

// The kind of `error`, most specific type first.
std::string error_kind(const std::exception_ptr& error);

}  // namespace fhelium::harness
