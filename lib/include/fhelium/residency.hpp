// Umbrella header of the fhelium residency manager.
#pragma once

#include "fhelium/residency/controller.hpp"
#include "fhelium/residency/errors.hpp"
#include "fhelium/residency/lease.hpp"
#include "fhelium/residency/location.hpp"
#include "fhelium/residency/manager.hpp"
#include "fhelium/residency/model.hpp"
#include "fhelium/residency/observer.hpp"
#include "fhelium/residency/plan.hpp"
#include "fhelium/residency/policy.hpp"
#include "fhelium/residency/request.hpp"
#include "fhelium/residency/runtime.hpp"
#include "fhelium/residency/scope.hpp"
#include "fhelium/residency/snapshot.hpp"
#include "fhelium/residency/snapshot_diff.hpp"
#include "fhelium/residency/value.hpp"
