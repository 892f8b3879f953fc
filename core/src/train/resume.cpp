#include "train/resume.hpp"

#include <cstdio>

#include "gantry/errors.hpp"

namespace gantry {

namespace {

// Changes that are not the run's own: where it resumes from, the stream
// server, how it was submitted.
bool not_the_runs(const std::string& key) {
  return key == "trainer.resume" || key.rfind("monitor.", 0) == 0 || key.rfind("slurm.", 0) == 0;
}

// What decides the order and grouping of an epoch's samples on each rank.
bool decides_the_epoch(const std::string& key) {
  return key == "data.batch_size" || key == "data.shuffle" || key == "data.drop_last" || key == "trainer.seed" ||
         key == "trainer.devices" || key == "trainer.num_nodes";
}

}  // namespace

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
    if (mid_epoch && decides_the_epoch(c.key))
      throw ConfigError(now.where(c.key) + ": resume: " + c.key + " " + c.before + " -> " + c.after + ": checkpoint " +
                        checkpoint + " is mid-epoch (batch " + std::to_string(resumed.batch_in_epoch) +
                        (batches > 0 ? " of " + std::to_string(batches) : std::string()) + " of epoch " +
                        std::to_string(resumed.epoch) + "), and " + c.key +
                        " decides which samples the rest of that epoch holds: resume with " + c.before +
                        ", or from a checkpoint at an epoch's end");
  if (print)
    for (const ConfigChange& c : changes)
      std::printf("resume: %s %s -> %s\n", c.key.c_str(), c.before.c_str(), c.after.c_str());
  return changes;
}

}  // namespace gantry
