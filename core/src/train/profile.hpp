// trainer.profiler: where each rank's time goes.
//
//   simple  Profile: the loop's parts (waiting for data, the training step and
//           inside it backward, the gradient all-reduce's wait, the optimizer
//           step; the metrics read and stop agreement), each callback slot and
//           each plugin hook: calls and seconds on every rank, measured with
//           the host's clock around each (no synchronisation added: on a GPU
//           a part is the host's time in it, and a wait for the device shows
//           where the host blocks). At the end one all-reduce gathers every
//           rank's table; rank 0 prints the mean, total, share of the fit and
//           the slowest rank per row, and writes it to profile.txt.
//   trace   OpProfiler: LibTorch's own profiler (Kineto, CPU and CUDA
//           activities, on 2.x; the legacy profiler on 1.13) over rank 0's
//           steps [a, b), saved as a Chrome/Perfetto JSON trace; the parts
//           above appear in it as user ranges named "gantry: <part>" (NVTX
//           ranges too on a CUDA build, for Nsight Systems).
//
// The parts are timed on every run, profiler or not (two clock reads a part,
// ~40 ns): the rank status reports them per step at every metrics row
// (dist/rank_status.hpp); `simple` adds the table at the end.
//
// The FLOP counter of the throughput callback (trainer.log_throughput) is
// OpProfiler with with_flops over one batch.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gantry/core_export.hpp"
#include "plugin/plugin_system.hpp"

namespace at {
class RecordFunction;
}

namespace gantry {

class Accelerator;

class GANTRY_CORE_EXPORT Profile {
 public:
  /// The loop's own parts; then one row per callback slot, then per plugin hook.
  enum Part : int { kData, kTrainingStep, kNextBatch, kBackward, kAllReduce, kOptimizer, kSync, kParts };

  /// Whether ranges go to an active trace (OpProfiler sets it on rank 0).
  static void set_tracing(bool on);
  static bool tracing();

  /// Counts calls and seconds of every part; `table`: the end's table too
  /// (profiler simple).
  explicit Profile(bool table) : table_(table), calls_(rows(), 0), seconds_(rows(), 0.0) {}

  /// Times one part (or one callback slot's call: callback_row) while it lives.
  class Scope {
   public:
    Scope(Profile* p, int row);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Profile* p_;
    int row_;
    std::chrono::steady_clock::time_point start_;
    std::unique_ptr<at::RecordFunction> range_;
  };

  static int callback_row(int slot) { return kParts + slot; }
  void add(int row, double seconds) {
    ++calls_[row];
    seconds_[row] += seconds;
  }
  /// Moves `seconds` already counted in `from` to `to` (calls unchanged):
  /// the gradient all-reduce's wait that Gloo's Reducer does inside
  /// backward, after the rank's last gradient.
  void shift(int from, int to, double seconds) {
    seconds_[from] -= seconds;
    seconds_[to] += seconds;
  }
  /// The seconds counted in `row` so far.
  double seconds(int row) const { return seconds_[row]; }
  bool table() const { return table_; }

  /// Collective (every rank): gathers every rank's rows, this rank's plugin
  /// hooks and fit seconds included; rank 0 gets the table, others "".
  std::string report(Accelerator& accel, const std::map<std::string, HookTime>& hooks, double fit_seconds) const;

  static const char* row_name(int row);
  static int rows();

 private:
  bool table_;
  std::vector<int64_t> calls_;
  std::vector<double> seconds_;
};

/// LibTorch's profiler over a stretch of this thread's work (and the autograd
/// and at::launch threads it starts).
class GANTRY_CORE_EXPORT OpProfiler {
 public:
  /// `flops`: count each op's FLOPs (the profiler's counter: matmuls and
  /// convolutions); `cuda`: CUDA activities too (2.x).
  OpProfiler(bool flops, bool cuda);
  ~OpProfiler();
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  struct Result {
    double flops = 0;    ///< summed over the ops recorded
    int64_t events = 0;  ///< ops and ranges recorded
  };
  /// Stops; writes the Chrome/Perfetto JSON trace to `path` unless it is "".
  Result stop(const std::string& path);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gantry
