// The model gantry serve answers with: one loaded checkpoint, built through
// the one door as `gantry sample` builds it (Experiment::load_trained, EMA
// weights when the run kept them, eval mode, no autograd), its outputs
// encoded as .npy, JSON or a PNG grid; and the slot holding the served one,
// which --watch swaps whole.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "checkpoint/resolve.hpp"
#include "serve/batcher.hpp"
#include "train/experiment.hpp"

namespace gantry::serve {

/// One loaded checkpoint. The slot holds the current one; a batch holds the
/// one it ran on (the old one is freed when its last batch is answered).
class ServedModel : public BatchModel {
 public:
  /// The caller holds the slot's RNG lock: building a system draws its
  /// initial weights from the global generator, which /v1/sample seeds.
  ServedModel(const ResolvedCheckpoint& checkpoint, const std::string& plugin);

  torch::Tensor forward(const torch::Tensor& batch) override;
  std::string name() const override { return trained.experiment.system->name(); }
  PluginSystem& system() { return *trained.experiment.system; }
  int64_t step() const { return trained.saved.global_step; }

  /// The answer's body and Content-Type for `format` (npy, json, png: the
  /// system's render_samples or its data range, `rows` rows, 0: the run's
  /// trainer.grid_rows); HttpError 400 for a PNG of what is not images.
  struct Encoded {
    std::string body, type;
  };
  Encoded encode(const torch::Tensor& out, const std::string& format, int64_t rows);

  TrainedSystem trained;
  std::string checkpoint;
  std::vector<int64_t> input_shape, output_shape;  ///< of one row
  DataSpec spec;

 private:
  std::mutex forward_m_;  // --workers share one system: its forward is not assumed reentrant
};

/// The served model, swapped whole.
class ModelSlot {
 public:
  std::shared_ptr<ServedModel> current() {
    std::lock_guard lock(m_);
    return model_;
  }
  void set(std::shared_ptr<ServedModel> m) {
    std::lock_guard lock(m_);
    model_ = std::move(m);
  }
  /// Building a model and drawing sample inputs use the global generator.
  std::mutex rng;

 private:
  std::mutex m_;
  std::shared_ptr<ServedModel> model_;
};

/// The .npy bytes of a tensor (float32, C order).
std::string npy_of(const torch::Tensor& t);

}  // namespace gantry::serve
