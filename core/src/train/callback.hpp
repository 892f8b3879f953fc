// The fit loop's callbacks: every feature around the step (metrics, samples,
// checkpoints, rank status, progress, validation) is a Callback with one job,
// called at named points of the loop (train/trainer.cpp). A callback that only
// rank 0 needs is simply not registered elsewhere. Callbacks are called in the
// order of their CallbackSlot at every point (what each one sees depends on
// it: the slot says why it is where it is).
//
// Points, in loop order:
//   on_fit_start        before the first batch (after a resume: the next one)
//   on_batch_start      before every batch's training_step
//   on_batch_end        after every batch (values read, stop agreed)
//   on_image_step       after a batch whose global_step % image_every_n_steps == 0
//   on_log_step         after a batch whose global_step % log_every_n_steps == 0
//   on_checkpoint_step  after a batch whose step % checkpoint.every_n_steps == 0, or which the
//                       ranks agreed on for checkpoint.every_n_minutes
//   on_epoch_end        after an epoch's last batch, before epoch is incremented
//   on_train_end        after the last batch, before the end's collectives
//   on_fit_end          at the end (every rank's final status is published)
//   on_exception        the fit failed (the exception is rethrown after)
// Buffers (BatchNorm stats) are rank 0's at every point that reads them.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/data_loader.hpp"
#include "gantry/core_export.hpp"
#include "train/accelerator.hpp"
#include "train/callback_slot.hpp"
#include "checkpoint/file.hpp"
#include "train/model.hpp"
#include "train/profile.hpp"

namespace gantry {

class Callbacks;
class EmaWeights;
class RunOutputs;

using Values = std::vector<std::pair<std::string, double>>;

/// The values logged since the last metrics row, reduced per name (Reduce:
/// the mean unless the plugin asked otherwise), in first-logged order.
class MetricInterval {
 public:
  void add(const std::string& name, double x, Reduce reduce = Reduce::kMean) {
    size_t i = 0;
    while (i < acc_.size() && acc_[i].name != name) ++i;
    if (i == acc_.size()) {
      acc_.push_back({name, reduce, x, 0});
    } else {
      Acc& a = acc_[i];
      switch (a.reduce) {
        case Reduce::kMean:
        case Reduce::kSum:
          a.value += x;
          break;
        case Reduce::kMax:
          a.value = std::max(a.value, x);
          break;
        case Reduce::kMin:
          a.value = std::min(a.value, x);
          break;
        case Reduce::kLast:
          a.value = x;
          break;
      }
    }
    ++acc_[i].count;
  }
  void add(const Values& values) {
    for (const auto& [name, x] : values) add(name, x);
  }
  Values reduced() const {
    Values out;
    for (const auto& a : acc_)
      out.emplace_back(a.name, a.reduce == Reduce::kMean ? a.value / double(a.count) : a.value);
    return out;
  }
  bool empty() const { return acc_.empty(); }
  void clear() { acc_.clear(); }

  /// The checkpoint keeps what was logged since the last row (a stop between
  /// two log steps), so that a resumed run's next row is the uninterrupted
  /// run's: under kStatePrefix + "<index>/<name>", [reduce, value, count].
  static constexpr const char* kStatePrefix = "metrics.interval/";
  void to_state(std::map<std::string, torch::Tensor>& extra) const {
    for (auto it = extra.begin(); it != extra.end();)
      it = it->first.rfind(kStatePrefix, 0) == 0 ? extra.erase(it) : std::next(it);
    char index[32];
    for (size_t i = 0; i < acc_.size(); ++i) {
      std::snprintf(index, sizeof index, "%04zu/", i);
      extra[kStatePrefix + std::string(index) + acc_[i].name] = torch::tensor(
          {double(static_cast<int>(acc_[i].reduce)), acc_[i].value, double(acc_[i].count)}, torch::kFloat64);
    }
  }
  /// The interval a checkpoint kept (none: empty); keys in index order.
  static MetricInterval from_state(const std::map<std::string, torch::Tensor>& extra) {
    MetricInterval m;
    const std::string prefix = kStatePrefix;
    for (const auto& [key, t] : extra) {
      if (key.rfind(prefix, 0) != 0 || t.numel() != 3 || key.size() < prefix.size() + 6) continue;
      const torch::Tensor v = t.to(torch::kFloat64).contiguous();
      const double* d = v.data_ptr<double>();
      m.acc_.push_back({key.substr(prefix.size() + 5), static_cast<Reduce>(int(d[0])), d[1], int64_t(d[2])});
    }
    return m;
  }
  static bool in_state(const std::map<std::string, torch::Tensor>& extra) {
    const auto it = extra.lower_bound(kStatePrefix);
    return it != extra.end() && it->first.rfind(kStatePrefix, 0) == 0;
  }

 private:
  struct Acc {
    std::string name;
    Reduce reduce;  // the first log's
    double value;
    int64_t count;
  };
  std::vector<Acc> acc_;
};

/// What the loop shares with its callbacks.
struct FitState {
  FitState(Model& m, Accelerator& a, const std::string& dir, TrainState s)
      : model(m), accel(a), run_dir(dir), state(s), read_step(s.global_step) {}

  Model& model;
  Accelerator& accel;
  RunOutputs* out = nullptr;   ///< rank 0's metrics.csv, stream, images, progress; null elsewhere
  const std::string& run_dir;  ///< "" on ranks other than 0
  TrainState state;            ///< after a batch: global_step counts it
  int64_t total_steps = -1;    ///< -1: unbounded (max_time or a signal ends it)
  int64_t per_epoch = 0;       ///< batches per epoch on this rank
  int64_t batch_size = 0;      ///< per rank
  Values values;               ///< the last batch's logged values (averaged where logged with sync)
  MetricInterval interval;     ///< everything logged since the last metrics row (batches, log_samples)
  int64_t read_step;           ///< the newest batch whose values are read (in `interval`, unless a NaN stopped it)
  int32_t agreed_wish = 0;     ///< the ranks' last agreed stop wish (FitStop::wish_code; the same on every rank)
  /// Whether the ranks agreed to stop for a signal (FitStop::wish_code's kind 3): a preemption, whose
  /// resume validates and scores where an uninterrupted run would.
  bool stopped_by_signal() const { return (agreed_wish >> 24) == 3; }
  EmaWeights* ema = nullptr;    ///< the weights' EMA when ema.decay > 0, the trainer's (samples are drawn with it)
  std::string last_checkpoint;  ///< path of the newest checkpoint written ("" if none)
  int64_t last_checkpoint_step = -1;  ///< its step (every rank)
  /// When this process last wrote a checkpoint (the fit's start before one): checkpoint.every_n_minutes.
  std::chrono::steady_clock::time_point last_checkpoint_time = std::chrono::steady_clock::now();
  bool interval_kept = false;  ///< at the fit's end: the checkpoint keeps the interval as it was before its last row
  bool paused = false;         ///< from on_train_end: the run stops at trainer.pause_at_step (a resume goes on)
  std::string stop_now;  ///< set alike on every rank by a callback (early stopping): the loop stops after this batch
  HookTime checkpoint_writes;      ///< write_checkpoint's calls and time on this rank (fast_dev_run's report)
  Profile* profile = nullptr;      ///< the loop's parts, timed on every rank (the rank status reports them)
  Callbacks* callbacks = nullptr;  ///< the fit's callbacks (their state goes into every checkpoint)

  const ExperimentConfig& cfg() const { return model.cfg(); }
};

using TensorMap = std::map<std::string, torch::Tensor>;

class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_fit_start(FitState&) {}
  virtual void on_batch_start(FitState&) {}
  virtual void on_log_step(FitState&) {}
  virtual void on_batch_end(FitState&) {}
  virtual void on_image_step(FitState&) {}
  virtual void on_checkpoint_step(FitState&) {}
  virtual void on_epoch_end(FitState&) {}
  virtual void on_train_end(FitState&) {}
  virtual void on_fit_end(FitState&) {}
  virtual void on_exception(FitState&, const std::exception&) {}

  // What a callback keeps across a stop (Lightning's state_dict and
  // load_state_dict): its entries of the checkpoint's trainer_state, every
  // key under one of state_keys() (its prefixes, owned by it alone: a key it
  // stops returning is dropped from the next checkpoint).
  /// The prefixes of its keys ("best.", "early."); none: it keeps no state.
  virtual std::vector<std::string> state_keys() const { return {}; }
  /// Asked at every checkpoint, on every rank alike (it may run collectives).
  virtual TensorMap state(FitState&) { return {}; }
  /// Once, before on_fit_start, with its keys of the checkpoint resumed from
  /// (empty on a fresh run), before rank 0 opens the run's files (a refusal
  /// leaves no run behind).
  virtual void load(FitState&, const TensorMap& state) {}
};

/// The callbacks of one fit, called in the order of their slots (those of one
/// slot in the order they were added).
class GANTRY_CORE_EXPORT Callbacks {
 public:
  /// Throws std::logic_error when its state_keys() overlap another's.
  void add(CallbackSlot slot, std::unique_ptr<Callback> cb);
  template <class Point, class... Args>
  void call(Point point, FitState& fit, Args&&... args) {
    for (auto& [slot, cb] : list_) {
      const Profile::Scope timed(profile_, Profile::callback_row(int(slot)));  // trainer.profiler
      ((*cb).*point)(fit, args...);
    }
  }
  /// Every callback's state into `trainer_state` (each one's keys replaced whole); every rank alike.
  void save_state(FitState& fit, TensorMap& trainer_state);
  /// Each callback's load() with its keys of `trainer_state`.
  void load_state(FitState& fit, const TensorMap& trainer_state);
  void set_profile(Profile* p) { profile_ = p; }
  size_t size() const { return list_.size(); }

 private:
  Profile* profile_ = nullptr;
  std::vector<std::pair<CallbackSlot, std::unique_ptr<Callback>>> list_;
};

/// What a callback's builder (train/callback_slot.hpp's rows) may use.
struct CallbackSetup {
  FitState& fit;
  bool rank0;                              ///< this rank writes the run's files (FitState::out, set after the builds)
  std::unique_ptr<DataLoader> val_loader;  ///< validation's, when the fit validates (its builder takes it)
};

// The built-in callbacks' builders, one per row of train/callback_slot.hpp
// (each in its callback's file).
#define GANTRY_CALLBACK_BUILDER(slot, name, builder) std::unique_ptr<Callback> builder(CallbackSetup& setup);
GANTRY_CALLBACKS(GANTRY_CALLBACK_BUILDER)
#undef GANTRY_CALLBACK_BUILDER

/// Every rank: checkpoints/<file_name> of the fit's state (the RNG states
/// gathered; rank 0 writes it, with a "checkpoint" event). Returns its path on
/// rank 0, "" elsewhere.
std::string write_checkpoint(FitState& fit, const std::string& file_name);

}  // namespace gantry
