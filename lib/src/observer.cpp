#include "fhelium/residency/observer.hpp"

namespace fhelium::residency {

const char* to_string(ObservedCall call) noexcept {
  switch (call) {
    case ObservedCall::adopt: return "adopt";
    case ObservedCall::register_source: return "register_source";
    case ObservedCall::ensure: return "ensure";
    case ObservedCall::move: return "move";
    case ObservedCall::drop: return "drop";
    case ObservedCall::discard: return "discard";
    case ObservedCall::execute_actions: return "execute_actions";
    case ObservedCall::explain: return "explain";
    case ObservedCall::scope_enter: return "scope_enter";
    case ObservedCall::scope_close: return "scope_close";
    case ObservedCall::scope_abandon: return "scope_abandon";
    case ObservedCall::acquire: return "acquire";
    case ObservedCall::add_consumer_stream: return "add_consumer_stream";
    case ObservedCall::lease_release: return "lease_release";
    case ObservedCall::lease_abandon: return "lease_abandon";
    case ObservedCall::hold: return "hold";
    case ObservedCall::hold_release: return "hold_release";
    case ObservedCall::hold_abandon: return "hold_abandon";
    case ObservedCall::reserve: return "reserve";
    case ObservedCall::reservation_release: return "reservation_release";
    case ObservedCall::reservation_abandon: return "reservation_abandon";
    case ObservedCall::close: return "close";
  }
  return "unknown";
}

}  // namespace fhelium::residency
