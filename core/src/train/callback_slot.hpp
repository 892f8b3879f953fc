// The built-in callbacks, one row each, in the order they run at every point
// (train/callback.hpp's Callbacks calls them so): the slot, its name in the
// profiler's table (train/profile.cpp) and the function that builds it, in
// the callback's own file under train/callbacks/ (the quality score's in
// quality/quality_callback.cpp). A builder returns null where its callback
// has nothing to do in this fit (another rank, a key unset). A new callback
// is its file plus one row here (docs/trainer.md shows one).
#pragma once

#include <array>
#include <cstddef>

// X(slot, "name", builder); each row's comment says why it is where it is.
#define GANTRY_CALLBACKS(X)                                                                                            \
  X(kEma, "ema", ema_callback)                        /* first: a batch's samples, rows and checkpoint see its EMA     \
                                                         update */                                                     \
  X(kRankStatus, "rank status", rank_status_callback) /* every rank's status, before rank 0 writes rows */             \
  X(kSamples, "samples", samples_callback)            /* before metrics: the final grid's logged values join the final \
                                                         row */                                                        \
  X(kLrSchedulers, "lr schedulers", lr_scheduler_callback) /* sets the lrs before each batch; before metrics: the      \
                                                              lrs join each row */                                     \
  X(kThroughput, "throughput", throughput_callback) /* rank 0, trainer.log_throughput: samples/s, FLOP/s, MFU join     \
                                                       each row */                                                     \
  X(kMetrics, "metrics", metrics_callback)          /* the row, after everything that adds to it */                    \
  X(kProgress, "progress", progress_callback)       /* after the row whose values it prints */                         \
  X(kValidation, "validation", validation_callback) /* at an epoch's end: its own row, before the checkpoint */        \
  X(kQuality, "quality", quality_callback)          /* its own row at its step, before the checkpoint */               \
  X(kHistograms, "histograms", histograms_callback) /* TensorBoard only, no row: the parameters and the gradients      \
                                                       kept from the step */                                           \
  X(kMonitored, "monitored", monitored_callback)    /* after every row of its step (training, validation, score):      \
                                                       the best checkpoints, early stopping */                         \
  X(kUser, "user", added_by_driver)                 /* added by whoever drives the Trainer (Trainer::add_callback)     \
                                                       at this slot; the builder adds none */                          \
  X(kReplicas, "replicas", replicas_callback)       /* before the checkpoint: diverged replicas fail the run before    \
                                                       rank 0's copy is saved */                                       \
  X(kAccumulation, "accumulation", accumulation_callback) /* no point of its own: the gradients summed toward an       \
                                                             optimizer's step, kept in the checkpoint */               \
  X(kCheckpoint, "checkpoint", checkpoint_callback)       /* last: a checkpoint holds what every other callback did at \
                                                             its step */

namespace gantry {

/// Where a callback runs among the others, at every point, first to last.
enum class CallbackSlot {
#define GANTRY_CALLBACK_SLOT(slot, name, builder) slot,
  GANTRY_CALLBACKS(GANTRY_CALLBACK_SLOT)
#undef GANTRY_CALLBACK_SLOT
};

/// Each slot's row in the profiler's table, by CallbackSlot.
inline constexpr std::array kCallbackSlotNames{
#define GANTRY_CALLBACK_NAME(slot, name, builder) "callback: " name,
    GANTRY_CALLBACKS(GANTRY_CALLBACK_NAME)
#undef GANTRY_CALLBACK_NAME
};
static_assert(kCallbackSlotNames.size() == size_t(CallbackSlot::kCheckpoint) + 1, "a name for every CallbackSlot");

}  // namespace gantry
