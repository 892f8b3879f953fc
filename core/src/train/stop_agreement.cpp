#include "train/stop_agreement.hpp"

#include <torch/torch.h>

#include "gantry/errors.hpp"
#include "distributed/distributed.hpp"

namespace gantry {

StopAgreement::Verdict StopAgreement::agree(int32_t wish, const std::string& bad) {
  if (!pg_) {
    if (bad_.empty()) bad_ = bad;
    return {wish != 0, !bad.empty(), wish};
  }
  Verdict v;
  if (wait_) {
    wait_();
    v = {flags_[0].item<int>() != 0, flags_[1].item<int>() != 0, flags_[2].item<int32_t>()};
  }
  if (v.bad_metric) return v;
  // The maximum of each: any rank's stop, any rank's NaN, and of the wishes
  // the one with the largest code (a signal over max_time over max_steps).
  flags_ = torch::tensor({wish != 0 ? 1 : 0, bad.empty() ? 0 : 1, wish}, torch::kInt32);
  wait_ = pg_->allreduce_max_async(flags_);
  if (bad_.empty()) bad_ = bad;
  return v;
}

void StopAgreement::finish(int64_t step) {
  if (!wait_) return;
  wait_();
  wait_ = nullptr;
  if (flags_[1].item<int>() != 0)
    throw TrainingError(
        !bad_.empty() ? bad_ : "step " + std::to_string(step) + ": another rank logged a NaN/Inf metric; stopping");
}

}  // namespace gantry
