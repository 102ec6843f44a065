// Stand-ins for modules residency-ab must refuse (tools/ab-driver-test.sh):
// each exports the interface version and nothing else. Built with
// FHELIUM_AB_NEXT_VERSION it claims the version after this driver's (a
// module from a later tree), and is refused for that; built without, it
// claims this one and is refused for the functions it lacks.
#include "ab_interface.hpp"

extern "C" FHELIUM_AB_EXPORT int fhelium_ab_interface() {
#ifdef FHELIUM_AB_NEXT_VERSION
  return fhelium_ab_interface_version + 1;
#else
  return fhelium_ab_interface_version;
#endif
}
