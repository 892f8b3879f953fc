// What rank 0 writes about a run, in one place: metrics.csv, the run stream
// (run log, TensorBoard files, the live server for the monitor), sample grids
// under images/, and the progress display. Callbacks write through it; the
// loop opens it (RunInfo first) and closes it (the final event).
#pragma once

#include <memory>
#include <string>

#include "io/metrics_csv.hpp"
#include "io/progress.hpp"
#include "io/run_stream.hpp"
#include "train/callback.hpp"

namespace gantry {

class RunOutputs {
 public:
  /// Opens metrics.csv (dropping rows after a resumed step), the stream (and
  /// its server when monitor.enabled: monitor.txt, "monitor:" line) and sends
  /// RunInfo (+ a "resumed" event).
  RunOutputs(const FitState& fit, int64_t batch_size_all_ranks);
  ~RunOutputs();
  RunOutputs(const RunOutputs&) = delete;
  RunOutputs& operator=(const RunOutputs&) = delete;

  /// One metrics.csv row + stream scalars.
  void scalars(int64_t step, int64_t epoch, const Values& values);
  /// images [N, C, H, W] in [low, high] (low > high: the data's range) ->
  /// images/<tag>_<step>.png + stream.
  void image(const std::string& tag, int64_t step, const torch::Tensor& images, double low, double high);
  void event(const std::string& kind, int64_t step, const std::string& text);
  /// metrics.csv to the OS.
  void flush_metrics() { metrics_.flush(); }
  /// Everything to the OS (the end, or a failure).
  void flush();

  Progress& progress() { return progress_; }
  RunStream& stream() { return stream_; }

 private:
  const Model& model_;
  std::string run_dir_;
  MetricsCsv metrics_;
  RunStream stream_;
  Progress progress_;
};

}  // namespace gantry
