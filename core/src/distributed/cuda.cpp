#include "distributed/cuda.hpp"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <torch/version.h>
#if TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 8
#include <ATen/core/CachingHostAllocator.h>
#define GANTRY_HOST_ALLOCATOR 1
#endif

#include <cstdio>
#include <mutex>
#include <optional>
#include <string>

#if TORCH_VERSION_MAJOR < 2
#error "gantry's CUDA path needs LibTorch 2.x (ProcessGroup with per-device backends)"
#endif

namespace gantry::cuda {

void set_device(int index) { c10::cuda::set_device(static_cast<c10::DeviceIndex>(index)); }

void add_nccl_backend(c10d::ProcessGroup& group, const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                      std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
  group.setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL, nccl);
}

std::string device_name(int index) { return at::cuda::getDeviceProperties(index)->name; }

std::string pci_bus_id(int index) {
  const cudaDeviceProp* p = at::cuda::getDeviceProperties(index);
  char id[32];
  std::snprintf(id, sizeof id, "%08x:%02x:%02x.0", unsigned(p->pciDomainID), unsigned(p->pciBusID),
                unsigned(p->pciDeviceID));
  return id;
}

uint64_t nccl_version() { return torch::cuda::nccl::version(); }

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

namespace {

// Each call its own best effort: a clean-up step that finds its part already
// done (or never begun) throws, and must not stop the next one.
template <typename F>
void best_effort(F&& f) {
  try {
    f();
  } catch (...) {
  }
}

#if GANTRY_HOST_ALLOCATOR
// Newer LibTorch (2.15 here) also routes the capture's pinned host allocations
// into the graph's pool (capture_begin, beside the device allocator): end that
// and release the host pool as for the device. Older ones have no such calls.
template <typename A>
auto end_host_routing(A& host, at::cuda::MempoolId_t pool, bool pool_made, int)
    -> decltype(host.end_allocate_to_pool(pool), host.release_pool(pool), void()) {
  bool ended_here = false;
  best_effort([&] {
    host.end_allocate_to_pool(pool);
    ended_here = true;
  });
  if (pool_made || ended_here) best_effort([&] { host.release_pool(pool); });
}
template <typename A>
void end_host_routing(A&, at::cuda::MempoolId_t, bool, long) {}
#endif

// What a failed capture leaves behind, undone: the stream's capture (still
// open when the step threw), the allocator routing the stream's allocations
// into the capture's pool, the pool itself, and the default generator marked
// as capturing (torch < 2.13: capture_begin sets the flag and only a
// successful capture_end clears it, so the eager fallback's first randn would
// fail with "Offset increment outside graph capture encountered unexpectedly").
// `pool_made`: capture_begin got as far as creating the pool.
void undo_failed_capture(const c10::cuda::CUDAStream& stream, at::cuda::MempoolId_t pool, bool pool_made,
                         at::Generator& generator, const at::Generator& before) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream.stream(), &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(stream.stream(), &partial);  // returns an error for an invalidated capture: expected
    if (partial) cudaGraphDestroy(partial);
  }
  const c10::DeviceIndex device = stream.device_index();
  // Throws when capture_end already did it, or capture_begin never did.
  bool ended_here = false;
  best_effort([&] {
    c10::cuda::CUDACachingAllocator::endAllocateToPool(device, pool);
    ended_here = true;
  });
  if (pool_made || ended_here) best_effort([&] { c10::cuda::CUDACachingAllocator::releasePool(device, pool); });
#if GANTRY_HOST_ALLOCATOR
  if (at::HostAllocator* host = at::getHostAllocator(at::kCUDA)) end_host_routing(*host, pool, pool_made, 0);
#endif
  best_effort([&] {
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.graphsafe_set_state(before);
  });
  (void)cudaGetLastError();  // capture errors are not sticky: clear the last one
}

}  // namespace

void StepGraph::capture(const std::function<void()>& fn) {
  c10::cuda::device_synchronize();
  const c10::cuda::CUDAStream stream = side_stream();
  c10::cuda::CUDAStreamGuard guard(stream);
  // The default generator's state as it is now, in an object of its own (a
  // clone: the capture marks the generator's current state object).
  at::Generator generator = at::cuda::detail::getDefaultCUDAGenerator(stream.device_index());
  at::Generator before;
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    before = generator.clone();
  }
  // The pool's handle is ours from the start: CUDAGraph::pool() answers only
  // after a successful capture, and the clean-up of a failed one needs it.
  const at::cuda::MempoolId_t pool = at::cuda::graph_pool_handle();
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
  bool begun = false;
  try {
    graph->capture_begin(pool, cudaStreamCaptureModeThreadLocal);
    begun = true;
    fn();
    graph->capture_end();  // throws too: an invalidated capture where fn did not
  } catch (...) {
    undo_failed_capture(stream, pool, begun, generator, before);
    // The failed CUDAGraph object is not destroyed: what its destructor
    // releases depends on how far capture_end got and differs between
    // LibTorch versions (it could release the pool a second time). It is a
    // few hundred bytes, once per process; its pool is released above.
    (void)graph.release();
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
