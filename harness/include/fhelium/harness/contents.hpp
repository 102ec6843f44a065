// Content integrity: whether two values hold the same bits. Used by the replay
// engine on every lease read and by the tests. Pure and thread-safe.
#pragma once

#include "fhelium/residency/value.hpp"

namespace fhelium::harness {

// True when both values have the same type name, attributes, field names,
// shapes, dtypes and bit-identical field contents.
bool same_contents(const residency::ResidentValue& a, const residency::ResidentValue& b);

}  // namespace fhelium::harness
