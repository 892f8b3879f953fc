// A resume against its checkpoint: the config it was written with compared
// with this run's, key by key. What cannot change is refused in one line; every
// other change is said on rank 0 and applied (the run uses the new config; the
// lr schedulers callback applies a changed lr and a schedule's new length).
#pragma once

#include "config/config.hpp"
#include "train/checkpoint.hpp"

namespace gantry {

/// TrainState::extra key: the batches per epoch of the run that wrote the
/// checkpoint (whether its batch_in_epoch is mid-epoch).
inline constexpr const char* kPerEpochKey = "fit.batches_per_epoch";

/// `now.trainer.resume` names the checkpoint `resumed` and `meta` came from
/// (load_checkpoint's read: the file is not read again). Refuses
/// (ConfigError naming the key) a change of data.batch_size, data.shuffle,
/// data.drop_last, trainer.seed, trainer.devices or trainer.num_nodes when the
/// checkpoint is mid-epoch: they decide which samples the rest of that epoch
/// holds. Prints each other change as `resume: <key> <before> -> <after>` when
/// `print`. Returns the changes it found.
std::vector<ConfigChange> check_resume_changes(const ExperimentConfig& now, const TrainState& resumed,
                                               const CheckpointMeta& meta, bool print);

}  // namespace gantry
