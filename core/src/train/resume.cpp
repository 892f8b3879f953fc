#include "train/resume.hpp"

#include <cstdio>
#include <optional>

#include "gantry/errors.hpp"

namespace gantry {

namespace {

// Changes that are not the run's own: where it resumes from and where it
// pauses next, the stream server, how it was submitted.
bool not_the_runs(const std::string& key) {
  return key == "trainer.resume" || key == "trainer.pause_at_step" || key.rfind("monitor.", 0) == 0 ||
         key.rfind("slurm.", 0) == 0;
}

// What decides which samples an epoch holds, and their order.
bool decides_the_epoch(const std::string& key) {
  return key == "data.shuffle" || key == "data.drop_last" || key == "trainer.seed";
}

// What decides how an epoch's samples are grouped into each rank's batches:
// a resume goes on from the sample the epoch reached, unless the epoch is cut
// at a number of batches (which would then mean other samples).
bool shapes_the_batches(const std::string& key) {
  return key == "data.batch_size" || key == "trainer.devices" || key == "trainer.num_nodes";
}

bool cuts_epochs(const ExperimentConfig& c) {
  return !c.trainer.limit_train_batches.all() || !c.trainer.overfit_batches.none();
}

std::optional<ExperimentConfig> config_of(const CheckpointMeta& meta, const std::string& checkpoint) {
  try {
    return ExperimentConfig::parse(meta.config_yaml, checkpoint + " (its config)");
  } catch (const ConfigError&) {  // written by an older gantry whose keys this one lacks
    return std::nullopt;
  }
}

}  // namespace

CheckpointShape checkpoint_shape(const CheckpointMeta& meta) {
  CheckpointShape shape;
  const auto before = config_of(meta, "");
  if (!before) return shape;
  shape.batch_size = before->data.batch_size;
  shape.world = meta.world_size > 0 ? meta.world_size : before->trainer.devices * before->trainer.num_nodes;
  return shape;
}

int64_t resized_batch(const ExperimentConfig& now, const CheckpointShape& was, int world, bool print) {
  const int64_t batch = now.data.batch_size;
  if (was.world <= 0 || was.world == world) return batch;
  const int64_t global = was.batch_size * was.world;
  const std::string head = "resize: " + std::to_string(was.world) + " ranks -> " + std::to_string(world) + ": ";
  std::string line;
  int64_t per_rank = batch;
  if (now.data.keep_batch == KeepBatch::kGlobal && batch == was.batch_size) {
    if (global % world)
      throw ConfigError(now.where("data.keep_batch") + ": data.keep_batch global: the checkpoint's global batch " +
                        std::to_string(global) + " (" + std::to_string(was.batch_size) + " x " +
                        std::to_string(was.world) + " ranks) is not divisible by " + std::to_string(world) +
                        " ranks: resume with a world size that divides it, or data.keep_batch=per_rank");
    per_rank = global / world;
    line = head + "data.keep_batch global keeps the global batch " + std::to_string(global) + ": data.batch_size " +
           std::to_string(batch) + " -> " + std::to_string(per_rank) + " per rank";
  } else {
    line = head +
           (now.data.keep_batch == KeepBatch::kGlobal
                ? "data.batch_size set to " + std::to_string(batch) + " (not the checkpoint's " +
                      std::to_string(was.batch_size) + ")"
                : "data.keep_batch per_rank keeps data.batch_size " + std::to_string(batch)) +
           ": the global batch " + std::to_string(global) + " -> " + std::to_string(batch * world);
  }
  if (print)
    std::printf("%s (learning rates as configured: scale them yourself if the global batch changed)\n", line.c_str());
  return per_rank;
}

std::vector<ConfigChange> check_resume_changes(const ExperimentConfig& now, const TrainState& resumed,
                                               const CheckpointMeta& meta, bool print) {
  const std::string& checkpoint = now.trainer.resume;
  ExperimentConfig before;
  try {
    before = ExperimentConfig::parse(meta.config_yaml, checkpoint + " (its config)");
  } catch (const ConfigError& e) {  // written by an older gantry whose keys this one lacks
    if (print)
      std::printf("resume: the checkpoint's config is not this gantry's (%s): changes not compared\n", e.what());
    return {};
  }
  const bool cut = cuts_epochs(before) || cuts_epochs(now);
  // system.plugin: the checkpoint's plugin by name is checked when it loads;
  // another path to it is a moved build directory.
  std::vector<ConfigChange> changes;
  for (ConfigChange& c : config_changes(before, now))
    if (!not_the_runs(c.key) && c.key != "system.plugin") changes.push_back(std::move(c));
  const auto per_epoch = resumed.extra.find(kPerEpochKey);
  const int64_t batches = per_epoch != resumed.extra.end() && per_epoch->second.numel() == 1
                              ? per_epoch->second.item<int64_t>()
                              : -1;  // an older checkpoint: mid-epoch whenever a batch of it ran
  const bool mid_epoch = resumed.batch_in_epoch > 0 && (batches < 0 || resumed.batch_in_epoch < batches);
  for (const ConfigChange& c : changes)
    if (mid_epoch && (decides_the_epoch(c.key) || (cut && shapes_the_batches(c.key))))
      throw ConfigError(now.where(c.key) + ": resume: " + c.key + " " + c.before + " -> " + c.after + ": checkpoint " +
                        checkpoint + " is mid-epoch (batch " + std::to_string(resumed.batch_in_epoch) +
                        (batches > 0 ? " of " + std::to_string(batches) : std::string()) + " of epoch " +
                        std::to_string(resumed.epoch) + "), and " + c.key +
                        (decides_the_epoch(c.key) ? std::string(" decides which samples the rest of that epoch holds")
                                                  : std::string(" regroups an epoch that trainer.limit_train_batches "
                                                                "or overfit_batches cuts at a number of batches")) +
                        ": resume with " + c.before + ", or from a checkpoint at an epoch's end");
  if (print)
    for (const ConfigChange& c : changes)
      std::printf("resume: %s %s -> %s\n", c.key.c_str(), c.before.c_str(), c.after.c_str());
  return changes;
}

}  // namespace gantry
