// What rank 0 writes about a run, in one place: metrics.csv, the run stream
// (run log, TensorBoard files, the live server for the monitor), sample grids
// under images/, and the progress display. Callbacks write through it; the
// loop opens it (RunInfo first) and closes it (the final event).
#pragma once

#include <map>
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

  /// One metrics.csv row of `kind` (train, val, score) + stream scalars.
  void scalars(int64_t step, int64_t epoch, const std::string& kind, const Values& values);
  /// images [N, C, H, W] in [low, high] (low > high: the data's range) ->
  /// images/<tag>_<step>.png + stream.
  void image(const std::string& tag, int64_t step, const torch::Tensor& images, double low, double high);
  void event(const std::string& kind, int64_t step, const std::string& text);
  /// metrics.csv to the OS, and its column order into `state` (a resume,
  /// also into a new run directory, keeps it).
  void flush_metrics(TrainState& state);
  /// Everything to the OS (the end, or a failure).
  void flush();

  /// The newest value of a metric in any row (training, validation,
  /// score), `seq` growing with every row that holds it (0: none yet).
  struct Latest {
    uint64_t seq = 0;
    int64_t step = 0;
    double value = 0;
  };
  Latest latest(const std::string& name) const {
    const auto it = latest_.find(name);
    return it == latest_.end() ? Latest{} : it->second;
  }

  /// Every metric name a row held so far.
  std::vector<std::string> logged_names() const {
    std::vector<std::string> out;
    for (const auto& [name, l] : latest_) out.push_back(name);
    return out;
  }

  Progress& progress() { return progress_; }
  RunStream& stream() { return stream_; }

 private:
  const Model& model_;
  std::string run_dir_;
  int64_t grid_rows_;  // trainer.grid_rows
  MetricsCsv metrics_;
  RunStream stream_;
  Progress progress_;
  std::map<std::string, Latest> latest_;
  uint64_t rows_ = 0;
};

}  // namespace gantry
