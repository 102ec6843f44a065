// Names of error kinds, as scenario expectations, reports and property tests
// use them: budget, handle, unavailable, in_use, ownership, materialization,
// plan, stale, plan_execution, reentrancy, lifetime_closed, closed,
// invalid_argument, logic, out_of_memory, device, runtime, search_limit,
// unknown.
#pragma once

#include <exception>
#include <string>
#include <vector>

namespace fhelium::harness {

// The kind of `error`, most specific type first.
std::string error_kind(const std::exception_ptr& error);

// Every kind error_kind() can return for an error the manager raises (all but
// "unknown", a non-standard exception, and "logic", a caller's misuse the
// harness itself reports), in the order error_kind() tests them.
const std::vector<std::string>& error_kinds();

}  // namespace fhelium::harness
