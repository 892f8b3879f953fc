// Per-rank status: rank, host, step, samples/s, memory, CPU, where the rank's
// time went per step (waiting for data, compute, waiting in collectives, the
// optimizer, callbacks) and, on a CUDA rank, its GPU (NVML). At each metrics
// row every rank's record (a wire::RankStatus frame) is gathered to rank 0 in
// one collective (one message from each rank); rank 0 flags stragglers,
// writes ranks.csv, TensorBoard's ranks/ scalars and streams them. One job:
// the trainer only says when (at the same steps on every rank).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gantry/core_export.hpp"
#include "wire/message.hpp"

namespace gantry {

class ProcessGroup;
class RunStream;
class GpuProbe;

/// Seconds this rank spent in each part of the loop since the fit started
/// (train/profile.hpp's parts, summed as they nest).
struct StepParts {
  double data = 0;           ///< waiting for the next batch (the loader and ctx.next_batch)
  double training_step = 0;  ///< the plugin's training_step, everything below included
  double next_batch = 0;     ///< in training_step: ctx.next_batch's waits
  double all_reduce = 0;     ///< in training_step: the gradient all-reduce's wait
  double optimizer = 0;      ///< in training_step: the optimizer steps
  double sync = 0;           ///< after it: the metrics read and the stop agreement
};

/// Rank 0's straggler watch: a rank whose busy time per step (its step minus
/// its waits in collectives) is more than `factor` x the median of the other
/// ranks' for `intervals` statuses in a row is a straggler until it is not.
/// In a synchronous job every rank's step takes as long as the slowest's, so
/// the step time cannot say who: the waits do (the slow rank waits least).
/// Or, with 4 ranks or more, a rank the others wait for at the shared-memory
/// exchanges (last_pct above 60% and 3/N) for as many statuses: a rank frozen
/// inside a collective counts its frozen time as waiting, its arrivals tell.
class GANTRY_CORE_EXPORT StragglerWatch {
 public:
  StragglerWatch(double factor, int64_t intervals) : factor_(factor), intervals_(intervals) {}
  /// Marks `all` (every rank's status at `step`)'s stragglers and returns the
  /// lines to report: a rank (or every rank of a host, as the host) that
  /// became one, or stopped being one.
  std::vector<std::string> update(std::vector<wire::RankStatus>& all, int64_t step);
  /// Marks `all`'s stragglers as the last update found them.
  void mark(std::vector<wire::RankStatus>& all) const;
  /// The end's summary: every rank that was a straggler, or "none".
  std::string summary() const;

 private:
  struct Seen {
    int64_t run = 0;       ///< statuses in a row above the factor
    bool flagged = false;  ///< said so
    int64_t since = -1;    ///< the step it was first flagged at
    int64_t until = -1;    ///< the step it stopped being one (-1: still one)
    double worst = 0;      ///< the largest ratio while flagged
    std::string host, part;
  };
  double factor_;
  int64_t intervals_;
  std::map<uint32_t, Seen> seen_;
};

class RankStatusReporter {
 public:
  /// `pg`: null in a world of one. `stream` and `run_dir`: rank 0's (null and
  /// "" elsewhere). `gpu`: the rank's GPU (null: none). All must outlive the
  /// reporter. `straggler_factor` 0: no straggler watch.
  RankStatusReporter(int rank, ProcessGroup* pg, RunStream* stream, std::string run_dir, GpuProbe* gpu = nullptr,
                     double straggler_factor = 0, int64_t straggler_intervals = 3);
  ~RankStatusReporter();

  /// Measures this rank's status at `step` (samples/s and the parts per step
  /// since the previous report, at `batch_size` per step; `parts`: the
  /// loop's cumulative times, null when not timed) and gathers every rank's
  /// to rank 0 (a collective: every rank calls it); with `write`, rank 0
  /// then flags stragglers and writes them.
  void report(int64_t step, int64_t batch_size, const StepParts* parts, bool write = true);
  /// Rank 0: ranks.csv, TensorBoard, a RankStatus message per rank, from the
  /// last gathered statuses. Elsewhere: nothing.
  void write();
  /// Rank 0, the end: the straggler summary line ("" with one rank or no watch).
  std::string straggler_summary() const;

 private:
  int rank_;
  ProcessGroup* pg_;
  RunStream* stream_;
  std::string run_dir_;
  GpuProbe* gpu_;
  std::unique_ptr<StragglerWatch> watch_;
  wire::RankStatus own_;
  std::vector<std::string> gathered_;  // rank 0: every rank's last record
  std::chrono::steady_clock::time_point last_time_ = std::chrono::steady_clock::now();
  double last_cpu_ = -1;
  StepParts last_parts_;
  uint64_t last_entered_ = 0, last_reached_last_ = 0;  // ShmAllreduce's counts at the previous report
  double gather_wait_ = 0;  // the previous report's gather (a wait for the others): counted as comm next time
  int64_t last_step_ = -1;
  int64_t written_step_ = -1;  // rank 0: the step whose statuses were watched last
  double rate_ = 0;
};

}  // namespace gantry
