#include "dist/cuda.hpp"

#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <string>

#if TORCH_VERSION_MAJOR < 2
#error "gantry's CUDA path needs LibTorch 2.x (ProcessGroup with per-device backends)"
#endif

namespace gantry::cuda {

void set_device(int index) { c10::cuda::set_device(static_cast<c10::DeviceIndex>(index)); }

void add_nccl_backend(c10d::ProcessGroup& group, const c10::intrusive_ptr<c10d::Store>& store, int rank,
                      int size, std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
  group.setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL, nccl);
}

std::string nccl_version() {
  const auto v = torch::cuda::nccl::version();
  // NCCL_VERSION_CODE: major*10000 + minor*100 + patch (2.9 and later).
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

}  // namespace gantry::cuda
