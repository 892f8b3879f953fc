// Every rank: after every trainer.val_every_n_epochs-th epoch, every
// trainer.val_every_n_steps batches, and at the end of a run that ended
// between them (not when a signal stopped it: a requeue should be quick), the
// plugin's on_validation_start, validation_step over this rank's shard of the
// validation split and on_validation_end (modules in eval mode, no grad; the
// trained weights, or the EMA's with ema.for_validation); each value reduced
// over every rank's shard as ctx.log asked (the default: the sample-weighted
// mean; a value of on_validation_end counts once per rank) is rank 0's
// metrics row (kind val), streamed and printed. A step validates once.
#include <algorithm>
#include <limits>
#include <map>

#include <torch/torch.h>

#include "gantry/errors.hpp"

#include "distributed/distributed.hpp"
#include "optim/ema.hpp"
#include "train/callback.hpp"
#include "train/run_outputs.hpp"

namespace gantry {

namespace {

class ValidationCallback final : public Callback {
 public:
  explicit ValidationCallback(std::unique_ptr<DataLoader> loader) : loader_(std::move(loader)) {}

  void on_batch_end(FitState& fit) override {
    ran_ = true;
    const int64_t n = fit.cfg().trainer.val_every_n_steps;
    if (n > 0 && fit.state.global_step % n == 0) validate(fit);
  }
  void on_epoch_end(FitState& fit) override {
    const int64_t every = fit.cfg().trainer.val_every_n_epochs;
    if (every > 0 && (fit.state.epoch + 1) % every == 0) validate(fit);
  }
  void on_train_end(FitState& fit) override {
    // The ranks' agreed wish, the same on each: they all validate, or none.
    // Nor at a pause (trainer.pause_at_step): the run goes on from here.
    if (ran_ && !fit.stopped_by_signal() && !fit.paused) validate(fit);
  }

 private:
  void validate(FitState& fit) {
    if (fit.state.global_step == last_step_) return;
    last_step_ = fit.state.global_step;
    fit.accel.broadcast(fit.model.buffers());
    // Each value reduced as ctx.log asked (Reduce): kMean the sample-weighted
    // mean, kSum the sum over batches, kMax / kMin, kLast the last batch's
    // (rank 0's, over ranks).
    struct Acc {
      Reduce reduce = Reduce::kMean;
      double sum = 0, extreme = 0, last = 0;
      int64_t n = 0;
    };
    std::map<std::string, Acc> acc;
    std::vector<std::string> order;
    {
      Model::EvalScope eval(fit.model);
      const EmaWeights::Swapped ema(fit.cfg().ema.for_validation ? fit.ema : nullptr);  // ema.for_validation
      loader_->start_epoch(0);
      const std::vector<LoggedValue> at_start = fit.model.validation_hook(true, fit.state);
      auto add = [&](const LoggedValue& v, int64_t rows) {
        if (!acc.count(v.name)) {
          order.push_back(v.name);
          acc[v.name].reduce = v.reduce;
        }
        Acc& a = acc[v.name];
        if (a.reduce != v.reduce)
          throw TrainingError("validation at epoch " + std::to_string(fit.state.epoch) + ": validation_step logged '" +
                              v.name + "' with two reductions (Reduce " + std::to_string(uint32_t(a.reduce)) +
                              ", then " + std::to_string(uint32_t(v.reduce)) + ")");
        const double x = v.value.item<double>();
        if (a.reduce == Reduce::kMean) {
          a.sum += x * double(rows);
          a.n += rows;
          return;
        }
        a.sum += x;
        a.extreme = a.n == 0 ? x : a.reduce == Reduce::kMax ? std::max(a.extreme, x) : std::min(a.extreme, x);
        a.last = x;
        ++a.n;
      };
      for (const auto& v : at_start) add(v, 1);
      while (auto batch = loader_->next())
        for (const auto& v : fit.model.validation_step(*batch, fit.state)) add(v, batch->input.size(0));
      for (const auto& v : fit.model.validation_hook(false, fit.state)) add(v, 1);
    }
    // Over the whole split: every rank's sums and counts added, extremes by
    // a max all-reduce (the shards are padded to equal length, as
    // DistributedSampler does, so a few samples may count twice when the
    // split does not divide by the world size).
    if (ProcessGroup* pg = fit.accel.group()) {
      const int world = fit.accel.dist().world_size;
      torch::Tensor k = torch::tensor({double(order.size())}, torch::kFloat64);
      fit.accel.allreduce_sum(k);
      if (k.item<double>() != double(order.size()) * world)
        throw TrainingError("validation at epoch " + std::to_string(fit.state.epoch) +
                            ": validation_step logged different values on different ranks");
      if (!order.empty()) {
        std::vector<double> sums, maxes;
        for (const auto& name : order) {
          const Acc& a = acc[name];
          sums.push_back(a.sum);
          sums.push_back(double(a.n));
          const double lowest = -std::numeric_limits<double>::infinity();
          maxes.push_back(a.reduce == Reduce::kMax    ? a.extreme
                          : a.reduce == Reduce::kMin  ? -a.extreme
                          : a.reduce == Reduce::kLast ? (fit.accel.is_zero() ? a.last : lowest)
                                                      : lowest);
        }
        torch::Tensor s = torch::tensor(sums, torch::kFloat64), m = torch::tensor(maxes, torch::kFloat64);
        fit.accel.allreduce_sum(s);
        pg->allreduce_max(m);
        for (size_t i = 0; i < order.size(); ++i) {
          Acc& a = acc[order[i]];
          a.sum = s[2 * i].item<double>();
          a.n = int64_t(s[2 * i + 1].item<double>());
          a.extreme = a.reduce == Reduce::kMin ? -m[i].item<double>() : m[i].item<double>();
          a.last = m[i].item<double>();
        }
      }
    }
    if (order.empty() || !fit.out) return;
    Values row;
    for (const auto& name : order) {
      const Acc& a = acc[name];
      switch (a.reduce) {
        case Reduce::kSum:
          row.emplace_back(name, a.sum);
          break;
        case Reduce::kMax:
        case Reduce::kMin:
          row.emplace_back(name, a.extreme);
          break;
        case Reduce::kLast:
          row.emplace_back(name, a.last);
          break;
        default:
          row.emplace_back(name, a.n > 0 ? a.sum / double(a.n) : 0.0);
      }
    }
    fit.out->scalars(fit.state.global_step, fit.state.epoch, "val", row);
    std::string text = "validation at step " + std::to_string(fit.state.global_step) + " (epoch " +
                       std::to_string(fit.state.epoch) + "):";
    for (const auto& [n, v] : row) text += " " + n + " " + std::to_string(v);
    fit.out->progress().message(text);
  }

  std::unique_ptr<DataLoader> loader_;
  bool ran_ = false;        // a batch ran in this fit (a resumed run already at its end validates nothing)
  int64_t last_step_ = -1;  // the step validated last
};

}  // namespace

std::unique_ptr<Callback> validation_callback(CallbackSetup& setup) {
  if (!setup.val_loader) return nullptr;
  return std::make_unique<ValidationCallback>(std::move(setup.val_loader));
}

}  // namespace gantry
