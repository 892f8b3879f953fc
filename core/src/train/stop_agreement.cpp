#include "train/stop_agreement.hpp"

#include <torch/torch.h>

#include "gantry/errors.hpp"
#include "distributed/distributed.hpp"

namespace gantry {

const StopAgreement::Verdict& StopAgreement::previous() {
  if (wait_) {
    wait_();
    wait_ = nullptr;
    previous_ = {flags_[0].item<int>() != 0, flags_[1].item<int>() != 0, flags_[2].item<int32_t>(),
                 flags_[3].item<int>() != 0};
  }
  return previous_;
}

StopAgreement::Verdict StopAgreement::agree(int32_t wish, const std::string& bad, bool checkpoint) {
  if (!pg_) {  // this rank's own stop at once; its checkpoint wish a batch later, as with many
    if (bad_.empty()) bad_ = bad;
    const bool due = previous_.checkpoint;
    previous_ = {wish != 0, !bad.empty(), wish, checkpoint};
    return {wish != 0, !bad.empty(), wish, due};
  }
  const Verdict v = previous();
  previous_ = {};  // consumed: the next round's comes from its own all-reduce
  if (v.bad_metric) return v;
  // The maximum of each: any rank's stop, any rank's NaN, of the wishes the
  // one with the largest code (a signal over max_time over max_steps), and
  // any rank's checkpoint wish.
  flags_ = torch::tensor({wish != 0 ? 1 : 0, bad.empty() ? 0 : 1, wish, checkpoint ? 1 : 0}, torch::kInt32);
  wait_ = pg_->allreduce_max_async(flags_);
  if (bad_.empty()) bad_ = bad;
  return v;
}

void StopAgreement::finish(int64_t step) {
  if (!wait_) return;
  if (previous().bad_metric)
    throw TrainingError(
        !bad_.empty() ? bad_ : "step " + std::to_string(step) + ": another rank logged a NaN/Inf metric; stopping");
}

}  // namespace gantry
