// Whether every rank agrees to go on: any rank's stop (a signal, max_time, a
// limit) or bad metric stops all of them at the same step boundary. The
// all-reduce of step N is waited for at step N+1, so it never stalls a step:
// ranks stop one step after the request, all at the same step. A time-based
// checkpoint (checkpoint.every_n_minutes) rides along: any rank's clock
// wishes it, every rank writes it at the same batch, one after the wish.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <torch/types.h>

namespace gantry {

class ProcessGroup;

class StopAgreement {
 public:
  struct Verdict {
    bool stop = false;
    bool bad_metric = false;
    int32_t wish = 0;         ///< the largest wish code of the ranks that wished to stop (FitStop::wish_code)
    bool checkpoint = false;  ///< a rank wished a checkpoint (its clock), one batch before this verdict
  };
  /// `pg`: null in a world of one (the verdict is then this rank's own, at once).
  explicit StopAgreement(ProcessGroup* pg) : pg_(pg) {}

  /// This rank's wish after a batch (`wish`: 0 to go on, else a FitStop wish
  /// code naming the rank and why; `bad`: a NaN/Inf message, or ""); returns
  /// what all ranks agreed after the previous batch. `checkpoint`: this rank
  /// wishes a checkpoint (the next batch's verdict says whether any did).
  Verdict agree(int32_t wish, const std::string& bad, bool checkpoint = false);
  /// What the next agree() returns, waited for now: the loop learns before
  /// reading a batch's values whether the ranks agreed on a checkpoint there.
  const Verdict& previous();
  /// Waits for the last batch's agreement; throws TrainingError when a rank
  /// saw a NaN/Inf there. `step`: for the message.
  void finish(int64_t step);
  /// The first bad-metric message this rank saw ("" if none).
  const std::string& own_bad() const { return bad_; }

 private:
  ProcessGroup* pg_;
  torch::Tensor flags_;
  std::function<void()> wait_;
  Verdict previous_;  ///< the last round's, once waited for (world of one: its own)
  std::string bad_;
};

}  // namespace gantry
