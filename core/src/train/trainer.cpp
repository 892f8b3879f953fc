// The training loop. Sections:
//   1. Experiment::build: plugin + system from a config
//   2. Trainer::Impl: setup, the loop, samples, checkpoints, validation
// (what training_step sees, StepContextImpl, is in step_context.cpp)
#include "train/trainer.hpp"

#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <functional>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "data/data_loader.hpp"
#include "dist/distributed.hpp"
#include "config/errors.hpp"
#include "config/files.hpp"
#include "train/fused_adam.hpp"
#include "data/image_grid.hpp"
#include "io/metrics_csv.hpp"
#include "io/progress.hpp"
#include "dist/rank_status.hpp"
#include "io/run_stream.hpp"
#include "train/step_context.hpp"
#include "runtime/runtime.hpp"
#include "train/weight_layout.hpp"

namespace fs = std::filesystem;

namespace gantry {

// ---- 1. Experiment ----------------------------------------------------------

Experiment Experiment::build(const ExperimentConfig& config) {
  Experiment e;
  e.config = config;
  e.plugin = Plugin::find(config.system.plugin);
  // Seed before the plugin builds its modules: their initialisation is part of the run.
  torch::manual_seed(static_cast<uint64_t>(config.trainer.seed));
  SystemParams params(e.config);
  e.system = e.plugin->create(params);
  params.check_all_used(e.plugin->manifest().name);
  return e;
}

// ---- 2. Trainer -------------------------------------------------------------

struct Trainer::Impl {
  Experiment exp;
  std::string run_dir;
  DistEnv dist;
  std::unique_ptr<ProcessGroup> pg;  // null in a world of one: no collective at all
  bool is_zero() const { return dist.rank == 0; }
  const ExperimentConfig& cfg() const { return exp.config; }
  const std::string plugin_name() const { return exp.plugin->manifest().name; }

  torch::Device device{torch::kCPU};
  std::vector<NamedModule> modules;
  std::vector<NamedOptimizer> optimizers;
  std::vector<OptimizerSlot> slots;
  TrainState state;
  DataSpec spec;
  std::unique_ptr<StepContextImpl> ctx;
  std::unique_ptr<MetricsCsv> metrics;
  std::unique_ptr<RunStream> stream;  // rank 0: run log + TensorBoard files
  std::unique_ptr<Progress> progress;
  std::vector<std::pair<std::string, double>> last_values;
  std::string last_checkpoint;
  std::unique_ptr<RankStatusReporter> status;  // every rank's status -> ranks.csv + stream on rank 0

  void setup() {
    const auto& t = cfg().trainer;
    if (t.accelerator == "cuda" && !torch::cuda::is_available())
      throw ConfigError(cfg().where("trainer.accelerator") +
                        ": trainer.accelerator is cuda, but no CUDA device is available to this "
                        "LibTorch (use cpu or auto)");
    dist.check(t.num_nodes, t.devices, cfg().where("trainer.devices"));
    if (t.accelerator != "cpu" && torch::cuda::is_available())
      device = torch::Device(torch::kCUDA, dist.local_rank);
    if (dist.world_size > 1) grad_transport();  // a transport this job cannot use: one error, before any rendezvous
    if (dist.world_size > 1)
      pg = std::make_unique<ProcessGroup>(
          dist, std::chrono::milliseconds(static_cast<int64_t>(t.dist_timeout * 1000)));
    // Each rank draws its own noise (model init is rank 0's, broadcast below).
    torch::manual_seed(static_cast<uint64_t>(t.seed + dist.rank));

    modules = call("modules", [&] { return exp.system->modules(); });
    if (modules.empty()) throw PluginError("plugin " + plugin_name() + ": modules() returned none");
    for (auto& m : modules) {
      if (!m.module)
        throw PluginError("plugin " + plugin_name() + ": modules() returned a null '" + m.name + "'");
      m.module->to(device);
      m.module->train();
    }
    if (t.weight_layout == "auto") {
      std::vector<std::string> moved;
      for (auto& m : modules)
        for (auto& name : transpose_linear_weights(*m.module, m.name)) moved.push_back(name);
      if (!moved.empty() && is_zero()) {
        std::string list;
        for (const auto& n : moved) list += (list.empty() ? "" : ", ") + n;
        std::printf("layout: %zu Linear weight%s stored transposed for faster products (%s; "
                    "trainer.weight_layout=as_built keeps them as built)\n",
                    moved.size(), moved.size() == 1 ? "" : "s", list.c_str());
      }
    }
    optimizers = call("configure_optimizers", [&] { return exp.system->configure_optimizers(); });
    if (optimizers.empty())
      throw PluginError("plugin " + plugin_name() + ": configure_optimizers() returned none");
    for (const auto& o : optimizers) {
      if (!o.optimizer || o.name.empty())
        throw PluginError("plugin " + plugin_name() +
                          ": configure_optimizers() returned an unnamed or null optimizer");
      OptimizerSlot s;
      s.name = o.name;
      s.optimizer = o.optimizer;
      for (const auto& g : o.optimizer->param_groups())
        for (const auto& p : g.params())
          if (p.requires_grad()) s.params.push_back(p);
      if (pg) {
        s.sync = std::make_unique<GradSync>(*pg, s.params, grad_transport(), t.grad_compression == "fp16");
        if (t.grad_transport == "shm" && s.sync->transport() != GradSync::Transport::kShm)
          throw Error("rank " + std::to_string(dist.rank) +
                      ": trainer.grad_transport=shm, but the ranks cannot share memory here (see above; "
                      "use auto or gloo)");
      }
      s.fused = t.fused_adam && fused_adam_applies(*o.optimizer);
      const bool leaves = std::all_of(s.params.begin(), s.params.end(), [](const torch::Tensor& p) { return p.is_leaf(); });
      if (s.fused && !s.sync && t.step_in_backward && leaves)  // DDP must average the gradients first
        s.in_backward = std::make_unique<AdamInBackward>(o.optimizer, s.params);
      slots.push_back(std::move(s));
    }
    if (pg && is_zero() && !slots.empty())
      std::printf("ddp: %d ranks on %d node%s, gradients averaged through %s\n", dist.world_size, dist.num_nodes,
                  dist.num_nodes == 1 ? "" : "s",
                  slots.front().sync->transport() == GradSync::Transport::kShm ? "shared memory (one host)"
                                                                                : "Gloo (c10d::Reducer)");
    spec = call("data_spec", [&] { return exp.system->data_spec(); });
    if (spec.kind != "images")
      throw PluginError("plugin " + plugin_name() + " wants data of kind '" + spec.kind +
                        "'; this runner provides: images");
    ctx = std::make_unique<StepContextImpl>(
        slots, device, dist.rank, dist.world_size,
        [this](const std::string& tag, const torch::Tensor& images) {
          if (is_zero()) write_image(tag, images);
        });
    if (!t.resume.empty()) {
      state = load_checkpoint(t.resume, plugin_name(), modules, optimizers, true, dist.rank);
    }
    if (pg) {  // every replica starts from rank 0's parameters and buffers
      std::vector<torch::Tensor> all = parameters();
      for (auto& b : buffers()) all.push_back(b);
      torch::NoGradGuard no_grad;
      pg->broadcast(all);
    }
  }

  // trainer.grad_transport: shared memory when every rank is on this host
  // (and the gradients are float32 on the CPU), else Gloo.
  GradSync::Transport grad_transport() const {
    const auto& t = cfg().trainer;
    const bool one_host = dist.local_world_size == dist.world_size && dist.num_nodes == 1;
    if (t.grad_transport == "shm" && !one_host)
      throw ConfigError(cfg().where("trainer.grad_transport") +
                        ": trainer.grad_transport=shm needs every rank on one host; this job has " +
                        std::to_string(dist.num_nodes) + " nodes (use auto or gloo)");
    if (t.grad_transport == "gloo" || t.grad_compression == "fp16") return GradSync::Transport::kGloo;
    if (t.grad_transport == "shm") return GradSync::Transport::kShm;
    return one_host && device.is_cpu() ? GradSync::Transport::kShm : GradSync::Transport::kGloo;
  }

  std::vector<torch::Tensor> parameters() const {
    std::vector<torch::Tensor> out;
    for (const auto& m : modules)
      for (auto& p : m.module->parameters()) out.push_back(p.detach());
    return out;
  }
  std::vector<torch::Tensor> buffers() const {
    std::vector<torch::Tensor> out;
    for (const auto& m : modules)
      for (auto& b : m.module->buffers()) out.push_back(b);
    return out;
  }

  // Rank 0's buffers (BatchNorm running stats) to every rank. DDP does this
  // before every forward; by default gantry does it whenever buffers are read
  // (samples, validation, checkpoints, the end): in train mode BatchNorm uses
  // batch statistics, so rank 0's running stats evolve exactly as under DDP.
  // trainer.broadcast_buffers=every_step restores DDP's schedule. docs/distributed.md.
  void broadcast_buffers() {
    if (!pg || buffers_.empty()) return;
    pg->broadcast(buffers_);
  }
  std::vector<torch::Tensor> buffers_;

  // Whether every rank agrees to go on: any rank's stop (signal, time) or bad
  // metric stops all of them at the same step boundary. The all-reduce of step
  // N is waited for at step N+1, so it never stalls a step: ranks stop one
  // step after the request, all at the same step.
  struct Agreement {
    bool stop = false;
    bool bad_metric = false;
  };
  torch::Tensor pending_flags_;
  std::function<void()> pending_wait_;
  std::string pending_bad_;
  Agreement agree(bool stop, const std::string& bad) {
    if (!pg) return {stop, !bad.empty()};
    Agreement a;
    if (pending_wait_) {
      pending_wait_();
      a = {pending_flags_[0].item<int>() != 0, pending_flags_[1].item<int>() != 0};
    }
    if (a.bad_metric) return a;
    pending_flags_ = torch::tensor({stop ? 1 : 0, bad.empty() ? 0 : 1}, torch::kInt32);
    pending_wait_ = pg->allreduce_max_async(pending_flags_);
    if (pending_bad_.empty()) pending_bad_ = bad;
    return a;
  }
  // Waits for the last step's agreement; a NaN/Inf seen there still fails the run.
  void finish_agreement() {
    if (!pending_wait_) return;
    pending_wait_();
    pending_wait_ = nullptr;
    if (pending_flags_[1].item<int>() != 0)
      throw TrainingError(!pending_bad_.empty() ? pending_bad_
                                                : "step " + std::to_string(state.global_step) +
                                                      ": another rank logged a NaN/Inf metric; stopping");
  }

  // Parameters bit-identical on every rank? (max and min of each tensor's sum agree)
  bool replicas_identical() {
    if (!pg) return true;
    std::vector<double> sums;
    for (const auto& p : parameters()) sums.push_back(p.to(torch::kFloat64).sum().item<double>());
    auto hi = torch::tensor(sums, torch::kFloat64), lo = -hi.clone();
    pg->allreduce_max(hi);
    pg->allreduce_max(lo);
    return torch::equal(hi, -lo);
  }

  // Runs a plugin hook; its exceptions become one line naming plugin and hook.
  template <class F>
  auto call(const char* hook, F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw PluginError("plugin " + plugin_name() + ": " + hook + " failed at step " +
                        std::to_string(state.global_step) + ": " + error_text(e));
    }
  }

  void check_data(const ImageDataset& data) const {
    if (spec.shape.empty()) return;
    const auto got = data.images.sizes().slice(1).vec();
    if (got != spec.shape) {
      std::ostringstream s;
      s << data.images_file << ": samples are " << c10::IntArrayRef(got) << ", plugin "
        << plugin_name() << " expects " << c10::IntArrayRef(spec.shape)
        << " (see the plugin's system.* shape keys)";
      throw DataError(s.str());
    }
  }

  void write_image(const std::string& tag, const torch::Tensor& images) {
    const Image8 grid = make_grid(images, 8, 2, spec.low, spec.high);
    char name[64];
    std::snprintf(name, sizeof name, "_%07ld.png", long(state.global_step));
    const std::string png = encode_png(grid);
    write_file_atomic((fs::path(run_dir) / "images" / (tag + name)).string(), png);
    if (stream)
      stream->image(tag, state.global_step, unix_time(), png, grid.width, grid.height, grid.channels);
  }

  void log_samples() {
    for (auto& m : modules) m.module->eval();
    {
      torch::NoGradGuard no_grad;
      ctx->begin(state.global_step, state.epoch);
      call("log_samples", [&] { exp.system->log_samples(*ctx); });
    }
    for (auto& m : modules) m.module->train();
  }

  // Every rank calls this at the same step (its RNG state is gathered); rank 0 writes.
  std::string save(bool final) {
    std::vector<torch::Tensor> rng;
    if (pg) {
      auto gen = at::detail::getDefaultCPUGenerator();
      torch::Tensor mine;
      {
        std::lock_guard<std::mutex> lock(gen.mutex());
        mine = gen.get_state();
      }
      rng = pg->allgather(mine);
    }
    if (!is_zero()) return "";
    char name[64];
    std::snprintf(name, sizeof name, "step_%07ld.ckpt", long(state.global_step));
    const std::string path = (fs::path(run_dir) / "checkpoints" / name).string();
    if (final && path == last_checkpoint) return path;
    save_checkpoint(path, modules, optimizers, state,
                    {plugin_name(), exp.plugin->manifest().version, cfg().to_yaml(), 0}, rng);
    last_checkpoint = path;
    // Relative to the run directory (the stream's readers may not share the runner's working directory).
    if (stream) stream->event("checkpoint", state.global_step, unix_time(), (fs::path("checkpoints") / name).string());
    prune_checkpoints((fs::path(run_dir) / "checkpoints").string(), cfg().checkpoint.keep_last);
    return path;
  }

  // Reads this step's values (a .item() per metric; those logged with sync
  // averaged over ranks). Returns a message naming the first NaN/Inf, or "".
  std::string read_values() {
    last_values.clear();
    std::vector<double> to_sync;
    for (const auto& v : ctx->values()) {
      last_values.emplace_back(v.name, v.value.item<double>());
      if (v.sync && pg) to_sync.push_back(last_values.back().second);
    }
    if (!to_sync.empty()) {
      auto t = torch::tensor(to_sync, torch::kFloat64);
      pg->allreduce_sum(t);
      size_t i = 0;
      for (size_t k = 0; k < last_values.size(); ++k)
        if (ctx->values()[k].sync) last_values[k].second = t[i++].item<double>() / dist.world_size;
    }
    for (const auto& [name, x] : last_values)
      if (!std::isfinite(x))
        return "step " + std::to_string(state.global_step) + ": " + name + " is " +
               (std::isnan(x) ? "NaN" : "Inf") + "; stopping (lower system.lr, or check the data)";
    return "";
  }

  void validate(const ImageDataset& val, DataLoader& loader) {
    for (auto& m : modules) m.module->eval();
    std::map<std::string, std::pair<double, int64_t>> sums;
    std::vector<std::string> order;
    {
      torch::NoGradGuard no_grad;
      loader.start_epoch(0);
      while (auto batch = loader.next()) {
        ctx->begin(state.global_step, state.epoch);
        call("validation_step", [&] { exp.system->validation_step(*batch, *ctx); });
        for (const auto& v : ctx->values()) {
          if (!sums.count(v.name)) order.push_back(v.name);
          auto& s = sums[v.name];
          s.first += v.value.item<double>() * batch->input.size(0);
          s.second += batch->input.size(0);
        }
      }
    }
    for (auto& m : modules) m.module->train();
    (void)val;
    if (order.empty() || !is_zero()) return;
    std::vector<std::pair<std::string, double>> row;
    for (const auto& name : order) row.emplace_back(name, sums[name].first / sums[name].second);
    metrics->write(state.global_step, state.epoch, unix_time(), row);
    if (stream) stream->scalars(state.global_step, unix_time(), row);
    std::string text = "validation, epoch " + std::to_string(state.epoch) + ":";
    for (const auto& [n, v] : row) text += " " + n + " " + std::to_string(v);
    progress->message(text);
  }

  FitResult fit(const ImageDataset& train, const ImageDataset* val) {
    const auto& t = cfg().trainer;
    check_data(train);
    if (val) check_data(*val);
    LoaderOptions lo;
    lo.batch_size = cfg().data.batch_size;
    lo.shuffle = cfg().data.shuffle;
    lo.drop_last = cfg().data.drop_last;
    lo.prefetch = cfg().data.prefetch;
    lo.seed = static_cast<uint64_t>(t.seed);
    lo.rank = dist.rank;
    lo.world_size = dist.world_size;
    lo.low = spec.low;
    lo.high = spec.high;
    DataLoader loader(train, lo);
    const int64_t per_epoch = loader.batches_per_epoch();
    if (per_epoch == 0)
      throw DataError(train.images_file + ": " + std::to_string(train.size()) +
                      " samples make no batch of " + std::to_string(lo.batch_size) +
                      " (data.drop_last is true)");
    std::unique_ptr<DataLoader> val_loader;
    if (val && t.val_every_n_epochs > 0) {
      LoaderOptions vo = lo;
      vo.shuffle = false;
      vo.drop_last = false;
      val_loader = std::make_unique<DataLoader>(*val, vo);
    }

    int64_t total = -1;
    if (t.max_epochs > 0) total = t.max_epochs * per_epoch;
    if (t.max_steps > 0) total = total > 0 ? std::min(total, t.max_steps) : t.max_steps;
    if (is_zero()) {
      metrics = std::make_unique<MetricsCsv>((fs::path(run_dir) / "metrics.csv").string());
      if (state.global_step > 0) metrics->truncate_after(state.global_step);  // resumed
      stream = std::make_unique<RunStream>(run_dir);
      if (cfg().monitor.enabled) {
        const std::string line = stream->serve(cfg().monitor.host, static_cast<int>(cfg().monitor.port),
                                               cfg().monitor.token, cfg().name);
        write_file_atomic((fs::path(run_dir) / "monitor.txt").string(), line + "\n");
        std::printf("monitor: %s\n", line.c_str());
        std::fflush(stdout);
      }
      wire::RunInfo info;
      info.name = cfg().name;
      info.plugin = plugin_name();
      info.plugin_version = exp.plugin->manifest().version;
      info.manifest = exp.plugin->manifest().summary();
      info.config_yaml = cfg().to_yaml();
      info.world_size = static_cast<uint32_t>(dist.world_size);
      info.num_nodes = static_cast<uint32_t>(dist.num_nodes);
      info.start_time = unix_time();
      info.total_steps = total;
      stream->run_info(std::move(info));
      if (state.global_step > 0)  // clients drop points after this step that came before it
        stream->event("resumed", state.global_step, unix_time(), "resumed from " + t.resume);
    }
    status = std::make_unique<RankStatusReporter>(dist.rank, pg.get(), stream.get(), run_dir);
    progress = std::make_unique<Progress>(
        is_zero() ? Progress::parse_mode(t.progress, stdout) : Progress::Mode::kNone, total,
        per_epoch, lo.batch_size * dist.world_size);
    buffers_ = buffers();
    const double max_time = t.max_time_seconds();
    const auto start = std::chrono::steady_clock::now();
    auto elapsed = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };

    FitResult result;
    if (state.global_step == 0 && is_zero()) log_samples();  // the grid before any training
    int64_t last_image_step = state.global_step, last_row_step = -1;
    bool done = (total > 0 && state.global_step >= total);
    while (!done) {
      loader.start_epoch(state.epoch, state.batch_in_epoch);
      while (!done) {
        auto batch = loader.next();
        if (!batch) break;
        batch->input = batch->input.to(device);
        if (batch->target.defined()) batch->target = batch->target.to(device);
        if (t.broadcast_buffers == "every_step") broadcast_buffers();
        ctx->begin(state.global_step, state.epoch);
        call("training_step", [&] { exp.system->training_step(*batch, *ctx); });
        ++state.global_step;
        ++state.batch_in_epoch;
        const std::string bad = read_values();
        const bool want_stop = (t.max_steps > 0 && state.global_step >= t.max_steps) ||
                               (max_time > 0 && elapsed() >= max_time) || stop_requested();
        const Agreement agreed = agree(want_stop, bad);
        if (agreed.bad_metric) {
          const std::string mine = pg ? pending_bad_ : bad;
          if (stream) stream->event("nan", state.global_step, unix_time(), mine);
          throw TrainingError(!mine.empty() ? mine
                                            : "step " + std::to_string(state.global_step - 1) +
                                                  ": another rank logged a NaN/Inf metric; stopping");
        }
        const bool image_due = t.image_every_n_steps > 0 && state.global_step % t.image_every_n_steps == 0;
        const bool ckpt_due = cfg().checkpoint.every_n_steps > 0 &&
                              state.global_step % cfg().checkpoint.every_n_steps == 0;
        if ((image_due || ckpt_due) && t.broadcast_buffers != "every_step") broadcast_buffers();
        if (state.global_step % t.log_every_n_steps == 0) status->report(state.global_step, lo.batch_size);
        if (is_zero() && state.global_step % t.log_every_n_steps == 0) {
          metrics->write(state.global_step, state.epoch, unix_time(), last_values);
          if (stream) stream->scalars(state.global_step, unix_time(), last_values);
          last_row_step = state.global_step;
        }
        progress->update(state.global_step, state.epoch, state.batch_in_epoch, last_values);
        if (is_zero() && image_due) {
          log_samples();
          last_image_step = state.global_step;
        }
        if (ckpt_due) {
          save(false);
          if (metrics) metrics->flush();
        }
        if (agreed.stop || (t.max_steps > 0 && state.global_step >= t.max_steps)) done = true;
      }
      if (state.batch_in_epoch >= per_epoch) {  // the epoch is complete
        if (val_loader && (state.epoch + 1) % t.val_every_n_epochs == 0) {
          broadcast_buffers();
          validate(*val, *val_loader);
        }
        ++state.epoch;
        state.batch_in_epoch = 0;
        if (t.max_epochs > 0 && state.epoch >= t.max_epochs) done = true;
      }
    }
    result.seconds = elapsed();
    finish_agreement();
    status->report(state.global_step, lo.batch_size, false);
    broadcast_buffers();  // a collective: every rank has published its final status
    result.replicas_identical = replicas_identical();
    status->write();
    if (metrics && last_row_step != state.global_step && !last_values.empty()) {
      metrics->write(state.global_step, state.epoch, unix_time(), last_values);
      if (stream) stream->scalars(state.global_step, unix_time(), last_values);
    }
    if (metrics) metrics->flush();
    if (is_zero() && last_image_step != state.global_step) log_samples();
    progress->finish();
    result.stop_signal = stop_requested();
    result.last_checkpoint = save(true);
    if (stream) {
      const int sig = stop_requested();
      stream->event(sig == SIGUSR1 || sig == SIGUSR2 ? "requeued" : sig ? "stopped" : "finished",
                    state.global_step, unix_time(),
                    sig ? "stopped by signal " + std::to_string(sig) : "finished");
      stream->flush();
    }
    result.state = state;
    result.last_values = last_values;
    return result;
  }
};

Trainer::Trainer(Experiment experiment, std::string run_dir, DistEnv dist)
    : impl_(std::make_unique<Impl>()) {
  impl_->exp = std::move(experiment);
  impl_->run_dir = std::move(run_dir);
  impl_->dist = std::move(dist);
  for (const char* sub : {"images", "checkpoints"}) {
    if (impl_->dist.rank != 0) break;
    std::error_code ec;
    fs::create_directories(fs::path(impl_->run_dir) / sub, ec);
    if (ec) throw Error("cannot create " + (fs::path(impl_->run_dir) / sub).string() + ": " + ec.message());
  }
  impl_->setup();
}

Trainer::~Trainer() = default;

FitResult Trainer::fit(const ImageDataset& train, const ImageDataset* val) {
  try {
    return impl_->fit(train, val);
  } catch (const std::exception& e) {
    if (impl_->metrics) impl_->metrics->flush();
    if (impl_->stream) {
      impl_->stream->event("failed", impl_->state.global_step,
                           unix_time(),
                           e.what());
      impl_->stream->flush();
    }
    throw;
  }
}

}  // namespace gantry
