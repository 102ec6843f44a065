#include "torch_cuda_subject.hpp"

#include "fhelium/residency/runtime.hpp"

#ifdef FHELIUM_RESIDENCY_WITH_CUDA
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <memory>
#include <vector>
#endif

namespace fhelium::contract {

std::optional<RuntimeSubject> torch_cuda_subject(std::string& why_not) {
#ifdef FHELIUM_RESIDENCY_WITH_CUDA
  auto runtime = std::make_shared<residency::TorchRuntime>();
  if (runtime->cuda_device_count() == 0) {
    why_not = "libtorch has CUDA but this machine has no CUDA device";
    return std::nullopt;
  }
  RuntimeSubject subject;
  subject.name = "torch-cuda";
  subject.runtime = runtime;
  subject.stream = [](int device, int) {
    return c10::cuda::getStreamFromPool(false, static_cast<c10::DeviceIndex>(device)).unwrap();
  };
  // Real work: a spin kernel of about 50 ms, far longer than the checks take
  // to query, so "not complete yet" is observable.
  auto busy = std::make_shared<std::vector<c10::Stream>>();
  subject.enqueue = [busy](const c10::Stream& stream, std::int64_t) {
    c10::cuda::CUDAStreamGuard guard(c10::cuda::CUDAStream(c10::cuda::CUDAStream::UNCHECKED, stream));
    at::cuda::sleep(100'000'000);
    busy->push_back(stream);
  };
  subject.release = [busy](std::int64_t) {
    for (const auto& stream : *busy) stream.synchronize();
    busy->clear();
  };
  subject.allocator_stats_on_cuda = true;
  return subject;
#else
  why_not = "this libtorch has no CUDA (Debian's CPU-only build); configure with -Dtorch_root=DIR for a CUDA libtorch";
  return std::nullopt;
#endif
}

}  // namespace fhelium::contract
