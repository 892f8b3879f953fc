// Adam's update in one pass per parameter. LibTorch's Adam::step runs ~8
// element-wise kernels per parameter (mul_, add_, mul_, addcmul_, sqrt, div,
// add_, addcdiv_) and allocates two temporaries, each a full pass over memory;
// on this GAN that is ~25% of a step. fused_adam_step reads p, g, m, v once
// and writes p, m, v once (vectorised with AVX2/FMA where the CPU has them,
// split over LibTorch's intra-op threads), with the same math in the same
// order, on the optimizer's own state (exp_avg, exp_avg_sq, step), so a
// checkpoint is the same either way and the two can be mixed.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "gantry/core_export.hpp"

namespace gantry {

/// The key of a parameter's state in torch::optim::Optimizer::state(): its
/// TensorImpl's address, printed as text in LibTorch 1.13, the pointer in 2.x.
using OptimizerStateKey = std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type;
GANTRY_CORE_EXPORT OptimizerStateKey optimizer_state_key(const torch::Tensor& p);

/// Whether fused_adam_step can do `opt`'s next step: a torch::optim::Adam
/// without amsgrad whose parameters are dense float32 on the CPU (contiguous,
/// or dense in another order of dimensions, as a transposed weight).
GANTRY_CORE_EXPORT bool fused_adam_applies(const torch::optim::Optimizer& opt);

/// One Adam step of `opt` (see fused_adam_applies), identical to
/// torch::optim::Adam::step() up to float rounding. Parameters without a
/// gradient are skipped, as Adam does.
GANTRY_CORE_EXPORT void fused_adam_step(torch::optim::Optimizer& opt);

/// Adam stepped inside backward ("optimizer in backward"): each parameter is
/// stepped by a post hook on its AccumulateGrad node as soon as backward has
/// its whole gradient, while that gradient is still in cache, and the gradient
/// is freed at once. The result is the same as backward then fused_adam_step,
/// bit for bit: a parameter's gradient is final when its AccumulateGrad runs,
/// and every node that reads the parameter runs before it. Not for gradients
/// that must be averaged across ranks first (DDP), clipped or accumulated.
class GANTRY_CORE_EXPORT AdamInBackward {
 public:
  /// `params`: those of `opt` (see fused_adam_applies) that backward reaches.
  AdamInBackward(std::shared_ptr<torch::optim::Optimizer> opt, const std::vector<torch::Tensor>& params);
  ~AdamInBackward();
  AdamInBackward(const AdamInBackward&) = delete;
  AdamInBackward& operator=(const AdamInBackward&) = delete;

  /// loss.backward(inputs = params), stepping each parameter on the way; then
  /// steps any parameter this backward did not reach that still holds a
  /// gradient from earlier, as fused_adam_step would. Gradients end unset.
  void backward_and_step(const torch::Tensor& loss);

 private:
  std::shared_ptr<torch::optim::Optimizer> opt_;
  std::vector<torch::Tensor> params_;
  std::vector<const torch::optim::AdamOptions*> options_;  // params_[i]'s group options
  // The hooked nodes, kept alive (a shared_ptr in LibTorch 1.13, an intrusive_ptr in 2.x).
  std::vector<decltype(torch::autograd::impl::grad_accumulator(std::declval<const torch::Tensor&>()))> accumulators_;
  std::shared_ptr<bool> armed_;  // hooks step only during backward_and_step
};

/// torch::optim::Adam stepped as torch.optim.Adam(fused=True, capturable=True)
/// steps it: ATen's multi-tensor kernel (`at::_fused_adam_`, one launch per
/// group instead of ~8 per parameter) with each parameter's step count and
/// each group's lr held in tensors on the parameters' device. No host scalar
/// changes from one step to the next, so the step can be captured in a CUDA
/// graph and replayed (the kernels read the step and the lr when they run).
/// Works on the optimizer's own state (exp_avg, exp_avg_sq; the host's
/// AdamParamState::step is kept equal to the device's), so checkpoints are
/// LibTorch's format and LibTorch's Adam::step may take over at any time.
/// LibTorch 2.x only (available() is false on 1.13, which has no such kernel).
class GANTRY_CORE_EXPORT DeviceAdam {
 public:
  static bool available();
  /// Why `opt` cannot be stepped so ("" when it can): not a torch::optim::Adam,
  /// amsgrad, or a parameter that is not dense float32 on one device.
  static std::string why_not(const torch::optim::Optimizer& opt);

  explicit DeviceAdam(std::shared_ptr<torch::optim::Optimizer> opt);

  /// Makes the device-side step and lr tensors of every parameter and group
  /// (from the host's state) and copies any changed lr (a schedule's) into
  /// them. step() does it itself; a captured step cannot (a copy inside the
  /// capture would replay the capture-time lr), so before capturing and
  /// before every replay, call this.
  void prepare();
  /// One Adam step of the parameters that hold a gradient; identical to
  /// torch::optim::Adam::step() up to float rounding. Does not prepare()
  /// while recording (inside a capture).
  void step();

  /// Recording: the host step counts step() advances are remembered, so that
  /// a replay of the captured step can advance them again (replayed()) and a
  /// failed capture can take them back (undo_recorded()).
  void start_recording();
  void stop_recording() { recording_ = false; }
  void replayed();
  void undo_recorded();

 private:
  struct Param {
    torch::Tensor param;
    torch::Tensor step;  // float32 scalar on the parameter's device
  };
  struct Group {
    std::vector<Param> params;
    torch::Tensor lr;  // float32 scalar on the device (a CPU group: double lr from the options)
    double lr_value = -1;
  };
  torch::optim::AdamParamState& state_of(const torch::Tensor& p);

  std::shared_ptr<torch::optim::Optimizer> opt_;
  std::vector<Group> groups_;
  bool recording_ = false;
  std::vector<torch::optim::AdamParamState*> recorded_;
};

}  // namespace gantry
