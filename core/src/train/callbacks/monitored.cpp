// Every rank, checkpoint.monitor or early_stopping.monitor set: Lightning's
// ModelCheckpoint(monitor=...) and EarlyStopping, decided alike on every rank
// by construction. A monitored metric's value exists on rank 0 (its rows);
// whenever a row can have been written (a log step, a validation or score
// step, an epoch's end, the end) rank 0 broadcasts the newest value of each
// monitored metric and whether it is new, and every rank then runs the same
// bookkeeping on the same numbers: the same checkpoints written (a
// collective: each rank's RNG state goes into the file) and the same stop
// (FitState::stop_now, read by the loop after the batch). Lightning's users
// hit hangs where a rank decided on its own value (#10947, #11267, #19045).
//
// The best checkpoints: checkpoints/best_step_<step>.ckpt, the save_top_k
// best (a tie keeps the earlier, NaN never counts), best.ckpt a link to the
// best; the kept set is in trainer_state ("best.steps", "best.values"), so
// a resume keeps pruning the same set. Early stopping's state ("early.best",
// "early.best_step", "early.wait") is there too: a resume with a larger
// patience continues past the stop.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>

#include "checkpoint/names.hpp"
#include "train/callback.hpp"
#include "train/run_outputs.hpp"

namespace fs = std::filesystem;

namespace gantry {

namespace {

constexpr const char* kBestSteps = ckpt::kBestStepsKey;
constexpr const char* kBestValues = ckpt::kBestValuesKey;
constexpr const char* kEarlyBest = "early.best";
constexpr const char* kEarlyBestStep = "early.best_step";
constexpr const char* kEarlyWait = "early.wait";

// `a` better than `b` under `mode` (strictly).
bool better(double a, double b, MonitorMode mode) { return mode == MonitorMode::kMin ? a < b : a > b; }

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

class MonitoredCallback final : public Callback {
 public:
  explicit MonitoredCallback(FitState& fit) {
    const auto& c = fit.cfg();
    names_ = {c.checkpoint.monitor, c.early_stopping.monitor};
    seen_.assign(names_.size(), 0);
  }

  // What it does not monitor now is carried on as it was (a later resume may monitor it again).
  std::vector<std::string> state_keys() const override {
    std::vector<std::string> keys;
    if (!names_[0].empty()) keys.push_back("best.");
    if (!names_[1].empty()) keys.push_back("early.");
    return keys;
  }
  void load(FitState&, const TensorMap& x) override {
    if (x.count(kBestSteps) && x.count(kBestValues)) {  // resumed: the kept set
      const torch::Tensor s = x.at(kBestSteps).to(torch::kInt64), v = x.at(kBestValues).to(torch::kFloat64);
      for (int64_t i = 0; i < s.numel() && i < v.numel(); ++i)
        kept_.push_back({s[i].item<int64_t>(), v[i].item<double>()});
    }
    if (x.count(kEarlyBest)) {
      early_best_ = x.at(kEarlyBest).item<double>();
      early_best_step_ = x.at(kEarlyBestStep).item<int64_t>();
      early_wait_ = x.at(kEarlyWait).item<int64_t>();
      have_early_best_ = std::isfinite(early_best_);
    }
  }

  void on_batch_end(FitState& fit) override {
    const auto& c = fit.cfg();
    const int64_t step = fit.state.global_step;
    auto every = [&](int64_t n) { return n > 0 && step % n == 0; };
    // A validation or score row of this step (their callbacks run before this one).
    if (every(c.trainer.val_every_n_steps) || every(c.metrics.quality_every_n_steps)) check(fit);
  }
  void on_fit_start(FitState& fit) override { check(fit); }  // a fresh run's score before step 1
  void on_log_step(FitState& fit) override { check(fit); }
  void on_epoch_end(FitState& fit) override { check(fit); }
  void on_train_end(FitState& fit) override { check(fit); }
  void on_fit_end(FitState& fit) override {
    check(fit);  // the end's training row
    if (!fit.out) return;
    const char* keys[] = {"checkpoint.monitor", "early_stopping.monitor"};
    for (size_t i = 0; i < names_.size(); ++i)
      if (!names_[i].empty() && fit.out->latest(names_[i]).seq == 0) {
        std::string logged;
        for (const auto& n : fit.out->logged_names()) logged += (logged.empty() ? "" : ", ") + n;
        std::printf("%s: %s was never logged, so it decided nothing (logged: %s)\n", keys[i], names_[i].c_str(),
                    logged.c_str());
      }
    if (kept_.empty()) return;
    const Kept& best = kept_.front();
    std::printf("best: %s %s at step %ld (checkpoints/best.ckpt)\n", names_[0].c_str(), number(best.value).c_str(),
                long(best.step));
  }

 private:
  struct Kept {
    int64_t step;
    double value;
  };

  // Rank 0's newest value of each monitored metric, to every rank; then the
  // same decisions everywhere.
  void check(FitState& fit) {
    torch::Tensor t = torch::zeros({int64_t(3 * names_.size())}, torch::kFloat64);
    if (fit.out) {
      for (size_t i = 0; i < names_.size(); ++i) {
        if (names_[i].empty()) continue;
        const RunOutputs::Latest l = fit.out->latest(names_[i]);
        if (l.seq == 0 || l.seq == seen_[i]) continue;
        seen_[i] = l.seq;
        t[3 * i] = 1;
        t[3 * i + 1] = l.value;
        t[3 * i + 2] = double(l.step);
      }
    }
    if (fit.accel.group()) {
      torch::Tensor on_device = t.to(fit.accel.device());
      fit.accel.broadcast({on_device});
      t = on_device.cpu();
    }
    const auto* v = t.data_ptr<double>();
    if (v[0] > 0) top_k(fit, v[1], int64_t(v[2]));
    if (v[3] > 0) early_stop(fit, v[4], int64_t(v[5]));
  }

  void top_k(FitState& fit, double value, int64_t step) {
    const CheckpointOptions& o = fit.cfg().checkpoint;
    if (std::isnan(value)) {
      if (fit.out)
        std::printf("checkpoint.monitor: %s is NaN at step %ld: not a best checkpoint\n", o.monitor.c_str(),
                    long(step));
      return;
    }
    if (o.save_top_k == 0) return;
    for (const Kept& k : kept_)
      if (k.step == step) return;  // this step's checkpoint is kept already (a value checked twice)
    // kept_ best first; a tie keeps the earlier step (a new value must be strictly better).
    size_t at = 0;
    while (at < kept_.size() && !better(value, kept_[at].value, o.mode)) ++at;
    const size_t k = o.save_top_k < 0 ? SIZE_MAX : size_t(o.save_top_k);
    if (at >= k) return;
    kept_.insert(kept_.begin() + long(at), {step, value});
    std::vector<Kept> dropped;
    while (kept_.size() > k) {
      dropped.push_back(kept_.back());
      kept_.pop_back();
    }
    write_checkpoint(fit, ckpt::best_file(step));
    if (!fit.out) return;
    const fs::path dir = fs::path(fit.run_dir) / ckpt::kFolder;
    std::error_code ec;
    for (const Kept& d : dropped) fs::remove(dir / ckpt::best_file(d.step), ec);
    if (const std::string failed = ckpt::link_best(dir.string(), kept_.front().step); !failed.empty())
      std::printf("checkpoint.monitor: cannot link best.ckpt: %s\n", failed.c_str());
    std::printf("checkpoint.monitor: %s %s at step %ld is #%zu of the best %s\n", fit.cfg().checkpoint.monitor.c_str(),
                number(value).c_str(), long(step), at + 1,
                o.save_top_k < 0 ? "(all kept)" : std::to_string(o.save_top_k).c_str());
  }

  void early_stop(FitState& fit, double value, int64_t step) {
    const EarlyStoppingOptions& o = fit.cfg().early_stopping;
    const std::string& m = o.monitor;
    std::string why;
    if (!std::isfinite(value)) {
      if (o.check_finite) why = m + " is " + number(value) + " at step " + std::to_string(step);
    } else if (!o.stopping_threshold.empty() && !better(std::stod(o.stopping_threshold), value, o.mode)) {
      why = m + " " + number(value) + " reached early_stopping.stopping_threshold " + o.stopping_threshold +
            " at step " + std::to_string(step);
    } else if (!o.divergence_threshold.empty() && better(std::stod(o.divergence_threshold), value, o.mode)) {
      why = m + " " + number(value) + " is beyond early_stopping.divergence_threshold " + o.divergence_threshold +
            " at step " + std::to_string(step);
    } else {
      const double delta = o.mode == MonitorMode::kMin ? -o.min_delta : o.min_delta;
      if (!have_early_best_ || better(value, early_best_ + delta, o.mode)) {
        early_best_ = value;
        early_best_step_ = step;
        early_wait_ = 0;
        have_early_best_ = true;
      } else if (++early_wait_ >= o.patience) {
        why = m + " did not improve by " + number(o.min_delta) + " for " + std::to_string(early_wait_) +
              " checks (best " + number(early_best_) + " at step " + std::to_string(early_best_step_) + ")";
      }
    }
    if (!why.empty() && fit.stop_now.empty()) fit.stop_now = "early stopping: " + why;
  }

  // The state a checkpoint carries (every rank alike).
  TensorMap state(FitState&) override {
    TensorMap x;
    if (!names_[0].empty()) {
      std::vector<int64_t> steps;
      std::vector<double> values;
      for (const Kept& k : kept_) steps.push_back(k.step), values.push_back(k.value);
      x[kBestSteps] = torch::tensor(steps, torch::kInt64);
      x[kBestValues] = torch::tensor(values, torch::kFloat64);
    }
    if (!names_[1].empty()) {
      x[kEarlyBest] =
          torch::tensor(have_early_best_ ? early_best_ : std::numeric_limits<double>::quiet_NaN(), torch::kFloat64);
      x[kEarlyBestStep] = torch::tensor(early_best_step_, torch::kInt64);
      x[kEarlyWait] = torch::tensor(early_wait_, torch::kInt64);
    }
    return x;
  }

  std::vector<std::string> names_;  // [0] checkpoint.monitor, [1] early_stopping.monitor ("" when unset)
  std::vector<uint64_t> seen_;      // rank 0: the row sequence of each value already checked
  std::vector<Kept> kept_;          // the best checkpoints, best first
  double early_best_ = 0;
  int64_t early_best_step_ = -1, early_wait_ = 0;
  bool have_early_best_ = false;
};

}  // namespace

std::unique_ptr<Callback> monitored_callback(CallbackSetup& setup) {
  const auto& c = setup.fit.cfg();
  if (c.checkpoint.monitor.empty() && c.early_stopping.monitor.empty()) return nullptr;
  return std::make_unique<MonitoredCallback>(setup.fit);
}

}  // namespace gantry
