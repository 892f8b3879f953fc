// The training loop: the fit loop, a page; everything around the step is a
//      callback (train/callback.hpp, train/callbacks/*.cpp). The system as
//      held (modules, optimizer slots, step context, resume) is train/model.*,
//      devices and ranks train/accelerator.*, stop agreement train/stop_agreement.*.
#include "train/trainer.hpp"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <optional>
#include <sstream>

#include "gantry/errors.hpp"
#include "files/files.hpp"
#include "data/data_loader.hpp"
#include "data/image_dataset.hpp"
#include "runtime/runtime.hpp"
#include "train/accelerator.hpp"
#include "train/callback.hpp"
#include "optim/ema.hpp"
#include "train/fit_stop.hpp"
#include "train/model.hpp"
#include "train/profile.hpp"
#include "train/resume.hpp"
#include "train/run_outputs.hpp"
#include "train/stop_agreement.hpp"

namespace fs = std::filesystem;

namespace gantry {

namespace {

// Where the current epoch's loader begins in its permutation (kEpochFromKey).
int64_t epoch_from(const TrainState& s) {
  const auto it = s.extra.find(kEpochFromKey);
  return it != s.extra.end() && it->second.numel() == 1 ? it->second.item<int64_t>() : 0;
}

// trainer.profiler=trace: rank 0's steps [profile_first_step, + profile_steps)
// into run_dir/trace_steps_A-B.json (Chrome's trace format).
class StepTrace {
 public:
  StepTrace(bool wanted, int64_t first, int64_t steps, bool cuda, std::string run_dir)
      : wanted_(wanted), first_(first), steps_(steps), cuda_(cuda), run_dir_(std::move(run_dir)) {}
  void before_batch(int64_t step) {
    if (!wanted_ || step < first_) return;
    wanted_ = false;
    from_ = step;
    tracer_ = std::make_unique<OpProfiler>(false, cuda_);
    Profile::set_tracing(true);
  }
  void after_batch(int64_t step) {
    if (tracer_ && step >= from_ + steps_) end(step);
  }
  void end(int64_t step) {
    if (!tracer_) return;
    Profile::set_tracing(false);
    char name[96];
    std::snprintf(name, sizeof name, "trace_steps_%ld-%ld.json", long(from_), long(step));
    const std::string path = (fs::path(run_dir_) / name).string();
    const OpProfiler::Result r = tracer_->stop(path);
    tracer_.reset();
    std::printf(
        "profiler: steps [%ld, %ld) of rank 0 traced (%ld events) into %s (open it in "
        "https://ui.perfetto.dev or chrome://tracing)\n",
        long(from_), long(step), long(r.events), path.c_str());
  }

 private:
  bool wanted_;
  int64_t first_, steps_, from_ = -1;
  bool cuda_;
  std::string run_dir_;
  std::unique_ptr<OpProfiler> tracer_;
};

}  // namespace

struct Trainer::Impl {
  std::string run_dir;
  std::unique_ptr<Accelerator> accel;
  std::unique_ptr<Model> model;
  std::unique_ptr<RunOutputs> out;                        // rank 0
  std::vector<std::unique_ptr<Callback>> user_callbacks;  // for the next fit (Trainer::add_callback)
  std::vector<ConfigChange> resume_changes;               // the resume's config against its checkpoint's
  CheckpointShape resumed_shape;                          // the resume checkpoint's ranks and batch (0s: fresh)
  std::unique_ptr<Profile> profile;                       // trainer.profiler (null: none)

  const ExperimentConfig& cfg() const { return model->cfg(); }

  LoaderOptions loader_options() const {
    LoaderOptions lo;
    lo.batch_size = cfg().data.batch_size;
    lo.shuffle = cfg().data.shuffle;
    lo.drop_last = cfg().data.drop_last;
    lo.prefetch = cfg().data.prefetch;
    lo.seed = static_cast<uint64_t>(cfg().trainer.seed);
    lo.rank = accel->dist().rank;
    lo.world_size = accel->dist().world_size;
    lo.pin_memory = accel->pin_memory();
    // trainer.overfit_batches: the same first batches every epoch, unshuffled;
    // else trainer.limit_train_batches of each epoch's.
    const auto& t = cfg().trainer;
    lo.limit = t.overfit_batches.none() ? t.limit_train_batches : t.overfit_batches;
    if (!t.overfit_batches.none()) lo.shuffle = false;
    return lo;
  }

  // A batch's logged values, not yet read to the host.
  struct PendingStep {
    int64_t step;  // global_step after the batch
    std::vector<LoggedValue> logged;
  };

  // Whether logged values are read every batch or only when something needs
  // them (trainer.read_metrics; auto: every batch on the CPU, where a read
  // costs nothing; on a GPU a read waits for the device to finish the step).
  bool defer_reads() const {
    const ReadMetrics r = cfg().trainer.read_metrics;
    return r == ReadMetrics::kOnLog || (r == ReadMetrics::kAuto && accel->device().is_cuda());
  }

  // The pending batches' logged values, in batch order: values on the CPU
  // read directly, those on a GPU in one copy to the host for all of them;
  // one all-reduce for those logged with sync (averaged over ranks). Each
  // batch's go into fit.interval, the newest batch's are fit.values. Returns
  // a message naming the first NaN/Inf (its batch's values are not added), or "".
  std::string read_pending(std::vector<PendingStep>& pending, FitState& fit) const {
    if (pending.empty()) return "";
    std::vector<double> host;
    std::vector<torch::Tensor> on_device;  // and where each goes in `host`
    std::vector<size_t> slots;
    for (const auto& p : pending)
      for (const auto& v : p.logged) {
        if (v.value.device().is_cpu()) {
          host.push_back(v.value.item<double>());
          continue;
        }
        slots.push_back(host.size());
        host.push_back(0);
        on_device.push_back(v.value.reshape({1}).to(torch::kFloat64));
      }
    if (!on_device.empty()) {
      const torch::Tensor t = torch::cat(on_device).cpu();
      for (size_t k = 0; k < slots.size(); ++k) host[slots[k]] = t.data_ptr<double>()[k];
    }
    std::vector<double> to_sync;
    size_t i = 0;
    for (const auto& p : pending)
      for (const auto& v : p.logged) {
        if (v.sync && accel->group()) to_sync.push_back(host[i]);
        ++i;
      }
    if (!to_sync.empty()) {
      auto t = torch::tensor(to_sync, torch::kFloat64);
      accel->allreduce_sum(t);
      size_t k = 0, j = 0;
      for (const auto& p : pending)
        for (const auto& v : p.logged) {
          if (v.sync && accel->group()) host[j] = t[k++].item<double>() / accel->dist().world_size;
          ++j;
        }
    }
    std::string bad;
    i = 0;
    for (const auto& p : pending) {
      fit.values.clear();
      for (const auto& v : p.logged) fit.values.emplace_back(v.name, host[i++]);
      for (const auto& [name, x] : fit.values)
        if (bad.empty() && !std::isfinite(x))
          bad = "step " + std::to_string(p.step) + ": " + name + " is " + (std::isnan(x) ? "NaN" : "Inf") +
                "; stopping (lower system.lr, or check the data)";
      if (!bad.empty()) break;
      for (size_t k = 0; k < fit.values.size(); ++k)
        fit.interval.add(fit.values[k].first, fit.values[k].second, p.logged[k].reduce);
      fit.read_step = p.step;
    }
    pending.clear();
    return bad;
  }

  LoaderOptions val_options(LoaderOptions lo) const {
    const auto& t = cfg().trainer;
    lo.shuffle = false;
    lo.drop_last = false;
    // trainer.limit_val_batches; overfitting validates on at most as many batches as it trains on.
    lo.limit = t.overfit_batches.none() || !t.limit_val_batches.all() ? t.limit_val_batches : t.overfit_batches;
    return lo;
  }

  FitResult fit() {
    const Experiment& e = model->experiment();
    if (!e.train_data)
      throw DataError("plugin " + model->plugin_name() +
                      " has no train_dataset() and no images were given (Experiment::use_images, data.*)");
    const LoaderOptions lo = loader_options();
    DataLoader loader(e.train_data, lo);
    std::unique_ptr<DataLoader> val_loader;
    if (e.val_data && cfg().trainer.validates()) val_loader = std::make_unique<DataLoader>(e.val_data, val_options(lo));
    return fit(loader, std::move(val_loader), e.data_name, e.train_data->size());
  }

  FitResult fit(DataLoader& loader, std::unique_ptr<DataLoader> val_loader, const std::string& train_name,
                int64_t train_size) {
    const auto& t = cfg().trainer;
    const LoaderOptions lo = loader_options();
    FitState fit(*model, *accel, run_dir, model->resumed());
    fit.interval = MetricInterval::from_state(fit.state.extra);  // a stop between log steps kept it
    fit.per_epoch = loader.batches_per_epoch();
    fit.batch_size = lo.batch_size;
    if (accel->is_zero()) say_max_steps();
    if (fit.per_epoch == 0)
      throw DataError(train_name + ": " + std::to_string(train_size) + " samples make no batch of " +
                      std::to_string(lo.batch_size) + " (data.drop_last is true)");
    // A resume mid-epoch at another world size or batch: the epoch goes on
    // from the sample it reached (train/resume.hpp, kEpochFromKey).
    TrainState& s = fit.state;
    const int64_t from_before = epoch_from(s);
    if (!model->cfg().trainer.resume.empty() && s.batch_in_epoch > 0) {
      const CheckpointShape& was = resumed_shape;
      const int world = accel->dist().world_size;
      if (was.world > 0 && (was.world != world || was.batch_size != lo.batch_size)) {
        const int64_t from = from_before + s.batch_in_epoch * was.batch_size * was.world;
        if (accel->is_zero())
          std::printf(
              "resize: epoch %ld goes on from sample %ld of %ld (%ld batches of %ld x %ld ranks were trained%s); "
              "%ld batches of %ld x %d ranks are left in it\n",
              long(s.epoch), long(std::min(from, train_size)), long(train_size), long(s.batch_in_epoch),
              long(was.batch_size), long(was.world),
              from_before ? (" after sample " + std::to_string(from_before)).c_str() : "",
              long(loader.batches_per_epoch(from)), long(lo.batch_size), world);
        s.extra[kEpochFromKey] = torch::tensor(from, torch::kInt64);
        s.batch_in_epoch = 0;
      }
    }
    // The current epoch's length goes into the checkpoints (a later resume's
    // mid-epoch check, train/resume.hpp).
    const int64_t this_epoch = loader.batches_per_epoch(epoch_from(s));
    s.extra[kPerEpochKey] = torch::tensor(this_epoch, torch::kInt64);
    if (t.max_epochs > 0)
      fit.total_steps = epoch_from(s) == 0 ? t.max_epochs * fit.per_epoch
                                           : s.global_step + this_epoch +
                                                 std::max<int64_t>(0, t.max_epochs - s.epoch - 1) * fit.per_epoch;
    if (t.max_steps > 0) fit.total_steps = fit.total_steps > 0 ? std::min(fit.total_steps, t.max_steps) : t.max_steps;
    // The EMA checks ema.modules against the plugin before rank 0 writes
    // anything (a refused run leaves an unused run directory, which the
    // runner removes); its shadows come from the resumed checkpoint.
    std::unique_ptr<EmaWeights> ema;  // the trainer's: the EMA callback updates it, samples and checkpoints read it
    if (cfg().ema.decay > 0) {
      ema = std::make_unique<EmaWeights>(cfg().ema, model->modules(), fit.state.extra, cfg().where("ema.modules"));
      fit.ema = ema.get();
      if (accel->is_zero())
        std::printf(
            "ema: the sample grids, the quality score and gantry sample use the EMA weights (ema.decay %g%s); "
            "validation uses %s\n",
            ema->decay(), ema->warmup() ? ", warm-up min(decay, (1 + t) / (10 + t))" : "",
            cfg().ema.for_validation ? "them too (ema.for_validation)" : "the trained weights");
    }
    // Every callback, one per row of train/callback_slot.hpp (its builder
    // says whether it runs in this fit), then their state from the resumed
    // checkpoint: before rank 0 opens its outputs, so that a refused key
    // leaves no run behind. The driver's own join at CallbackSlot::kUser.
    Callbacks callbacks;  // called in the order of their slots (callback_slot.hpp says why each is where)
    {
      CallbackSetup setup{fit, accel->is_zero(), std::move(val_loader)};
#define GANTRY_CALLBACK_ADD(slot, name, builder) \
  if (auto cb = builder(setup)) callbacks.add(CallbackSlot::slot, std::move(cb));
      GANTRY_CALLBACKS(GANTRY_CALLBACK_ADD)
#undef GANTRY_CALLBACK_ADD
      for (auto& cb : user_callbacks) callbacks.add(CallbackSlot::kUser, std::move(cb));
      user_callbacks.clear();
    }
    fit.callbacks = &callbacks;
    callbacks.load_state(fit, fit.state.extra);
    if (accel->is_zero()) {
      out = std::make_unique<RunOutputs>(fit, lo.batch_size * accel->dist().world_size);
      fit.out = out.get();
      model->set_image_sink([this](const std::string& tag, int64_t step, const torch::Tensor& images, double low,
                                   double high) { out->image(tag, step, images, low, high); });
    }
    profile.reset();
    // Always: the rank status reports the parts (profiler simple adds the table).
    profile = std::make_unique<Profile>(t.profiler == ProfilerKind::kSimple);
    fit.profile = profile.get();
    callbacks.set_profile(profile.get());
    model->set_profile(profile.get());
    try {
      return loop(fit, loader, callbacks);
    } catch (const std::exception& e) {
      Profile::set_tracing(false);  // a trace's profiler stopped with the loop
      callbacks.call(&Callback::on_exception, fit, e);
      if (out) {
        out->event("failed", fit.state.global_step, e.what());
        out->flush();
      }
      throw;
    }
  }

  // With deferred reads, at an epoch's end or the run's: reads what is
  // pending, and agrees once more so that a NaN/Inf in it stops every rank
  // (the ranks reach this point at the same batch, so the extra round
  // matches). Throws TrainingError naming the first bad value. Returns
  // whether the ranks agreed to stop (the previous round's verdict, which
  // this round consumed).
  StopAgreement::Verdict settle(FitState& fit, StopAgreement& agreement, std::vector<PendingStep>& pending) {
    if (!defer_reads()) return {};
    const std::string bad = read_pending(pending, fit);
    const StopAgreement::Verdict v = agreement.agree(0, bad);
    if (v.bad_metric || !bad.empty()) fail_on_bad_metric(fit, agreement);
    return v;
  }

  // Where Lightning's name means another count: gantry's max_steps counts
  // batches, Lightning's optimizer steps (a plugin with 2 optimizers steps twice a batch).
  void say_max_steps() const {
    const int64_t n = cfg().trainer.max_steps;
    const size_t k = model->optimizers().size();
    if (n > 0 && k > 1)
      std::printf(
          "trainer.max_steps=%ld counts batches: %ld optimizer steps with this plugin's %zu optimizers "
          "(Lightning's max_steps counts optimizer steps: its max_steps=%ld is trainer.max_steps=%ld here)\n",
          long(n), long(n) * long(k), k, long(n), long(n / int64_t(k)));
  }

  // checkpoint.every_n_minutes: whether this rank's clock wishes a checkpoint
  // after this batch (not at a batch that writes one: that resets the clock).
  bool clock_wants_checkpoint(const FitState& fit, bool due) const {
    const double minutes = cfg().checkpoint.every_n_minutes;
    if (minutes <= 0 || due) return false;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - fit.last_checkpoint_time).count() >=
           minutes * 60;
  }

  // A NaN/Inf metric on any rank: the event (rank 0, when it saw it) and the error.
  [[noreturn]] void fail_on_bad_metric(FitState& fit, const StopAgreement& agreement) {
    const std::string& mine = agreement.own_bad();
    if (out && !mine.empty()) out->event("nan", fit.state.global_step, mine);
    throw TrainingError(bad_metric_error(mine, fit.state.global_step - 1));
  }

  FitResult loop(FitState& fit, DataLoader& loader, Callbacks& callbacks) {
    const auto& t = cfg().trainer;
    TrainState& s = fit.state;
    const std::vector<torch::Tensor> buffers = model->buffers();
    const bool buffers_every_step = t.broadcast_buffers == BufferBroadcast::kEveryStep;
    StopAgreement agreement(accel->group());
    FitStop stop(t, fit.total_steps);  // every reason to stop goes here
    const bool defer = defer_reads();
    std::vector<PendingStep> pending;  // batches whose values are not read yet (defer)
    const auto start = std::chrono::steady_clock::now();
    auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
    // trainer.max_time counts the fit time of every run of this training, as
    // Lightning's Timer keeps time_elapsed in its checkpoint state: a
    // checkpoint records it, a resume continues from it.
    const auto time_it = s.extra.find(kFitTimeKey);
    const double time_before = time_it != s.extra.end() && time_it->second.numel() == 1
                                   ? time_it->second.to(torch::kFloat64).item<double>()
                                   : 0.0;
    auto record_time = [&] { s.extra[kFitTimeKey] = torch::tensor(time_before + elapsed(), torch::kFloat64); };
    auto every = [&](int64_t n) { return n > 0 && s.global_step % n == 0; };
    fit.last_checkpoint_time = std::chrono::steady_clock::now();

    Profile* const prof = profile.get();
    StepTrace trace(accel->is_zero() && t.profiler == ProfilerKind::kTrace, t.profile_first_step, t.profile_steps,
                    accel->device().is_cuda(), run_dir);

    callbacks.call(&Callback::on_fit_start, fit);
    const int64_t first_step = s.global_step;
    stop.at_start(s);
    while (!stop.done()) {
      const int64_t from = epoch_from(s);  // 0 but in an epoch resumed at another world size or batch
      const int64_t epoch_batches = from ? loader.batches_per_epoch(from) : fit.per_epoch;
      loader.start_epoch(s.epoch, s.batch_in_epoch, from);
      while (!stop.done()) {
        trace.before_batch(s.global_step);
        std::optional<Batch> batch;
        {
          const Profile::Scope timed(prof, Profile::kData);
          batch = loader.next();
          if (batch) accel->to_device(*batch);
        }
        if (!batch) break;
        if (buffers_every_step) accel->broadcast(buffers);
        callbacks.call(&Callback::on_batch_start, fit);
        ++s.batch_in_epoch;  // batches drawn from this epoch (ctx.next_batch draws more)
        std::optional<Profile::Scope> step_timed(std::in_place, prof, Profile::kTrainingStep);
        const std::vector<LoggedValue>& logged = model->training_step(*batch, s, [&]() -> std::optional<Batch> {
          const Profile::Scope timed(prof, Profile::kNextBatch);
          auto more = loader.next();
          if (!more) return std::nullopt;
          accel->to_device(*more);
          ++s.batch_in_epoch;
          return more;
        });
        step_timed.reset();
        ++s.global_step;
        pending.push_back({s.global_step, logged});
        if (std::string asked = model->take_stop_request(); !asked.empty()) {  // ctx.request_stop (ABI 1.3)
          if (!accel->is_zero())
            std::printf("rank %d: plugin %s asked to stop at step %lld: %s\n", accel->dist().rank,
                        model->plugin_name().c_str(), static_cast<long long>(s.global_step), asked.c_str());
          stop.plugin_request(asked);
        }
        const bool max_steps_reached = t.max_steps > 0 && s.global_step >= t.max_steps;
        const bool pause_reached = t.pause_at_step > 0 && s.global_step >= t.pause_at_step;
        // checkpoint.every_n_minutes: the ranks agreed on it after the previous batch.
        const bool time_due = cfg().checkpoint.every_n_minutes > 0 && agreement.previous().checkpoint;
        const bool image_due = every(t.image_every_n_steps),
                   ckpt_due = every(cfg().checkpoint.every_n_steps) || time_due;
        // Read now when a callback needs the values (the same batches on every
        // rank: the sync all-reduce is a collective), or always (CPU default).
        const bool read_now =
            !defer || every(t.log_every_n_steps) || image_due || ckpt_due || max_steps_reached || pause_reached;
        std::optional<Profile::Scope> sync_timed(std::in_place, prof, Profile::kSync);
        const std::string bad = read_now ? read_pending(pending, fit) : "";
        const std::string wish = stop.wish(s, time_before + elapsed());  // why this rank wants to stop ("" if not)
        const StopAgreement::Verdict agreed = agreement.agree(wish.empty() ? 0 : stop.wish_code(accel->dist().rank),
                                                              bad, clock_wants_checkpoint(fit, ckpt_due));
        sync_timed.reset();
        if (agreed.bad_metric) fail_on_bad_metric(fit, agreement);
        fit.agreed_wish = agreed.wish;
        if ((image_due || ckpt_due) && !buffers_every_step) accel->broadcast(buffers);  // rank 0's, for readers
        callbacks.call(&Callback::on_batch_end, fit);
        if (image_due) callbacks.call(&Callback::on_image_step, fit);  // what log_samples logs joins this row
        if (every(t.log_every_n_steps)) callbacks.call(&Callback::on_log_step, fit);
        if (ckpt_due) {
          record_time();
          callbacks.call(&Callback::on_checkpoint_step, fit);
          fit.last_checkpoint_time = std::chrono::steady_clock::now();  // written or not (save_last: false)
        }
        stop.after_batch(agreed.stop, max_steps_reached, agreed.wish);
        if (pause_reached) stop.pause_reached();            // every rank at this batch, as max_steps
        if (!fit.stop_now.empty()) stop.now(fit.stop_now);  // early stopping: every rank alike
        trace.after_batch(s.global_step);
      }
      if (s.batch_in_epoch >= epoch_batches) end_epoch(fit, agreement, pending, stop, callbacks, from != 0);
    }
    trace.end(s.global_step);  // the fit ended inside the traced steps
    settle(fit, agreement, pending);
    FitResult result;
    result.seconds = elapsed();
    result.steps_run = s.global_step - first_step;
    result.stop_reason = stop.reason();
    result.paused = fit.paused = stop.paused();
    agreement.finish(s.global_step);
    callbacks.call(&Callback::on_train_end, fit);
    accel->broadcast(buffers);  // a collective: every rank has published its final status
    record_time();
    // The interval since the last row, before the metrics callback writes it
    // as a row of its own: a resume drops that row and goes on from this.
    fit.interval.to_state(s.extra);
    fit.interval_kept = true;
    callbacks.call(&Callback::on_fit_end, fit);
    return finished(fit, std::move(result), stop, elapsed());
  }

  // An epoch's last batch done: its callbacks (validation, rows) see every
  // batch's values; the next epochs are whole ones at this world size.
  void end_epoch(FitState& fit, StopAgreement& agreement, std::vector<PendingStep>& pending, FitStop& stop,
                 Callbacks& callbacks, bool resized) {
    TrainState& s = fit.state;
    // Epoch-end callbacks (validation, rows) see every batch's values.
    const StopAgreement::Verdict settled = settle(fit, agreement, pending);
    stop.after_batch(settled.stop, false, settled.wish);
    if (settled.stop) fit.agreed_wish = settled.wish;
    callbacks.call(&Callback::on_epoch_end, fit);
    if (!fit.stop_now.empty()) stop.now(fit.stop_now);
    ++s.epoch;
    s.batch_in_epoch = 0;
    if (resized) {  // the next epochs are whole ones at this world size
      s.extra.erase(kEpochFromKey);
      s.extra[kPerEpochKey] = torch::tensor(fit.per_epoch, torch::kInt64);
    }
    stop.after_epoch(s);
  }

  // The fit's end after on_fit_end: the profiler's table (a collective),
  // rank 0's end event, and what the fit returns.
  FitResult finished(FitState& fit, FitResult result, const FitStop& stop, double seconds) {
    const TrainState& s = fit.state;
    if (profile && profile->table()) {  // a collective: every rank's rows to rank 0
      const std::string table = profile->report(*accel, model->system().hook_times(), seconds);
      if (out) {
        std::fputs(table.c_str(), stdout);
        write_file_atomic((fs::path(run_dir) / "profile.txt").string(), table);
        std::printf("profile: %s\n", (fs::path(run_dir) / "profile.txt").c_str());
      }
    }
    result.stop_signal = stop_requested();
    if (out) {
      const int sig = result.stop_signal;
      out->event(requeue_follows(sig) ? "requeued"
                 : sig                ? "stopped"
                 : result.paused      ? "paused"
                                      : "finished",
                 s.global_step,
                 sig             ? "stopped by signal " + std::to_string(sig)
                 : result.paused ? stop.reason()
                                 : "finished");
      out->flush();
    }
    result.state = s;
    result.hook_times = model->system().hook_times();
    if (fit.checkpoint_writes.calls) result.hook_times["(checkpoint writes)"] = fit.checkpoint_writes;
    result.last_values = fit.values;
    result.last_checkpoint = fit.last_checkpoint;
    result.last_checkpoint_step = fit.last_checkpoint_step;
    return result;
  }
};

Trainer::Trainer(Experiment experiment, std::string run_dir, DistEnv dist) : impl_(std::make_unique<Impl>()) {
  impl_->run_dir = std::move(run_dir);
  for (const char* sub : {"images", "checkpoints"}) {
    if (dist.rank != 0) break;
    std::error_code ec;
    fs::create_directories(fs::path(impl_->run_dir) / sub, ec);
    if (ec) throw Error("cannot create " + (fs::path(impl_->run_dir) / sub).string() + ": " + ec.message());
  }
  if (dist.rank == 0 && !impl_->run_dir.empty())  // a resumed run's: a write its killed writer never finished
    for (const auto& f : remove_stale_temp_files(impl_->run_dir))
      std::printf("removed %s: an unfinished write of a process that is gone\n", f.c_str());
  impl_->accel = make_accelerator(experiment.config, dist);
  impl_->model = std::make_unique<Model>(std::move(experiment), *impl_->accel);
  // A resume: its config against the checkpoint's, refused or said before the
  // caller writes the run directory's config.yaml.
  const ExperimentConfig& cfg = impl_->model->cfg();
  if (!cfg.trainer.resume.empty()) {
    const bool zero = impl_->accel->is_zero();
    impl_->resumed_shape = checkpoint_shape(impl_->model->resumed_meta());
    const int64_t batch = resized_batch(cfg, impl_->resumed_shape, impl_->accel->dist().world_size, zero);
    if (batch != cfg.data.batch_size) impl_->model->set_batch_size(batch);
    impl_->resume_changes = check_resume_changes(cfg, impl_->model->resumed(), impl_->model->resumed_meta(), zero);
  }
}

const std::vector<ConfigChange>& Trainer::resume_changes() const { return impl_->resume_changes; }

Trainer::~Trainer() = default;

void check_before_training(Experiment experiment) {
  auto& resume = experiment.config.trainer.resume;
  if (resume == "auto" || resume == "fresh") resume.clear();  // which file: train decides when it starts
  const ExperimentConfig cfg = experiment.config;
  const auto accel = make_accelerator(cfg, DistEnv{});  // this process alone: no rendezvous
  Model model(std::move(experiment), *accel);           // modules, optimizers, a resume checkpoint's shapes
  if (cfg.ema.decay > 0) (void)EmaWeights(cfg.ema, model.modules(), {}, cfg.where("ema.modules"));
}

FitResult Trainer::fit() { return impl_->fit(); }

// CallbackSlot::kUser's builder: the slot is the driver's (Trainer::add_callback); no built-in one runs there.
std::unique_ptr<Callback> added_by_driver(CallbackSetup&) { return nullptr; }

void Trainer::add_callback(std::unique_ptr<Callback> callback) { impl_->user_callbacks.push_back(std::move(callback)); }

}  // namespace gantry
