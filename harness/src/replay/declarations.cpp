#include "replay/declarations.hpp"

#include "fhelium/harness/text_report.hpp"

namespace fhelium::harness::replay_detail {

using namespace residency;

void Declarations::bind(const std::string& name, ResidencyHandle handle) {
  names_by_id_[handle.handle_id] = name;
  handles_.insert_or_assign(name, std::move(handle));
}

ResidencyHandle Declarations::handle(const std::string& value) const {
  const auto found = handles_.find(value);
  if (found != handles_.end()) return found->second;
  return ResidencyHandle{manager_id_, "unregistered-" + value, scenario_->find_value(value)->type_name};
}

ResidencyHandle Declarations::step_handle(const Step& step) const {
  if (!step.handle) return handle(step.value);
  return ResidencyHandle{step.handle->foreign ? std::string("foreign-manager") : manager_id_, step.handle->id,
                         step.handle->type_name};
}

c10::Stream Declarations::stream(const StreamRef& ref) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(ref.device)),
                     ref.id);
}

ResidencyAction Declarations::action(const ActionDecl& decl) const {
  switch (decl.kind) {
    case ActionKind::ensure:
      return EnsureResident{handle(decl.value), decl.location};
    case ActionKind::move:
      return MoveResident{handle(decl.value), decl.location, decl.from};
    case ActionKind::drop:
      return DropResident{handle(decl.value), decl.location};
    case ActionKind::discard:
      return DiscardValue{handle(decl.value)};
  }
  return DiscardValue{handle(decl.value)};
}

std::vector<ResidencyAction> Declarations::actions(const std::vector<ActionDecl>& decls) const {
  std::vector<ResidencyAction> result;
  result.reserve(decls.size());
  for (const auto& decl : decls) result.push_back(action(decl));
  return result;
}

ResidencyPlan Declarations::plan(const std::string& name) const {
  const PlanDecl& decl = *scenario_->find_plan(name);
  ResidencyPlan result{decl.name, actions(decl.enter), actions(decl.exit), {}, actions(decl.reclaim)};
  for (const auto& reservation : decl.reservations) {
    result.reservations.emplace_back(reservation.location, reservation.bytes, reservation.label);
  }
  return result;
}

ResidencyRequest Declarations::request(const Step& step) const {
  std::vector<ResidencyRequirement> requirements;
  for (const auto& requirement : step.requirements) {
    requirements.push_back({handle(requirement.value), requirement.location});
  }
  std::vector<MemoryReservation> reservations;
  for (const auto& reservation : step.reservations) {
    reservations.emplace_back(reservation.location, reservation.bytes, reservation.label);
  }
  return ResidencyRequest(step.plan, std::move(requirements), std::move(reservations));
}

ConsumerStreams Declarations::consumer_streams(const Step& step) const {
  ConsumerStreams result;
  for (const auto& [location, ref] : step.consumer_streams) result.emplace(location, stream(ref));
  return result;
}

TransferStreams Declarations::transfer_streams(const Step& step) const {
  TransferStreams result;
  for (const auto& [location, ref] : step.transfer_streams) result.emplace(location, stream(ref));
  return result;
}

std::string Declarations::named(const std::string& text) const {
  std::string result, word;
  const auto flush = [&] {
    std::string tail;
    while (!word.empty() && (word.back() == ',' || word.back() == ']')) {
      tail.insert(tail.begin(), word.back());
      word.pop_back();
    }
    result += value_name(word) + tail;
    word.clear();
  };
  for (const char c : text) {
    if (c == ' ' || c == '[') {
      flush();
      result += c;
    } else {
      word += c;
    }
  }
  flush();
  return result;
}

std::string Declarations::described(const ResidencyAction& action) const { return named(describe(action)); }

std::string Declarations::quoted_names(std::string message) const {
  for (const auto& [name, handle] : handles_) {
    const std::string id = "'" + handle.handle_id + "'";
    const std::string replacement = "'" + name + "'";
    for (auto at = message.find(id); at != std::string::npos; at = message.find(id, at + replacement.size())) {
      message.replace(at, id.size(), replacement);
    }
  }
  return message;
}

std::string Declarations::value_name(const std::string& id) const {
  const auto found = names_by_id_.find(id);
  return found == names_by_id_.end() ? id : found->second;
}

}  // namespace fhelium::harness::replay_detail
