// A resume against its checkpoint: the config it was written with compared
// with this run's, key by key. What cannot change is refused in one line; every
// other change is said on rank 0 and applied (the run uses the new config; the
// lr schedulers callback applies a changed lr and a schedule's new length).
#pragma once

#include "config/config.hpp"
#include "checkpoint/file.hpp"

namespace gantry {

/// TrainState::extra key: the batches per epoch of the run that wrote the
/// checkpoint (whether its batch_in_epoch is mid-epoch).
inline constexpr const char* kPerEpochKey = "fit.batches_per_epoch";
/// TrainState::extra key: where in its epoch's permutation the current
/// epoch's loader began (0 except in an epoch resumed at another world size
/// or batch: the samples before it were trained by the run before).
inline constexpr const char* kEpochFromKey = "fit.epoch_from_sample";

/// The ranks and per-rank batch a checkpoint was trained with (0: not known:
/// a checkpoint of an older gantry).
struct CheckpointShape {
  int64_t world = 0;
  int64_t batch_size = 0;
};
CheckpointShape checkpoint_shape(const CheckpointMeta& meta);

/// A resume at another world size (`world` ranks now; `was`: the
/// checkpoint's checkpoint_shape): the per-rank batch this run trains with. data.keep_batch per_rank: `now`'s
/// data.batch_size; global: the checkpoint's batch_size x its ranks / `world`, unless `now` sets another
/// data.batch_size than the checkpoint's (an explicit choice wins). Says which, and what changed, in one line when
/// `print`. Throws ConfigError naming data.keep_batch when the global batch is not divisible by `world`. The same world
/// size: `now`'s data.batch_size, nothing said.
int64_t resized_batch(const ExperimentConfig& now, const CheckpointShape& was, int world, bool print);

/// `now.trainer.resume` names the checkpoint `resumed` and `meta` came from
/// (load_checkpoint's read: the file is not read again). Refuses
/// (ConfigError naming the key) a change of data.shuffle, data.drop_last or
/// trainer.seed when the checkpoint is mid-epoch: they decide which samples
/// the rest of that epoch holds; so do data.batch_size, trainer.devices and
/// trainer.num_nodes when the epoch is cut by trainer.limit_train_batches or
/// overfit_batches (otherwise the epoch goes on from the sample it reached,
/// the trainer's kEpochFromKey). Prints each other change as `resume: <key> <before> -> <after>` when
/// `print`. Returns the changes it found.
std::vector<ConfigChange> check_resume_changes(const ExperimentConfig& now, const TrainState& resumed,
                                               const CheckpointMeta& meta, bool print);

}  // namespace gantry
