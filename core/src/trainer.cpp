// The training loop. Sections:
//   1. Experiment::build: plugin + system from a config
//   2. StepContextImpl: what training_step sees (optimize, log, log_image)
//   3. Trainer::Impl: setup, the loop, samples, checkpoints, validation
#include "trainer.hpp"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "data_loader.hpp"
#include "errors.hpp"
#include "files.hpp"
#include "image_grid.hpp"
#include "metrics_csv.hpp"
#include "progress.hpp"
#include "runtime.hpp"

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

// ---- 2. StepContextImpl -----------------------------------------------------

namespace {

std::string what_of(const std::exception& e) {
  if (const auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
  return e.what();
}

struct OptimizerSlot {
  std::string name;
  std::shared_ptr<torch::optim::Optimizer> optimizer;
  std::vector<torch::Tensor> params;  // those with requires_grad: backward's inputs
};

class StepContextImpl final : public StepContext {
 public:
  using ImageSink = std::function<void(const std::string&, const torch::Tensor&)>;

  StepContextImpl(std::vector<OptimizerSlot>& slots, torch::Device device, ImageSink sink)
      : slots_(slots), device_(device), image_sink_(std::move(sink)) {}

  void begin(int64_t step, int64_t epoch) {
    step_ = step;
    epoch_ = epoch;
    values_.clear();
  }
  const std::vector<std::pair<std::string, torch::Tensor>>& values() const { return values_; }

  void optimize(const std::string& name, const torch::Tensor& loss) override {
    OptimizerSlot* slot = nullptr;
    for (auto& s : slots_)
      if (s.name == name) slot = &s;
    if (!slot) {
      std::string names;
      for (const auto& s : slots_) names += (names.empty() ? "" : ", ") + s.name;
      throw std::invalid_argument("ctx.optimize(\"" + name + "\"): no optimizer named '" + name +
                                  "'; configure_optimizers() returned: " + names);
    }
    TORCH_CHECK(loss.defined() && loss.numel() == 1,
                "ctx.optimize(\"", name, "\") needs a scalar loss, got shape ",
                loss.defined() ? loss.sizes() : at::IntArrayRef{});
    TORCH_CHECK(loss.requires_grad(), "ctx.optimize(\"", name,
                "\"): the loss does not require grad (computed under no_grad, or detached?)");
    // Backward into this optimizer's parameters only: autograd skips the weight
    // gradients of every other module (what Lightning's toggle_optimizer is for,
    // without having to call it before the forward).
    loss.backward({}, c10::nullopt, false, slot->params);
    slot->optimizer->step();
    for (auto& p : slot->params) p.mutable_grad().reset();  // zero_grad(set_to_none=True)
  }

  void log(const std::string& name, const torch::Tensor& value, bool sync) override {
    (void)sync;  // one process: already the global value
    TORCH_CHECK(value.numel() == 1, "ctx.log(\"", name, "\") needs a scalar, got shape ",
                value.sizes());
    for (auto& [n, v] : values_)
      if (n == name) {
        v = value.detach();
        return;
      }
    values_.emplace_back(name, value.detach());
  }

  void log(const std::string& name, double value, bool sync) override {
    log(name, torch::scalar_tensor(value, torch::kFloat64), sync);
  }

  void log_image(const std::string& tag, const torch::Tensor& images) override {
    image_sink_(tag, images);
  }

  int64_t global_step() const override { return step_; }
  int64_t epoch() const override { return epoch_; }
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  torch::Device device() const override { return device_; }

 private:
  std::vector<OptimizerSlot>& slots_;
  torch::Device device_;
  ImageSink image_sink_;
  int64_t step_ = 0, epoch_ = 0;
  std::vector<std::pair<std::string, torch::Tensor>> values_;
};

double unix_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

// ---- 3. Trainer -------------------------------------------------------------

struct Trainer::Impl {
  Experiment exp;
  std::string run_dir;
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
  std::unique_ptr<Progress> progress;
  std::vector<std::pair<std::string, double>> last_values;
  std::string last_checkpoint;

  void setup() {
    const auto& t = cfg().trainer;
    if (t.accelerator == "cuda" && !torch::cuda::is_available())
      throw ConfigError(cfg().where("trainer.accelerator") +
                        ": trainer.accelerator is cuda, but no CUDA device is available to this "
                        "LibTorch (use cpu or auto)");
    if (t.devices * t.num_nodes != 1)
      throw ConfigError(cfg().where("trainer.devices") +
                        ": trainer.devices x trainer.num_nodes is " +
                        std::to_string(t.devices * t.num_nodes) +
                        ", but this process is a single rank: use `gantry launch` for several");
    if (t.accelerator != "cpu" && torch::cuda::is_available()) device = torch::Device(torch::kCUDA, 0);
    torch::manual_seed(static_cast<uint64_t>(t.seed));

    modules = call("modules", [&] { return exp.system->modules(); });
    if (modules.empty()) throw PluginError("plugin " + plugin_name() + ": modules() returned none");
    for (auto& m : modules) {
      if (!m.module)
        throw PluginError("plugin " + plugin_name() + ": modules() returned a null '" + m.name + "'");
      m.module->to(device);
      m.module->train();
    }
    optimizers = call("configure_optimizers", [&] { return exp.system->configure_optimizers(); });
    if (optimizers.empty())
      throw PluginError("plugin " + plugin_name() + ": configure_optimizers() returned none");
    for (const auto& o : optimizers) {
      if (!o.optimizer || o.name.empty())
        throw PluginError("plugin " + plugin_name() +
                          ": configure_optimizers() returned an unnamed or null optimizer");
      OptimizerSlot s{o.name, o.optimizer, {}};
      for (const auto& g : o.optimizer->param_groups())
        for (const auto& p : g.params())
          if (p.requires_grad()) s.params.push_back(p);
      slots.push_back(std::move(s));
    }
    spec = call("data_spec", [&] { return exp.system->data_spec(); });
    if (spec.kind != "images")
      throw PluginError("plugin " + plugin_name() + " wants data of kind '" + spec.kind +
                        "'; this runner provides: images");
    ctx = std::make_unique<StepContextImpl>(
        slots, device, [this](const std::string& tag, const torch::Tensor& images) {
          write_image(tag, images);
        });
    if (!t.resume.empty()) {
      state = load_checkpoint(t.resume, plugin_name(), modules, optimizers, true);
    }
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
                        std::to_string(state.global_step) + ": " + what_of(e));
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
    write_file_atomic((fs::path(run_dir) / "images" / (tag + name)).string(), encode_png(grid));
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

  std::string save(bool final) {
    char name[64];
    std::snprintf(name, sizeof name, "step_%07ld.ckpt", long(state.global_step));
    const std::string path = (fs::path(run_dir) / "checkpoints" / name).string();
    if (final && path == last_checkpoint) return path;
    save_checkpoint(path, modules, optimizers, state,
                    {plugin_name(), exp.plugin->manifest().version, cfg().to_yaml()});
    last_checkpoint = path;
    return path;
  }

  // Reads this step's values (a .item() per metric), stopping on NaN/Inf.
  void read_values() {
    last_values.clear();
    for (const auto& [name, v] : ctx->values()) {
      const double x = v.item<double>();
      if (!std::isfinite(x))
        throw TrainingError("step " + std::to_string(state.global_step) + ": " + name + " is " +
                            (std::isnan(x) ? "NaN" : "Inf") +
                            "; stopping (lower system.lr, or check the data)");
      last_values.emplace_back(name, x);
    }
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
        for (const auto& [name, v] : ctx->values()) {
          if (!sums.count(name)) order.push_back(name);
          auto& s = sums[name];
          s.first += v.item<double>() * batch->input.size(0);
          s.second += batch->input.size(0);
        }
      }
    }
    for (auto& m : modules) m.module->train();
    (void)val;
    if (order.empty()) return;
    std::vector<std::pair<std::string, double>> row;
    for (const auto& name : order) row.emplace_back(name, sums[name].first / sums[name].second);
    metrics->write(state.global_step, state.epoch, unix_time(), row);
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
    metrics = std::make_unique<MetricsCsv>((fs::path(run_dir) / "metrics.csv").string());
    progress = std::make_unique<Progress>(Progress::parse_mode(t.progress, stdout), total,
                                          per_epoch, lo.batch_size);
    const double max_time = t.max_time_seconds();
    const auto start = std::chrono::steady_clock::now();
    auto elapsed = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };

    FitResult result;
    if (state.global_step == 0) log_samples();  // the grid before any training
    int64_t last_image_step = state.global_step, last_row_step = -1;
    bool done = (total > 0 && state.global_step >= total);
    while (!done) {
      loader.start_epoch(state.epoch, state.batch_in_epoch);
      while (!done) {
        auto batch = loader.next();
        if (!batch) break;
        batch->input = batch->input.to(device);
        if (batch->target.defined()) batch->target = batch->target.to(device);
        ctx->begin(state.global_step, state.epoch);
        call("training_step", [&] { exp.system->training_step(*batch, *ctx); });
        ++state.global_step;
        ++state.batch_in_epoch;
        read_values();
        if (state.global_step % t.log_every_n_steps == 0) {
          metrics->write(state.global_step, state.epoch, unix_time(), last_values);
          last_row_step = state.global_step;
        }
        progress->update(state.global_step, state.epoch, state.batch_in_epoch, last_values);
        if (t.image_every_n_steps > 0 && state.global_step % t.image_every_n_steps == 0) {
          log_samples();
          last_image_step = state.global_step;
        }
        if (cfg().checkpoint.every_n_steps > 0 &&
            state.global_step % cfg().checkpoint.every_n_steps == 0) {
          save(false);
          metrics->flush();
        }
        if ((t.max_steps > 0 && state.global_step >= t.max_steps) ||
            (max_time > 0 && elapsed() >= max_time) || stop_requested())
          done = true;
      }
      if (state.batch_in_epoch >= per_epoch) {  // the epoch is complete
        if (val_loader && (state.epoch + 1) % t.val_every_n_epochs == 0) validate(*val, *val_loader);
        ++state.epoch;
        state.batch_in_epoch = 0;
        if (t.max_epochs > 0 && state.epoch >= t.max_epochs) done = true;
      }
    }
    result.seconds = elapsed();
    if (last_row_step != state.global_step && !last_values.empty())
      metrics->write(state.global_step, state.epoch, unix_time(), last_values);
    metrics->flush();
    if (last_image_step != state.global_step) log_samples();
    progress->finish();
    result.stop_signal = stop_requested();
    result.last_checkpoint = save(true);
    result.state = state;
    result.last_values = last_values;
    return result;
  }
};

Trainer::Trainer(Experiment experiment, std::string run_dir) : impl_(std::make_unique<Impl>()) {
  impl_->exp = std::move(experiment);
  impl_->run_dir = std::move(run_dir);
  for (const char* sub : {"images", "checkpoints"}) {
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
  } catch (const TrainingError&) {
    if (impl_->metrics) impl_->metrics->flush();
    throw;
  }
}

}  // namespace gantry
