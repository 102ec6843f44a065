#include "fhelium/residency/plan.hpp"

#include <stdexcept>

#include "detail/blank_text.hpp"

namespace fhelium::residency {

namespace {
template <class... Ts>
struct overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
overloaded(Ts...) -> overloaded<Ts...>;  // clang before 17 does not deduce aggregates
}  // namespace

const ResidencyHandle& action_handle(const ResidencyAction& action) noexcept {
  return std::visit([](const auto& a) -> const ResidencyHandle& { return a.handle; }, action);
}

const char* action_kind(const ResidencyAction& action) noexcept {
  static constexpr const char* kinds[] = {"ensure", "move", "drop", "discard"};
  return kinds[action.index()];
}

std::string describe(const ResidencyAction& action) {
  return std::visit(
      overloaded{
          [](const EnsureResident& a) { return "ensure " + a.handle.handle_id + " at " + a.location.name(); },
          [](const MoveResident& a) {
            return "move " + a.handle.handle_id + " " + (a.from_location ? a.from_location->name() : "auto") +
                   " -> " + a.to.name();
          },
          [](const DropResident& a) { return "drop " + a.handle.handle_id + " at " + a.location.name(); },
          [](const DiscardValue& a) { return "discard " + a.handle.handle_id; },
      },
      action);
}

MemoryReservation::MemoryReservation(ResidencyLocation location_, std::int64_t nbytes_, std::string label_)
    : location(location_), nbytes(nbytes_), label(std::move(label_)) {
  if (nbytes < 0) throw std::invalid_argument("MemoryReservation nbytes must be non-negative");
  if (detail::is_blank(label)) {
    throw std::invalid_argument("MemoryReservation label must be non-empty");
  }
}

}  // namespace fhelium::residency
