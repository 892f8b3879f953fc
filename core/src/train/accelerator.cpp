#include "train/accelerator.hpp"

#include <torch/torch.h>

#include "gantry/errors.hpp"
#include "checkpoint/file.hpp"
#if GANTRY_WITH_CUDA
#include "distributed/cuda.hpp"
#endif

namespace gantry {

void Accelerator::broadcast(const std::vector<torch::Tensor>& tensors) const {
  if (!pg_ || tensors.empty()) return;
  torch::NoGradGuard no_grad;
  pg_->broadcast(tensors);
}

void Accelerator::allreduce_sum(torch::Tensor& t) const {
  if (pg_) pg_->allreduce_sum(t);
}

std::vector<size_t> Accelerator::differing(const std::vector<torch::Tensor>& tensors) const {
  if (!pg_ || tensors.empty()) return {};
  std::vector<double> sums;
  for (const auto& p : tensors) sums.push_back(p.to(torch::kFloat64).sum().item<double>());
  auto hi = torch::tensor(sums, torch::kFloat64), lo = -hi.clone();
  pg_->allreduce_max(hi);
  pg_->allreduce_max(lo);
  std::vector<size_t> out;
  const double* h = hi.data_ptr<double>();
  const double* l = lo.data_ptr<double>();
  for (size_t i = 0; i < sums.size(); ++i)
    if (h[i] != -l[i]) out.push_back(i);
  return out;
}

namespace {

// Tensors on the CPU; gradients through shared memory when every rank is on
// this host, else Gloo's c10d::Reducer.
class GlooAccelerator final : public Accelerator {
 public:
  GlooAccelerator(const ExperimentConfig& cfg, const DistEnv& dist)
      : Accelerator(dist), cfg_(cfg), device_(torch::kCPU) {
    if (dist_.world_size <= 1) return;
    transport();  // a transport this job cannot use: one error, before any rendezvous
    pg_ = std::make_unique<ProcessGroup>(
        dist_, std::chrono::milliseconds(static_cast<int64_t>(cfg.trainer.dist_timeout * 1000)));
  }

  torch::Device device() const override { return device_; }

  void to_device(Batch& batch) const override {
    batch.input = batch.input.to(device_);
    if (batch.target.defined()) batch.target = batch.target.to(device_);
  }

  std::unique_ptr<GradSync> grad_sync(std::vector<torch::Tensor> params) override {
    if (!pg_) return nullptr;
    const auto& t = cfg_.trainer;
    auto sync =
        std::make_unique<GradSync>(*pg_, std::move(params), transport(), t.grad_compression == GradCompression::kFp16);
    if (t.grad_transport == GradTransport::kShm && sync->transport() != GradSync::Transport::kShm)
      throw Error("rank " + std::to_string(dist_.rank) +
                  ": trainer.grad_transport=shm, but the ranks cannot share memory here (see above; "
                  "use auto or gloo)");
    return sync;
  }

  std::string grad_transport_name(const GradSync& sync) const override {
    return sync.transport() == GradSync::Transport::kShm ? "shared memory (one host)" : "Gloo (c10d::Reducer)";
  }

  std::vector<torch::Tensor> gather_rng_states() override {
    if (!pg_) return {};
    return pg_->allgather(generator_state(torch::kCPU));
  }

 private:
  // trainer.grad_transport: shared memory when every rank is on this host
  // (and the gradients are float32 on the CPU), else Gloo.
  GradSync::Transport transport() const {
    const auto& t = cfg_.trainer;
    const bool one_host = dist_.local_world_size == dist_.world_size && dist_.num_nodes == 1;
    if (t.grad_transport == GradTransport::kShm && !one_host)
      throw ConfigError(cfg_.where("trainer.grad_transport") +
                        ": trainer.grad_transport=shm needs every rank on one host; this job has " +
                        std::to_string(dist_.num_nodes) + " nodes (use auto or gloo)");
    if (t.grad_transport == GradTransport::kGloo || t.grad_compression == GradCompression::kFp16)
      return GradSync::Transport::kGloo;
    if (t.grad_transport == GradTransport::kShm) return GradSync::Transport::kShm;
    return one_host && device_.is_cpu() ? GradSync::Transport::kShm : GradSync::Transport::kGloo;
  }

  const ExperimentConfig cfg_;  // a copy: the experiment moves on into the Model
  torch::Device device_;
};

#if GANTRY_WITH_CUDA
// One GPU per rank: cuda:LOCAL_RANK. CUDA tensors (weights, gradient buckets)
// go through NCCL, CPU ones (stop agreement, RNG states, status) through
// Gloo, in one c10d::ProcessGroup. Gradients: c10d::Reducer per optimizer on
// NCCL, buckets all-reduced while backward runs. Batches come from the loader
// in pinned memory and are copied with non_blocking on a copy stream, which
// overlaps the previous step's kernels; the compute stream waits for it.
class CudaAccelerator final : public Accelerator {
 public:
  CudaAccelerator(const ExperimentConfig& cfg, const DistEnv& dist)
      : Accelerator(dist), cfg_(cfg), device_(torch::kCUDA, static_cast<c10::DeviceIndex>(dist.local_rank)) {
    const auto& t = cfg.trainer;
    if (t.grad_transport != GradTransport::kAuto)
      throw ConfigError(cfg.where("trainer.grad_transport") +
                        ": trainer.grad_transport=" + choice_name(t.grad_transport) +
                        " is for CPU ranks; on CUDA gradients go through NCCL (use auto)");
    const int count = static_cast<int>(torch::cuda::device_count());
    if (dist.local_rank >= count)
      throw ConfigError(cfg.where("trainer.devices") + ": rank " + std::to_string(dist.rank) + " has LOCAL_RANK " +
                        std::to_string(dist.local_rank) + ", but this node has " + std::to_string(count) +
                        " CUDA device" + (count == 1 ? "" : "s") + " (trainer.devices is " + std::to_string(t.devices) +
                        ": one rank per GPU)");
    cuda::set_device(dist.local_rank);
    if (dist_.world_size <= 1) return;
    pg_ = std::make_unique<ProcessGroup>(dist_, std::chrono::milliseconds(static_cast<int64_t>(t.dist_timeout * 1000)),
                                         /*nccl=*/true);
  }

  torch::Device device() const override { return device_; }
  bool pin_memory() const override { return true; }
  std::string gpu_bus_id() const override { return cuda::pci_bus_id(device_.index()); }

  // On a copy stream: overlaps the previous step's kernels (docs/cuda.md).
  void to_device(Batch& batch) const override {
    batch.input = cuda::copy_to_device(batch.input, device_);
    if (batch.target.defined()) batch.target = cuda::copy_to_device(batch.target, device_);
  }

  std::unique_ptr<GradSync> grad_sync(std::vector<torch::Tensor> params) override {
    if (!pg_) return nullptr;
    return std::make_unique<GradSync>(*pg_, std::move(params), GradSync::Transport::kGloo,
                                      cfg_.trainer.grad_compression == GradCompression::kFp16);
  }

  std::string grad_transport_name(const GradSync&) const override {
    return "NCCL " + nccl_version_text(cuda::nccl_version()) + " (c10d::Reducer, one GPU per rank)";
  }

  std::vector<torch::Tensor> gather_rng_states() override {
    if (!pg_) return {};
    return pg_->allgather(generator_state(torch::Device(torch::kCPU)));
  }

  std::vector<torch::Tensor> gather_cuda_rng_states() override {
    torch::Tensor mine = generator_state(device_);
    if (!pg_) return {mine};
    return pg_->allgather(mine);  // a CPU byte tensor: through Gloo
  }

 private:
  const ExperimentConfig cfg_;
  torch::Device device_;
};
#endif

}  // namespace

std::unique_ptr<Accelerator> make_accelerator(const ExperimentConfig& cfg, const DistEnv& dist) {
  const auto& t = cfg.trainer;
  const bool cuda_build = GANTRY_WITH_CUDA;
  if (t.accelerator == AcceleratorKind::kCuda && !cuda_build)
    throw ConfigError(cfg.where("trainer.accelerator") +
                      ": trainer.accelerator is cuda, but this gantry is built against a CPU-only LibTorch " +
                      TORCH_VERSION + " (build the cuda preset: README, LibTorch 2.x and CUDA)");
  if (t.accelerator == AcceleratorKind::kCuda && !torch::cuda::is_available())
    throw ConfigError(cfg.where("trainer.accelerator") +
                      ": trainer.accelerator is cuda, but no CUDA device is available to this "
                      "LibTorch (use cpu or auto)");
  dist.check(t.num_nodes, t.devices, cfg.where("trainer.devices"));
#if GANTRY_WITH_CUDA
  if (t.accelerator == AcceleratorKind::kCuda ||
      (t.accelerator == AcceleratorKind::kAuto && torch::cuda::is_available()))
    return std::make_unique<CudaAccelerator>(cfg, dist);
#endif
  return std::make_unique<GlooAccelerator>(cfg, dist);
}

}  // namespace gantry
