// runtime-contract: runs the DeviceRuntime contract against every runtime
// stack this build has, prints a table, and exits 1 on any violation.
//
//   runtime-contract            every subject
//   runtime-contract --torch    only the real TorchRuntime (host and CUDA)
//
// One subject is deliberately broken (its copies alias their source); the
// contract must catch it, or the run fails: proof that the checks bite.
#include <iostream>
#include <string>

#include "runtime_contract.hpp"
#include "torch_cuda_subject.hpp"

#ifdef FHELIUM_CONTRACT_WITH_HARNESS
#include "fhelium/harness/fault_injecting_runtime.hpp"
#include "fhelium/harness/forwarding_runtime.hpp"
#include "fhelium/harness/simulated_runtime.hpp"
#include "free_copy_runtime.hpp"
#endif

namespace {

using namespace fhelium;
using contract::RuntimeSubject;

#ifdef FHELIUM_CONTRACT_WITH_HARNESS
RuntimeSubject simulated_subject(const std::string& name, const std::shared_ptr<harness::SimulatedRuntime>& simulated,
                                 std::shared_ptr<residency::DeviceRuntime> top) {
  RuntimeSubject subject;
  subject.name = name;
  subject.runtime = std::move(top);
  subject.stream = [simulated](int device, int id) { return simulated->stream(device, id); };
  subject.enqueue = [simulated](const c10::Stream& stream, std::int64_t ns) { simulated->enqueue(stream, ns); };
  subject.release = [simulated](std::int64_t ns) { simulated->advance(ns); };
  subject.allocator_stats_on_cuda = true;
  return subject;
}

c10::Stream plain_cuda_stream(int device, int id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device)),
                     id);
}

// Test-only defect: "copies" that are the source itself.
class AliasingCopyRuntime final : public harness::ForwardingRuntime {
 public:
  using ForwardingRuntime::ForwardingRuntime;

 private:
  residency::ResidentValue do_copy_to(const residency::ResidentValue& value, const residency::ResidencyLocation&,
                                      const std::optional<c10::Stream>&) override {
    return value;
  }
};
#endif

}  // namespace

int main(int argc, char** argv) {
  const bool torch_only = argc > 1 && std::string(argv[1]) == "--torch";
  std::vector<contract::ContractCheck> checks;
  const auto run = [&](const RuntimeSubject& subject) {
    const auto results = contract::run_contract(subject);
    checks.insert(checks.end(), results.begin(), results.end());
  };

  RuntimeSubject torch_host;
  torch_host.name = "torch-host";
  torch_host.runtime = std::make_shared<residency::TorchRuntime>();
  torch_host.allocator_stats_on_cuda = residency::TorchRuntime::built_with_cuda();
  torch_host.stream = [](int device, int) {
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device)));
  };
  if (torch_host.runtime->cuda_device_count() == 0) {
    run(torch_host);  // with devices, the CUDA subject below covers the same runtime
  }
  std::string why_not;
  if (const auto cuda = contract::torch_cuda_subject(why_not)) {
    run(*cuda);
  } else {
    checks.push_back({"torch-cuda", "all checks", contract::ContractCheck::Verdict::skip, why_not});
  }

  bool broken_caught = true;
#ifdef FHELIUM_CONTRACT_WITH_HARNESS
  if (!torch_only) {
    auto simulated = std::make_shared<harness::SimulatedRuntime>();
    run(simulated_subject("simulated", simulated, simulated));
    auto under_faults = std::make_shared<harness::SimulatedRuntime>();
    run(simulated_subject("faults-over-simulated", under_faults,
                          std::make_shared<harness::FaultInjectingRuntime>(under_faults,
                                                                           std::vector<harness::FaultRule>{}, 1)));
    RuntimeSubject free_copy;
    free_copy.name = "free-copy";
    free_copy.runtime = std::make_shared<bench::FreeCopyRuntime>();
    free_copy.stream = plain_cuda_stream;
    free_copy.copies_data = false;
    free_copy.events_complete_at_once = true;
    run(free_copy);

    auto victim = std::make_shared<harness::SimulatedRuntime>();
    const auto broken = contract::run_contract(
        simulated_subject("aliasing-copies", victim, std::make_shared<AliasingCopyRuntime>(victim)));
    broken_caught = false;
    for (const auto& check : broken) {
      broken_caught = broken_caught || (check.check == "copies are independent" &&
                                        check.verdict == contract::ContractCheck::Verdict::fail);
    }
    std::cout << "deliberately broken runtime (copies alias their source): "
              << (broken_caught ? "caught by 'copies are independent'" : "NOT CAUGHT") << "\n\n";
  }
#endif
  const std::size_t failures = contract::print_contract(std::cout, checks);
  std::cout << "\nruntime-contract: " << checks.size() << " checks, " << failures << " failed\n";
  return failures == 0 && broken_caught ? 0 : 1;
}
