// Where a callback runs among the others (train/callback.hpp's Callbacks
// calls them in this order at every point), and each slot's name in the
// profiler's table (train/profile.cpp): the one list of the built-in slots.
#pragma once

#include <array>
#include <cstddef>

namespace gantry {

/// Where a callback runs among the others, at every point, first to last.
enum class CallbackSlot {
  kEma,           ///< first: a batch's samples, rows and checkpoint see its EMA update
  kRankStatus,    ///< every rank's status, before rank 0 writes rows
  kSamples,       ///< before metrics: the final grid's logged values join the final row
  kLrSchedulers,  ///< sets the lrs before each batch; before metrics: the lrs join each row
  kThroughput,    ///< rank 0, trainer.log_throughput: samples/s, FLOP/s, MFU join each row
  kMetrics,       ///< the row, after everything that adds to it
  kProgress,      ///< after the row whose values it prints
  kValidation,    ///< at an epoch's end: its own row, before the checkpoint
  kQuality,       ///< its own row at its step, before the checkpoint
  kHistograms,    ///< TensorBoard only, no row: the parameters and the gradients kept from the step
  kMonitored,     ///< after every row of its step (training, validation, score): the best checkpoints, early stopping
  kUser,          ///< added by whoever drives the Trainer (Trainer::add_callback)
  kReplicas,      ///< before the checkpoint: diverged replicas fail the run before rank 0's copy is saved
  kCheckpoint,    ///< last: a checkpoint holds what every other callback did at its step
};

/// Each slot's row in the profiler's table, by CallbackSlot.
inline constexpr std::array kCallbackSlotNames{
    "callback: ema",        "callback: rank status", "callback: samples",   "callback: lr schedulers",
    "callback: throughput", "callback: metrics",     "callback: progress",  "callback: validation",
    "callback: quality",    "callback: histograms",  "callback: monitored", "callback: user",
    "callback: replicas",   "callback: checkpoint",
};
static_assert(kCallbackSlotNames.size() == size_t(CallbackSlot::kCheckpoint) + 1, "a name for every CallbackSlot");

}  // namespace gantry
