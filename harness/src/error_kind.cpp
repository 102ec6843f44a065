#include "fhelium/harness/error_kind.hpp"

#include <c10/util/Exception.h>

#include "fhelium/residency/errors.hpp"

namespace fhelium::harness {

using namespace residency;

std::string error_kind(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const ResidencyPlanExecutionError&) {
    return "plan_execution";
  } catch (const ResidencyStaleStateError&) {
    return "stale";
  } catch (const ResidencySearchLimitError&) {
    return "search_limit";
  } catch (const ResidencyPlanError&) {
    return "plan";
  } catch (const ResidencyBudgetError&) {
    return "budget";
  } catch (const ResidencyHandleError&) {
    return "handle";
  } catch (const ResidencyUnavailableError&) {
    return "unavailable";
  } catch (const ResidencyInUseError&) {
    return "in_use";
  } catch (const ResidencyOwnershipError&) {
    return "ownership";
  } catch (const ResidencyMaterializationError&) {
    return "materialization";
  } catch (const ResidencyReentrancyError&) {
    return "reentrancy";
  } catch (const ResidencyLifetimeClosedError&) {
    return "lifetime_closed";
  } catch (const ResidencyClosedError&) {
    return "closed";
  } catch (const std::invalid_argument&) {
    return "invalid_argument";
  } catch (const std::logic_error&) {
    return "logic";
  } catch (const c10::OutOfMemoryError&) {
    return "out_of_memory";
  } catch (const c10::Error&) {
    return "device";
  } catch (const std::exception&) {
    return "runtime";
  } catch (...) {
    return "unknown";
  }
}

const std::vector<std::string>& error_kinds() {
  static const std::vector<std::string> kinds{
      "plan_execution", "stale", "search_limit", "plan", "budget", "handle", "unavailable", "in_use", "ownership",
      "materialization", "reentrancy", "lifetime_closed", "closed", "invalid_argument", "out_of_memory", "device",
      "runtime"};
  return kinds;
}

}  // namespace fhelium::harness
