#include "train/experiment.hpp"

#include <torch/torch.h>

#include <filesystem>
#include <sstream>

#include "data/image_dataset.hpp"
#include "gantry/errors.hpp"
#include "optim/ema.hpp"
#include "plugin/plugin_loader.hpp"
#include "runtime/runtime.hpp"

namespace fs = std::filesystem;

namespace gantry {

Experiment Experiment::build(const ExperimentConfig& config) {
  Experiment e;
  e.config = config;
  // Seed before the plugin builds its modules: their initialisation is part of the run.
  torch::manual_seed(static_cast<uint64_t>(config.trainer.seed));
  SystemParams params(e.config);
  e.system = std::make_shared<PluginSystem>(Plugin::find(config.system.plugin), params);
  params.check_all_used(e.system->name());
  e.train_data = e.system->train_dataset();
  e.val_data = e.system->val_dataset();
  e.own_data = e.train_data != nullptr;
  if (e.own_data) e.data_name = "plugin " + e.system->name() + "'s train_dataset()";
  if (e.train_data && e.train_data->size() <= 0)
    throw PluginError("plugin " + e.system->name() + ": train_dataset() has " + std::to_string(e.train_data->size()) +
                      " samples");
  return e;
}

Experiment Experiment::build(const ExperimentConfig& config, const ImageDataset& train, const ImageDataset* val) {
  Experiment e = build(config);
  e.use_images(train, val);
  return e;
}

void Experiment::use_images(const ImageDataset& train, const ImageDataset* val) {
  if (own_data)
    throw PluginError("plugin " + system->name() + " brings its own data (train_dataset()): it takes no images");
  const DataSpec spec = system->data_spec();
  for (const ImageDataset* d : {&train, val}) {  // the one shape check of images
    if (!d || spec.shape.empty()) continue;
    const auto got = d->images.sizes().slice(1).vec();
    if (got != spec.shape) {
      std::ostringstream s;
      s << d->images_file << ": samples are " << c10::IntArrayRef(got) << ", plugin " << system->name() << " expects "
        << c10::IntArrayRef(spec.shape) << " (see the plugin's system.* shape keys)";
      throw DataError(s.str());
    }
  }
  train_data = std::make_shared<ImageTensorDataset>(train, spec.low, spec.high);
  val_data = val ? std::make_shared<ImageTensorDataset>(*val, spec.low, spec.high) : nullptr;
  data_name = train.images_file;
}

TrainedSystem Experiment::load_trained(const std::string& checkpoint, torch::Device device, const std::string& plugin) {
  return load_trained(*CheckpointFile::read(checkpoint), device, plugin);
}

TrainedSystem Experiment::load_trained(const CheckpointFile& file, torch::Device device, const std::string& plugin) {
  const std::string& checkpoint = file.path();
  const CheckpointMeta& meta = file.meta();
  ExperimentConfig cfg = ExperimentConfig::parse(meta.config_yaml, checkpoint + " (config)");
  TrainedSystem t;
  const std::string recorded = cfg.system.plugin;
  const bool is_path = recorded.find('/') != std::string::npos || fs::path(recorded).extension() == ".so";
  std::error_code ec;
  if (!plugin.empty()) {
    cfg.system.plugin = plugin;
  } else if (is_path && !fs::exists(recorded, ec)) {
    // The build directory moved: the plugin of the checkpoint's name on the
    // search path (load_checkpoint then checks that the manifest's name matches).
    std::shared_ptr<Plugin> found;
    try {
      found = Plugin::find(meta.plugin);
    } catch (const Error&) {
      std::string dirs;
      for (const auto& d : Plugin::search_path()) dirs += (dirs.empty() ? "" : ", ") + d;
      throw PluginError("checkpoint " + checkpoint + " was written with plugin " + meta.plugin + " from " + recorded +
                        ", which is gone, and no lib" + meta.plugin + ".so is on the plugin search path (" + dirs +
                        "): give the plugin with --plugin PATH, or add its folder to GANTRY_PLUGIN_PATH");
    }
    cfg.system.plugin = meta.plugin;
    t.plugin_note = "plugin " + meta.plugin + ": " + recorded + " (recorded in the checkpoint) is gone; using " +
                    found->manifest().path + " from the plugin search path";
  }
  {
    GlobalRngGuard rng(device);  // building the system seeds the global generator
    t.experiment = build(cfg);
  }
  t.modules = t.experiment.system->modules();
  t.saved = file.load(t.experiment.system->name(), t.modules, {}, false);
  if (cfg.ema.decay > 0) t.ema_tensors = load_ema_into(t.saved.extra, t.modules);
  for (auto& m : t.modules) {
    m.module->to(device);
    m.module->eval();
  }
  return t;
}

void check_data_kind(const DataSpec& spec, const std::string& plugin) {
  if (spec.kind != "images")
    throw PluginError("plugin " + plugin + " wants data of kind '" + spec.kind + "'; this runner provides: images");
}

}  // namespace gantry
