// residency-gpu-check: proves TorchRuntime on real pinned host and CUDA.
//
//   residency-gpu-check [--json FILE] [--bytes N] [--repeats N]
//
// Runs the DeviceRuntime contract on the real TorchRuntime, then, when this
// build has CUDA and the machine a device: lease protection behind a long
// kernel, allocator statistics in snapshots and reports, and a manager move
// of pinned -> cuda:0 against the raw copy_ of the same bytes. Prints a table
// last, writes a JSON report, and exits 1 when a check fails (0 when every
// check passed or was skipped with its reason; 2 for usage errors).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/ones.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "fhelium/residency.hpp"
#include "runtime_contract.hpp"
#include "torch_cuda_subject.hpp"

#ifdef FHELIUM_RESIDENCY_WITH_CUDA
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace {

using namespace fhelium::residency;

struct Row {
  std::string check;
  std::string verdict;  // PASS, FAIL, skip
  std::string measured;
};

std::string json_escape(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

#ifdef FHELIUM_RESIDENCY_WITH_CUDA

const ResidencyLocation gpu = cuda_location(0);

c10::Stream pool_stream() { return c10::cuda::getStreamFromPool(false, 0).unwrap(); }

// About `milliseconds` of GPU time on `stream` (a spin kernel), whatever the clock.
void spin(const c10::Stream& stream, int milliseconds) {
  c10::cuda::CUDAStreamGuard guard(c10::cuda::CUDAStream(c10::cuda::CUDAStream::UNCHECKED, stream));
  at::cuda::sleep(static_cast<std::int64_t>(milliseconds) * 2'000'000);  // ~2 GHz upper bound
}

Row lease_protection() {
  ResidencyManager manager(ManagerOptions{{}, 64, std::make_shared<TorchRuntime>()});
  const ResidencyHandle value = manager.adopt(
      ResidentValue("Block", {{"x", at::ones({1 << 20}, at::TensorOptions().device(gpu.device()))}}), gpu,
      ReplicaMode::replicable);
  manager.ensure(value, PAGEABLE_HOST);  // a second copy, so cuda:0 may be dropped once unprotected
  const c10::Stream stream = pool_stream();
  ResidencyLease lease = manager.acquire({value}, gpu, stream);
  spin(stream, 300);  // the "kernel" still reading the lease's materialization
  lease.release(false);
  const std::int64_t pending = manager.snapshot().location(gpu)->pending_event_count;
  bool refused = false;
  try {
    manager.drop(value, gpu);
  } catch (const ResidencyInUseError&) {
    refused = true;
  }
  stream.synchronize();
  const std::int64_t after = manager.snapshot().location(gpu)->pending_event_count;
  bool dropped = false;
  try {
    dropped = !manager.drop(value, gpu).no_op;
  } catch (const std::exception&) {
  }
  manager.discard(value);
  manager.close();
  const bool ok = pending == 1 && refused && after == 0 && dropped;
  return {"lease protection until the event completes", ok ? "PASS" : "FAIL",
          "pending " + std::to_string(pending) + " while running, drop " + (refused ? "refused" : "ALLOWED") +
              "; after completion pending " + std::to_string(after) + ", drop " + (dropped ? "ok" : "FAILED")};
}

Row allocator_statistics() {
  ResidencyManager manager(ManagerOptions{{{gpu, 1LL << 30}}, 64, std::make_shared<TorchRuntime>()});
  const ResidencyHandle value =
      manager.adopt(ResidentValue("Block", {{"x", at::ones({1 << 20})}}), PAGEABLE_HOST, ReplicaMode::replicable);
  const ResidencyTransitionReport report = manager.ensure(value, gpu);
  const ResidencySnapshot snapshot = manager.snapshot();
  const ResidencyLocationSnapshot* at_gpu = snapshot.location(gpu);
  const bool in_report = report.allocator_device == gpu.device() && report.allocator_allocated_bytes_before &&
                         report.allocator_allocated_bytes_after &&
                         *report.allocator_allocated_bytes_after >= *report.allocator_allocated_bytes_before + (4 << 20);
  const bool in_snapshot = at_gpu->allocator_allocated_bytes && at_gpu->allocator_reserved_bytes &&
                           *at_gpu->allocator_reserved_bytes >= *at_gpu->allocator_allocated_bytes;
  std::ostringstream measured;
  measured << "report " << report.allocator_allocated_bytes_before.value_or(-1) << " -> "
           << report.allocator_allocated_bytes_after.value_or(-1) << " B; snapshot allocated "
           << at_gpu->allocator_allocated_bytes.value_or(-1) << ", reserved "
           << at_gpu->allocator_reserved_bytes.value_or(-1) << " B";
  manager.discard(value);
  manager.close();
  return {"allocator statistics in reports and snapshots", in_report && in_snapshot ? "PASS" : "FAIL",
          measured.str()};
}

double median(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

template <class F>
double seconds(F&& body) {
  const auto start = std::chrono::steady_clock::now();
  body();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<Row> data_movement(std::int64_t bytes, int repeats) {
  const at::TensorOptions pinned = at::TensorOptions().dtype(at::kByte).pinned_memory(true);
  const at::Tensor raw_source = at::empty({bytes}, pinned).fill_(7);
  std::vector<double> raw;
  for (int i = 0; i <= repeats; ++i) {
    const double took = seconds([&] {
      at::Tensor destination = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(gpu.device()));
      destination.copy_(raw_source, true);
      c10::cuda::getCurrentCUDAStream(0).synchronize();
    });
    if (i > 0) raw.push_back(took);  // the first run warms the allocator
  }
  ResidencyManager manager(ManagerOptions{{}, 0, std::make_shared<TorchRuntime>()});
  const ResidencyHandle value = manager.adopt(ResidentValue("Weights", {{"w", at::empty({bytes}, pinned).fill_(7)}}),
                                              PINNED_HOST, ReplicaMode::replicable);
  std::vector<double> managed;
  for (int i = 0; i <= repeats; ++i) {
    const double took = seconds([&] { manager.ensure(value, gpu); });  // returns once the copy completed
    manager.drop(value, gpu);
    if (i > 0) managed.push_back(took);
  }
  manager.discard(value);
  manager.close();
  const double ratio = median(managed) / median(raw);
  std::ostringstream measured;
  measured << std::fixed << std::setprecision(3) << ratio << "x (manager " << median(managed) * 1e3 << " ms, raw "
           << median(raw) * 1e3 << " ms, " << std::setprecision(1) << bytes / median(managed) / 1e9 << " GB/s, "
           << repeats << " runs, target <= 1.02x)";
  return {{"pinned -> cuda:0 move of " + std::to_string(bytes >> 20) + " MiB vs raw copy_", ratio <= 1.02 ? "PASS" : "FAIL",
           measured.str()}};
}

#endif  // FHELIUM_RESIDENCY_WITH_CUDA

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  std::int64_t bytes = 1LL << 30;
  int repeats = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else if (argument == "--bytes" && i + 1 < argc) {
      bytes = std::atoll(argv[++i]);
    } else if (argument == "--repeats" && i + 1 < argc) {
      repeats = std::max(1, std::atoi(argv[++i]));
    } else if (argument == "--help") {
      std::cout << "Usage: residency-gpu-check [--json FILE] [--bytes N] [--repeats N]\n";
      return 0;
    } else {
      std::cerr << "residency-gpu-check: unknown argument '" << argument << "' (try --help)\n";
      return 2;
    }
  }
  if (bytes <= 0) {
    std::cerr << "residency-gpu-check: --bytes must be positive\n";
    return 2;
  }

  std::vector<Row> rows;
  // 1. The contract on the real runtime (host, and CUDA when present).
  std::vector<fhelium::contract::ContractCheck> checks;
  std::string why_not;
  const auto cuda = fhelium::contract::torch_cuda_subject(why_not);
  if (cuda) {
    checks = fhelium::contract::run_contract(*cuda);
  } else {
    fhelium::contract::RuntimeSubject host;
    host.name = "torch-host";
    host.runtime = std::make_shared<TorchRuntime>();
    checks = fhelium::contract::run_contract(host);
  }
  const std::size_t contract_failures = fhelium::contract::print_contract(std::cout, checks);
  std::cout << '\n';
  std::size_t skipped = 0;
  for (const auto& check : checks) skipped += check.verdict == fhelium::contract::ContractCheck::Verdict::skip;
  rows.push_back({"runtime contract on " + checks.front().subject, contract_failures == 0 ? "PASS" : "FAIL",
                  std::to_string(checks.size()) + " checks, " + std::to_string(contract_failures) + " failed, " +
                      std::to_string(skipped) + " skipped"});

  // 2. What needs a real device.
#ifdef FHELIUM_RESIDENCY_WITH_CUDA
  if (cuda) {
    const std::vector<std::function<std::vector<Row>()>> sections{
        [] { return std::vector<Row>{lease_protection()}; },
        [] { return std::vector<Row>{allocator_statistics()}; },
        [&] { return data_movement(bytes, repeats); },
    };
    for (const auto& section : sections) {
      try {
        for (auto& row : section()) rows.push_back(std::move(row));
      } catch (const std::exception& error) {
        rows.push_back({"(section)", "FAIL", std::string("error: ") + error.what()});
      }
    }
  }
#endif
#ifndef FHELIUM_RESIDENCY_WITH_CUDA
  static_cast<void>(repeats);  // only the CUDA sections use them
  static_cast<void>(bytes);
#endif
  if (!cuda) {
    for (const char* name : {"lease protection until the event completes",
                             "allocator statistics in reports and snapshots", "pinned -> cuda:0 move vs raw copy_"}) {
      rows.push_back({name, "skip", why_not});
    }
  }

  std::size_t failures = 0, width = 5;
  for (const auto& row : rows) {
    failures += row.verdict == "FAIL";
    width = std::max(width, row.check.size());
  }
  std::cout << std::left << std::setw(static_cast<int>(width)) << "check" << "  verdict  measured\n";
  for (const auto& row : rows) {
    std::cout << std::left << std::setw(static_cast<int>(width)) << row.check << "  " << std::setw(7) << row.verdict
              << "  " << row.measured << '\n';
  }
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << "{\n  \"cuda\": " << (cuda ? "true" : "false") << ",\n  \"passed\": " << (failures == 0 ? "true" : "false")
        << ",\n  \"checks\": [\n";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      out << "    {\"check\": \"" << json_escape(rows[i].check) << "\", \"verdict\": \"" << rows[i].verdict
          << "\", \"measured\": \"" << json_escape(rows[i].measured) << "\"}" << (i + 1 < rows.size() ? "," : "")
          << '\n';
    }
    out << "  ]\n}\n";
  }
  std::cout << "\nresidency-gpu-check: " << (failures == 0 ? "PASS" : "FAIL") << " (" << rows.size() << " checks, "
            << failures << " failed)\n";
  return failures == 0 ? 0 : 1;
}
