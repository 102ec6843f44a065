// The real TorchRuntime on CUDA as a contract subject, when this build's
// libtorch has CUDA and the machine has a device.
#pragma once

#include <optional>
#include <string>

#include "runtime_contract.hpp"

namespace fhelium::contract {

// The subject, or nullopt with `why_not` saying why it cannot run here.
std::optional<RuntimeSubject> torch_cuda_subject(std::string& why_not);

}  // namespace fhelium::contract
