// Every rank, metrics.quality_every_n_steps > 0: the sample-quality score
// (quality/quality.hpp) before the first batch, every n batches and after the
// last. The K samples' inputs are drawn once per score from
// metrics.quality_seed (the training's generators are left as they were);
// rank r generates and embeds its slice of them, one all-reduce adds the
// feature sums, and rank 0 writes a metrics row at that step:
//   quality_fd              Frechet distance to the real validation split's features
//   quality_class_entropy   entropy of the samples' predicted classes (ln C: all covered)
//   quality_precision, quality_recall, quality_kid
//                           on the first metrics.quality_pr_samples samples and real images
//   quality_seconds         the wall time of the score (every rank waits for it)
// The samples come from the EMA weights when ema.decay > 0, as the grids do.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "train/callback.hpp"
#include "optim/ema.hpp"
#include "quality/quality.hpp"
#include "train/run_outputs.hpp"

namespace gantry {

namespace {

class QualityCallback final : public Callback {
 public:
  explicit QualityCallback(FitState& fit)
      : opt_(fit.cfg().metrics),
        features_(opt_.quality_classifier, fit.accel.device(),
                  fit.cfg().where("metrics.quality_classifier") + ": metrics.quality_classifier") {
    features_.check_shape(fit.model.plugin_name(), fit.model.spec().shape);
    if (!fit.accel.is_zero()) return;
    std::string note;
    real_ = features_.real_stats(opt_.quality_batch_size, &note, opt_.quality_pr_samples);
    std::printf(
        "quality: every %ld steps, %ld samples against %ld real images under plugin %s (%s); "
        "real features %s\n",
        long(opt_.quality_every_n_steps), long(opt_.quality_samples), long(real_.count),
        features_.plugin_name().c_str(), features_.checkpoint().c_str(), note.c_str());
  }

  void on_fit_start(FitState& fit) override {
    if (fit.state.global_step == 0) score(fit);
  }
  void on_batch_end(FitState& fit) override {
    if (fit.state.global_step % opt_.quality_every_n_steps == 0) score(fit);
  }
  void on_train_end(FitState& fit) override {
    // Not when a signal stopped it (a preemption: the resumed run scores at
    // the steps an uninterrupted one does, and the stop is not held up).
    if (last_step_ != fit.state.global_step && !fit.stopped_by_signal()) score(fit);
  }

 private:
  void score(FitState& fit) {
    const auto start = std::chrono::steady_clock::now();
    last_step_ = fit.state.global_step;
    const int rank = fit.accel.dist().rank, world = fit.accel.dist().world_size;
    const int64_t k = opt_.quality_samples;
    const int64_t first = k * rank / world, last = k * (rank + 1) / world;
    PluginSystem& system = fit.model.system();
    FeatureStats stats;
    stats.keep = opt_.quality_pr_samples;
    {
      Model::EvalScope eval(fit.model);
      const EmaWeights::Swapped ema(fit.ema);
      {
        torch::Tensor input;
        {
          GlobalRngGuard rng(fit.accel.device());
          torch::manual_seed(static_cast<uint64_t>(opt_.quality_seed));
          // Every rank draws all K (cheap next to generating them) and keeps
          // its slice: the samples do not depend on the world size.
          input = system.sample_input(k, last_step_);
        }
        const DataSpec& spec = fit.model.spec();
        for (int64_t a = first; a < last; a += opt_.quality_batch_size) {
          const torch::Tensor z = input.slice(0, a, std::min(a + opt_.quality_batch_size, last)).to(fit.accel.device());
          const torch::Tensor images = system.forward(z, last_step_);
          features_.add(images, spec.low, spec.high, stats, opt_.quality_batch_size, a);
        }
      }
    }
    stats.allreduce(fit.accel);
    if (!fit.out) return;
    const double fd = frechet_distance(stats, real_);
    const double entropy = stats.class_entropy();
    Values row{{"quality_fd", fd}, {"quality_class_entropy", entropy}};
    char more[96] = "";
    // Precision, recall and KID on the first M of both sides (M: the fewer of
    // quality_pr_samples, the samples, the real images; more than k = 3).
    const int64_t m = std::min({opt_.quality_pr_samples, stats.count, real_.count});
    if (m > 3) {
      const torch::Tensor real = real_.kept_features().slice(0, 0, m), fake = stats.kept_features().slice(0, 0, m);
      const PrecisionRecall pr = precision_recall(real, fake);
      const double kid = kernel_distance(real, fake);
      row.insert(row.end(), {{"quality_precision", pr.precision}, {"quality_recall", pr.recall}, {"quality_kid", kid}});
      std::snprintf(more, sizeof more, ", precision %.3f, recall %.3f, KID %.4f", pr.precision, pr.recall, kid);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    row.emplace_back("quality_seconds", seconds);
    fit.out->scalars(last_step_, fit.state.epoch, "score", row);
    char text[300];
    std::snprintf(text, sizeof text, "quality at step %ld: FD %.3f, class entropy %.3f of %.3f%s, %.1f s%s",
                  long(last_step_), fd, entropy, std::log(double(real_.classes.size(0))), more, seconds,
                  fit.ema ? " (EMA weights)" : "");
    fit.out->progress().message(text);
  }

  MetricsOptions opt_;
  FeatureModel features_;
  FeatureStats real_;  // rank 0
  int64_t last_step_ = -1;
};

}  // namespace

std::unique_ptr<Callback> quality_callback(CallbackSetup& setup) {
  if (setup.fit.cfg().metrics.quality_every_n_steps <= 0) return nullptr;
  return std::make_unique<QualityCallback>(setup.fit);
}

}  // namespace gantry
