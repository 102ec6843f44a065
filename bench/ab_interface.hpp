// What a residency-ab module (ab_rounds.cpp) exports, and residency-ab
// (ab_driver.cpp) looks up: plain C functions, so that a module built from
// another revision of the library still matches.
#pragma once

#include <cstddef>

#define FHELIUM_AB_EXPORT __attribute__((visibility("default")))

// Raised whenever the functions below change meaning; the driver refuses a
// module of another version.
inline constexpr int fhelium_ab_interface_version = 1;

extern "C" {
// fhelium_ab_interface_version as the module was built.
using FheliumAbInterface = int (*)();
// The workloads the module runs, comma-separated.
using FheliumAbWorkloads = const char* (*)();
// Runs one round of `workload` and returns nanoseconds per operation of its
// timed part; on failure (an unknown workload, a workload check that failed,
// an exception) returns a negative number and writes why into `error`.
using FheliumAbRound = double (*)(const char* workload, char* error, std::size_t error_size);
}
