// Every rank, when ema.decay > 0: the EMA shadows (the trainer's, in
// FitState::ema, read from the resumed checkpoint when it built them)
// updated after every batch, in the first slot; its state is the shadows
// ("ema.<module>.<name>").
#include "train/callback.hpp"
#include "optim/ema.hpp"

namespace gantry {

namespace {

class EmaCallback final : public Callback {
 public:
  void on_batch_end(FitState& fit) override { fit.ema->update(fit.state.global_step); }
  std::vector<std::string> state_keys() const override { return {EmaWeights::kPrefix}; }
  TensorMap state(FitState& fit) override { return fit.ema->state(); }
};

}  // namespace

std::unique_ptr<Callback> ema_callback(CallbackSetup& setup) {
  return setup.fit.ema ? std::make_unique<EmaCallback>() : nullptr;
}

}  // namespace gantry
