#include "dist/cuda.hpp"

#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <optional>
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

namespace {

// gantry's own streams besides the compute stream, one of each per device for
// the process: batch copies, and the warm-up and capture of a CUDA graph.
enum class Own { kCopy, kSide };
c10::cuda::CUDAStream own_stream(Own which, c10::DeviceIndex device) {
  static std::optional<c10::cuda::CUDAStream> streams[2][64];
  auto& s = streams[static_cast<int>(which)][device];
  if (!s) s = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device);
  return *s;
}

c10::cuda::CUDAStream side_stream() { return own_stream(Own::kSide, c10::cuda::current_device()); }

}  // namespace

torch::Tensor copy_to_device(const torch::Tensor& host, torch::Device device) {
  const c10::cuda::CUDAStream copy = own_stream(Own::kCopy, device.index());
  const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(device.index());
  torch::Tensor out;
  {
    c10::cuda::CUDAStreamGuard guard(copy);
    out = host.to(device, /*non_blocking=*/true);
  }
  at::cuda::CUDAEvent copied;
  copied.record(copy);
  copied.block(compute);
  // Allocated for the copy stream; used (and freed) on the compute stream.
  c10::cuda::CUDACachingAllocator::recordStream(out.storage().data_ptr(), compute);
  return out;
}

void run_on_side_stream(const std::function<void()>& fn) {
  // Rare (the warm-up steps): whole-device synchronisation is the simple,
  // certain way to order the two streams both ways.
  c10::cuda::device_synchronize();
  {
    c10::cuda::CUDAStreamGuard guard(side_stream());
    fn();
  }
  c10::cuda::device_synchronize();
}

struct StepGraph::Impl {
  std::unique_ptr<at::cuda::CUDAGraph> graph;
};

StepGraph::StepGraph() : impl_(std::make_unique<Impl>()) {}
StepGraph::~StepGraph() = default;

void StepGraph::capture(const std::function<void()>& fn) {
  c10::cuda::device_synchronize();
  const c10::cuda::CUDAStream stream = side_stream();
  c10::cuda::CUDAStreamGuard guard(stream);
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
  graph->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
  bool ran = false;
  try {
    fn();
    ran = true;
    graph->capture_end();
  } catch (...) {
    if (!ran) {
      // The capture is still open (maybe invalidated by a call it cannot
      // hold, as a host read of a tensor): end it, stop routing the stream's
      // allocations to the graph's pool and give that pool back.
      cudaGraph_t partial = nullptr;
      cudaStreamEndCapture(stream.stream(), &partial);
      if (partial) cudaGraphDestroy(partial);
      c10::cuda::CUDACachingAllocator::endAllocateToPool(stream.device_index(), graph->pool());
      c10::cuda::CUDACachingAllocator::releasePool(stream.device_index(), graph->pool());
    }
    (void)cudaGetLastError();  // capture errors are not sticky: clear the last one
    throw;
  }
  c10::cuda::device_synchronize();
  impl_->graph = std::move(graph);
}

void StepGraph::replay() {
  TORCH_CHECK(impl_->graph, "StepGraph::replay before a successful capture");
  impl_->graph->replay();
}

}  // namespace gantry::cuda
