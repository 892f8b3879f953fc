// The accelerator seam: where the modules live and how ranks talk. The fit
// loop and its callbacks never name a device or a backend; they ask this.
// Two implementations (make_accelerator picks): GlooAccelerator (CPU tensors,
// Gloo process group, gradients through shared memory or c10d::Reducer) and,
// in a CUDA build, CudaAccelerator (one GPU per rank, LOCAL_RANK; NCCL for
// CUDA tensors beside Gloo for CPU ones; pinned batches copied non_blocking).
#pragma once

#include <torch/types.h>

#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "distributed/dist_env.hpp"
#include "distributed/distributed.hpp"
#include "gantry/system.hpp"

namespace gantry {

class Accelerator {
 public:
  virtual ~Accelerator() = default;

  /// The device modules and batches live on.
  virtual torch::Device device() const = 0;
  /// Puts a batch on the device (a no-op on the CPU).
  virtual void to_device(Batch& batch) const = 0;
  /// Gradient averaging for one optimizer's parameters (null in a world of one).
  virtual std::unique_ptr<GradSync> grad_sync(std::vector<torch::Tensor> params) = 0;
  /// How gradients travel, for the "ddp:" line ("" in a world of one).
  virtual std::string grad_transport_name(const GradSync& sync) const = 0;
  /// Every rank's generator state, by rank (a collective); empty in a world
  /// of one (the checkpoint then saves this process's own).
  virtual std::vector<torch::Tensor> gather_rng_states() = 0;
  /// Every rank's CUDA generator state (of its own device), by rank; empty on the CPU.
  virtual std::vector<torch::Tensor> gather_cuda_rng_states() { return {}; }
  /// Whether the data loader should put batches in page-locked memory (for
  /// asynchronous copies to the device).
  virtual bool pin_memory() const { return false; }
  /// This rank's GPU's PCI bus id, for NVML (dist/gpu_probe.hpp); "" on the CPU.
  virtual std::string gpu_bus_id() const { return ""; }

  const DistEnv& dist() const { return dist_; }
  bool is_zero() const { return dist_.rank == 0; }
  /// The process group; null in a world of one (no collective at all).
  ProcessGroup* group() const { return pg_.get(); }
  /// Collectives over every rank; each is a no-op in a world of one.
  void broadcast(const std::vector<torch::Tensor>& tensors) const;
  void allreduce_sum(torch::Tensor& t) const;
  /// The indices of `tensors` that are not identical on every rank (a cheap
  /// checksum: one float64 sum each, its max and min over the ranks); every
  /// rank gets the same answer.
  std::vector<size_t> differing(const std::vector<torch::Tensor>& tensors) const;

 protected:
  explicit Accelerator(DistEnv dist) : dist_(std::move(dist)) {}
  DistEnv dist_;
  std::unique_ptr<ProcessGroup> pg_;
};

/// The accelerator trainer.accelerator and the job's ranks ask for. Checks
/// the layout (trainer.devices, num_nodes) against the environment, then
/// joins the process group (rendezvous) when the world has more than one
/// rank. Throws ConfigError naming the key.
GANTRY_CORE_EXPORT std::unique_ptr<Accelerator> make_accelerator(const ExperimentConfig& cfg, const DistEnv& dist);

}  // namespace gantry
