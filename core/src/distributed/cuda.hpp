// The parts of the CUDA path that need LibTorch's CUDA headers (c10/cuda,
// ProcessGroupNCCL), in one translation unit compiled only when gantry is
// built against a CUDA LibTorch (GANTRY_WITH_CUDA: the `cuda` preset). The
// rest of the CUDA path (devices, pinned memory, non_blocking copies, CUDA
// generators, autocast) goes through LibTorch's device-generic API.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <torch/types.h>

namespace c10d {
class ProcessGroup;
class Store;
}  // namespace c10d

namespace gantry::cuda {

/// Makes `index` this thread's current CUDA device (NCCL's communicators and
/// every kernel without an explicit device go there).
void set_device(int index);

/// Adds an NCCL backend for CUDA tensors to `group` (whose Gloo backend keeps
/// CPU tensors: the stop agreement, status, RNG gathering), as
/// init_process_group("cpu:gloo,cuda:nccl") does. `store`: a prefix of the
/// job's rendezvous store. LibTorch 2.x only.
void add_nccl_backend(c10d::ProcessGroup& group, const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                      std::chrono::milliseconds timeout);

/// The device's name ("NVIDIA H200"), for the throughput's peak table.
std::string device_name(int index);

/// The device's PCI bus id ("00000000:3b:00.0"), which names it to NVML
/// whatever CUDA_VISIBLE_DEVICES renumbered.
std::string pci_bus_id(int index);

/// The NCCL version LibTorch was built with, packed (major << 32 | minor << 16
/// | patch: distributed.hpp's nccl_version_text makes "2.27.3" of it).
uint64_t nccl_version();

/// `host` (pinned) copied to `device` on a copy stream of its own: the copy
/// runs while the current (compute) stream still executes the kernels queued
/// before it (the previous step's, when the host runs ahead), and the current
/// stream waits for the copy before its next kernel. The result is safe to
/// use and to free on the current stream (the allocator is told).
torch::Tensor copy_to_device(const torch::Tensor& host, torch::Device device);

/// Runs `fn` on a stream of its own (not the current one), after everything
/// queued so far, and makes the current stream wait for what it queued. The
/// warm-up steps before a capture run so: a capture needs its stream's
/// one-time set-up (cuBLAS workspace, autograd's streams) done beforehand.
void run_on_side_stream(const std::function<void()>& fn);

/// One training step as a CUDA graph (at::cuda::CUDAGraph): captured once on
/// the side stream run_on_side_stream uses, replayed on the current stream.
/// The capture's tensors (inputs copied in before each replay, outputs read
/// after) keep their addresses; random numbers drawn inside continue from the
/// device generator on every replay.
class StepGraph {
 public:
  StepGraph();
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  /// Captures what `fn` queues on the GPU (it executes nothing). Capture mode
  /// thread-local: other threads (the data loader pinning memory) are not
  /// disturbed. When `fn` throws or the capture fails, the capture is ended
  /// and dropped, the device is left as before, and the error rethrown.
  void capture(const std::function<void()>& fn);
  /// Launches the captured step on the current stream.
  void replay();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gantry::cuda
