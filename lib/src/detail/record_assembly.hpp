// The one place that makes TrustedRecordKey: records the manager builds from
// its own state (snapshots, explanations, transition reports) use the
// unchecked constructors, because the rules those constructors check are kept
// where the state changes and asserted there.
#pragma once

#include "fhelium/residency/snapshot.hpp"

namespace fhelium::residency::detail {

struct RecordAssembly {
  static TrustedRecordKey key() noexcept { return TrustedRecordKey(); }
};

}  // namespace fhelium::residency::detail
