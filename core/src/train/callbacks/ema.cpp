// Every rank, when ema.decay > 0: the EMA shadows (the trainer's, in
// FitState::ema; their trainer_state entries share the shadows' storage, so
// the checkpoint keeps them) updated after every batch, in the first slot.
#include "train/callback.hpp"
#include "optim/ema.hpp"

namespace gantry {

namespace {

class EmaCallback final : public Callback {
 public:
  void on_batch_end(FitState& fit) override { fit.ema->update(fit.state.global_step); }
};

}  // namespace

std::unique_ptr<Callback> ema_callback() { return std::make_unique<EmaCallback>(); }

}  // namespace gantry
