// The parts of the CUDA path that need LibTorch's CUDA headers (c10/cuda,
// ProcessGroupNCCL), in one translation unit compiled only when gantry is
// built against a CUDA LibTorch (GANTRY_WITH_CUDA: the `cuda` preset). The
// rest of the CUDA path (devices, pinned memory, non_blocking copies, CUDA
// generators, autocast) goes through LibTorch's device-generic API.
#pragma once

#include <chrono>

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
void add_nccl_backend(c10d::ProcessGroup& group, const c10::intrusive_ptr<c10d::Store>& store, int rank,
                      int size, std::chrono::milliseconds timeout);

/// The NCCL version LibTorch was built with ("2.27.3"), for the "ddp:" line.
std::string nccl_version();

}  // namespace gantry::cuda
