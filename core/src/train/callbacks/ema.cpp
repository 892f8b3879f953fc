// Every rank, when ema.decay > 0: the EMA shadows updated after every batch
// and kept in the checkpoint (their trainer_state entries share the shadows'
// storage); rank 0's sample grids are drawn with the EMA weights swapped in.
#include "train/callback.hpp"
#include "train/ema.hpp"

namespace gantry {

namespace {

class EmaCallback final : public Callback {
 public:
  explicit EmaCallback(FitState& fit)
      : ema_(fit.cfg().ema, fit.model.modules(), fit.state.extra, fit.cfg().where("ema.modules")) {
    for (const auto& [key, t] : ema_.state()) fit.state.extra[key] = t;
    fit.ema = &ema_;
  }
  void on_batch_end(FitState&) override { ema_.update(); }

 private:
  EmaWeights ema_;
};

}  // namespace

std::unique_ptr<Callback> ema_callback(FitState& fit) { return std::make_unique<EmaCallback>(fit); }

}  // namespace gantry
