#include "train/accelerator.hpp"

#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include "config/errors.hpp"

namespace gantry {

void Accelerator::broadcast(const std::vector<torch::Tensor>& tensors) const {
  if (!pg_ || tensors.empty()) return;
  torch::NoGradGuard no_grad;
  pg_->broadcast(tensors);
}

void Accelerator::allreduce_sum(torch::Tensor& t) const {
  if (pg_) pg_->allreduce_sum(t);
}

bool Accelerator::identical(const std::vector<torch::Tensor>& tensors) const {
  if (!pg_) return true;
  std::vector<double> sums;
  for (const auto& p : tensors) sums.push_back(p.to(torch::kFloat64).sum().item<double>());
  auto hi = torch::tensor(sums, torch::kFloat64), lo = -hi.clone();
  pg_->allreduce_max(hi);
  pg_->allreduce_max(lo);
  return torch::equal(hi, -lo);
}

namespace {

// Tensors on the CPU (or, where this LibTorch has CUDA, on the rank's GPU
// with Gloo until the NCCL accelerator exists); gradients through shared
// memory when every rank is on this host, else Gloo's c10d::Reducer.
class GlooAccelerator final : public Accelerator {
 public:
  GlooAccelerator(const ExperimentConfig& cfg, const DistEnv& dist, torch::Device device)
      : Accelerator(dist), cfg_(cfg), device_(device) {
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
    auto sync = std::make_unique<GradSync>(*pg_, std::move(params), transport(), t.grad_compression == "fp16");
    if (t.grad_transport == "shm" && sync->transport() != GradSync::Transport::kShm)
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
    auto gen = at::detail::getDefaultCPUGenerator();
    torch::Tensor mine;
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      mine = gen.get_state();
    }
    return pg_->allgather(mine);
  }

 private:
  // trainer.grad_transport: shared memory when every rank is on this host
  // (and the gradients are float32 on the CPU), else Gloo.
  GradSync::Transport transport() const {
    const auto& t = cfg_.trainer;
    const bool one_host = dist_.local_world_size == dist_.world_size && dist_.num_nodes == 1;
    if (t.grad_transport == "shm" && !one_host)
      throw ConfigError(cfg_.where("trainer.grad_transport") +
                        ": trainer.grad_transport=shm needs every rank on one host; this job has " +
                        std::to_string(dist_.num_nodes) + " nodes (use auto or gloo)");
    if (t.grad_transport == "gloo" || t.grad_compression == "fp16") return GradSync::Transport::kGloo;
    if (t.grad_transport == "shm") return GradSync::Transport::kShm;
    return one_host && device_.is_cpu() ? GradSync::Transport::kShm : GradSync::Transport::kGloo;
  }

  const ExperimentConfig cfg_;  // a copy: the experiment moves on into the Model
  torch::Device device_;
};

}  // namespace

std::unique_ptr<Accelerator> make_accelerator(const ExperimentConfig& cfg, const DistEnv& dist) {
  const auto& t = cfg.trainer;
  if (t.accelerator == "cuda" && !torch::cuda::is_available())
    throw ConfigError(cfg.where("trainer.accelerator") +
                      ": trainer.accelerator is cuda, but no CUDA device is available to this "
                      "LibTorch (use cpu or auto)");
  dist.check(t.num_nodes, t.devices, cfg.where("trainer.devices"));
  torch::Device device(torch::kCPU);
  if (t.accelerator != "cpu" && torch::cuda::is_available()) device = torch::Device(torch::kCUDA, dist.local_rank);
  return std::make_unique<GlooAccelerator>(cfg, dist, device);
}

}  // namespace gantry
