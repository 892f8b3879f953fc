// Every rank: trainer.accumulate_grad_batches across a checkpoint. An
// optimizer between two steps holds the gradients summed over its last
// micro batches; they are this callback's state ("accumulate.<optimizer>.*",
// averaged over the ranks first: Model::accumulation_state, a collective),
// and a resume puts them back before its first batch, so it steps where the
// uninterrupted run would, with the same sums.
#include "train/callback.hpp"
#include "train/model.hpp"

namespace gantry {

namespace {

class AccumulationCallback final : public Callback {
 public:
  std::vector<std::string> state_keys() const override { return {Model::kAccumulationPrefix}; }
  TensorMap state(FitState& fit) override { return fit.model.accumulation_state(); }
  void load(FitState& fit, const TensorMap& saved) override { fit.model.restore_accumulation(saved); }
};

}  // namespace

// Always (every rank alike): a resumed run's sums, even under another
// accumulate_grad_batches, are put back or dropped, never carried on stale.
std::unique_ptr<Callback> accumulation_callback(CallbackSetup&) { return std::make_unique<AccumulationCallback>(); }

}  // namespace gantry
