// Every rank: after every trainer.val_every_n_epochs-th epoch, the plugin's
// validation_step over this rank's shard of the validation split (modules in
// eval mode, no grad); the sample-weighted mean of each value over every
// rank's shard is rank 0's metrics row, streamed and printed.
#include <map>

#include <torch/torch.h>

#include "config/errors.hpp"

#include "train/callback.hpp"
#include "train/run_outputs.hpp"

namespace gantry {

namespace {

class ValidationCallback final : public Callback {
 public:
  explicit ValidationCallback(std::unique_ptr<DataLoader> loader) : loader_(std::move(loader)) {}

  void on_epoch_end(FitState& fit) override {
    const int64_t every = fit.cfg().trainer.val_every_n_epochs;
    if (every <= 0 || (fit.state.epoch + 1) % every != 0) return;
    fit.accel.broadcast(fit.model.buffers());
    std::map<std::string, std::pair<double, int64_t>> sums;
    std::vector<std::string> order;
    {
      Model::EvalScope eval(fit.model);
      loader_->start_epoch(0);
      while (auto batch = loader_->next()) {
        for (const auto& v : fit.model.validation_step(*batch, fit.state)) {
          if (!sums.count(v.name)) order.push_back(v.name);
          auto& s = sums[v.name];
          s.first += v.value.item<double>() * batch->input.size(0);
          s.second += batch->input.size(0);
        }
      }
    }
    // Over the whole split: every rank's sums and counts added (the shards are
    // padded to equal length, as DistributedSampler does, so a few samples
    // may count twice when the split does not divide by the world size).
    if (fit.accel.group()) {
      const int world = fit.accel.dist().world_size;
      torch::Tensor k = torch::tensor({double(order.size())}, torch::kFloat64);
      fit.accel.allreduce_sum(k);
      if (k.item<double>() != double(order.size()) * world)
        throw TrainingError("validation at epoch " + std::to_string(fit.state.epoch) +
                            ": validation_step logged different values on different ranks");
      std::vector<double> flat;
      for (const auto& name : order) {
        flat.push_back(sums[name].first);
        flat.push_back(double(sums[name].second));
      }
      if (!flat.empty()) {
        torch::Tensor t = torch::tensor(flat, torch::kFloat64);
        fit.accel.allreduce_sum(t);
        for (size_t i = 0; i < order.size(); ++i)
          sums[order[i]] = {t[2 * i].item<double>(), int64_t(t[2 * i + 1].item<double>())};
      }
    }
    if (order.empty() || !fit.out) return;
    Values row;
    for (const auto& name : order) row.emplace_back(name, sums[name].first / sums[name].second);
    fit.out->scalars(fit.state.global_step, fit.state.epoch, row);
    std::string text = "validation, epoch " + std::to_string(fit.state.epoch) + ":";
    for (const auto& [n, v] : row) text += " " + n + " " + std::to_string(v);
    fit.out->progress().message(text);
  }

 private:
  std::unique_ptr<DataLoader> loader_;
};

}  // namespace

std::unique_ptr<Callback> validation_callback(std::unique_ptr<DataLoader> val) {
  return std::make_unique<ValidationCallback>(std::move(val));
}

}  // namespace gantry
