// Every rank: after every trainer.val_every_n_epochs-th epoch, the plugin's
// validation_step over this rank's shard of the validation split (modules in
// eval mode, no grad); rank 0 writes the sample-weighted mean of each value
// as a metrics row, streams it and prints it.
#include <map>

#include "train/callback.hpp"
#include "train/run_outputs.hpp"

namespace gantry {

namespace {

class ValidationCallback final : public Callback {
 public:
  ValidationCallback(const ImageDataset& val, const LoaderOptions& options) : loader_(val, options) {}

  void on_epoch_end(FitState& fit) override {
    const int64_t every = fit.cfg().trainer.val_every_n_epochs;
    if (every <= 0 || (fit.state.epoch + 1) % every != 0) return;
    fit.accel.broadcast(fit.model.buffers());
    std::map<std::string, std::pair<double, int64_t>> sums;
    std::vector<std::string> order;
    {
      Model::EvalScope eval(fit.model);
      loader_.start_epoch(0);
      while (auto batch = loader_.next()) {
        for (const auto& v : fit.model.validation_step(*batch, fit.state)) {
          if (!sums.count(v.name)) order.push_back(v.name);
          auto& s = sums[v.name];
          s.first += v.value.item<double>() * batch->input.size(0);
          s.second += batch->input.size(0);
        }
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
  DataLoader loader_;
};

}  // namespace

std::unique_ptr<Callback> validation_callback(const ImageDataset& val, const LoaderOptions& options) {
  return std::make_unique<ValidationCallback>(val, options);
}

}  // namespace gantry
