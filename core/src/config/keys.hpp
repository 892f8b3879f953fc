// The table of every config key, one row each (included by config.hpp
// alone, after the choices its defaults and checks name): the option
// structs, the schema (parsing, "did you mean", config.yaml), the checks and
// `gantry keys` (the README's table, which a test compares) all expand these
// lists.
//
// Each row: its C++ type and member, its YAML name, default, check and
// one-line meaning.
//
//   X(type, member, key, default, check, expected, doc)
//     check     an expression of the value `v` that must hold (true: any value;
//               a choice's names are its check)
//     expected  what the error says the value must be when the check fails
//     doc       what the key means, one line of Markdown
#pragma once

#define GANTRY_KEYS_TOP(X)                                                                                \
  X(std::string, name, name, "experiment", valid_run_name(v), "a directory name: 1 to 200 bytes, no '/'", \
    "run directories go to `<out_dir>/<name>/`")

#define GANTRY_KEYS_SYSTEM(X)                                                                         \
  X(std::string, plugin, plugin, "gan", !v.empty(), "a plugin name or path",                          \
    "plugin name (searched: `gantry plugins`) or path to a `.so`; every other `system.*` key is the " \
    "plugin's own, and a key it never reads is an error")

#define GANTRY_KEYS_DATA(X)                                                                                 \
  X(DataFormat, format, format, DataFormat::kIdx, true, "",                                                 \
    "the runner's built-in data: `idx` (MNIST's IDX files), `image_folder` (PNG/JPEG/BMP/TGA/GIF files, "   \
    "torchvision's ImageFolder layout: class subfolders are labels, sorted by name; every image converted " \
    "to the plugin's channels and resized to its height and width with stb), `cifar10` (CIFAR-10's binary " \
    "batches, `cifar-10-batches-bin`)")                                                                     \
  X(std::string, path, path, "/usr/share/datasets/fashion-mnist", true, "",                                 \
    "the folder holding the data (`cifar10`: the `cifar-10-batches-bin` folder or the one holding it)")     \
  X(std::string, train_prefix, train_prefix, "train", true, "",                                             \
    "the training split: `idx` `<prefix>-images-idx3-ubyte[.gz]` (+ labels); `image_folder` the subfolder " \
    "`<prefix>/` (without it, `data.path` itself); `cifar10` `<prefix>.bin` and `<prefix>_<n>.bin` "        \
    "(default there: `data_batch`)")                                                                        \
  X(std::string, val_prefix, val_prefix, "t10k", true, "",                                                  \
    "the validation split, named the same way (defaults: `image_folder` `val`, `cifar10` `test_batch`)")    \
  X(int64_t, batch_size, batch_size, 64, v > 0, "> 0", "samples per batch, per rank")                       \
  X(KeepBatch, keep_batch, keep_batch, KeepBatch::kPerRank, true, "",                                       \
    "a resume at another world size keeps `per_rank`: `batch_size` (the global batch changes with the "     \
    "ranks), or `global`: the checkpoint's batch_size x its ranks (`batch_size` becomes that / the ranks; " \
    "not divisible: an error). Either way the epoch goes on from the sample it reached")                    \
  X(bool, shuffle, shuffle, true, true, "", "reshuffle each epoch from `trainer.seed` + epoch")             \
  X(bool, drop_last, drop_last, false, true, "", "drop each epoch's last incomplete batch")                 \
  X(int64_t, prefetch, prefetch, 2, v >= 1, ">= 1", "batches prepared ahead on a worker thread")

#define GANTRY_KEYS_TRAINER(X)                                                                                       \
  X(int64_t, max_epochs, max_epochs, 1, v == -1 || v > 0, "> 0 or -1 (no limit)",                                    \
    "-1: no limit; when not given while `max_steps` or `max_time` is: no limit (Lightning's rule)")                  \
  X(int64_t, max_steps, max_steps, -1, v == -1 || v > 0, "> 0 or -1 (no limit)",                                     \
    "batches (not optimizer steps); -1: no limit")                                                                   \
  X(std::string, max_time, max_time, "", valid_max_time(v), "DD:HH:MM:SS, HH:MM:SS or a number of seconds",          \
    "`DD:HH:MM:SS`, `HH:MM:SS` or seconds; empty: no limit")                                                         \
  X(int64_t, pause_at_step, pause_at_step, 0, v >= 0, ">= 0 (0: never)",                                             \
    "stop after this batch as a preemption would (a checkpoint, exit 0, event `paused`; no end-of-run validation), " \
    "while schedules still count to `max_steps`: a resume with a later pause or none goes on exactly as if it "      \
    "never paused (`gantry search`'s rungs)")                                                                        \
  X(int64_t, seed, seed, 42, true, "", "seeds model init, noise and the shuffle")                                    \
  X(int64_t, log_every_n_steps, log_every_n_steps, 50, v > 0, "> 0", "a `metrics.csv` row every n batches")          \
  X(int64_t, image_every_n_steps, image_every_n_steps, 500, v >= 0, ">= 0",                                          \
    "`log_samples` every n batches (and at start and end); 0: start and end only")                                   \
  X(int64_t, val_every_n_epochs, val_every_n_epochs, 0, v >= 0, ">= 0",                                              \
    "run `validation_step` over the `val_prefix` split every n epochs; 0: never")                                    \
  X(int64_t, val_every_n_steps, val_every_n_steps, 0, v >= 0, ">= 0",                                                \
    "also validate every n batches (Lightning's `val_check_interval` as a count); 0: at epochs' ends only. "         \
    "With either key, a run that ends between them validates at its end too")                                        \
  X(int64_t, grid_rows, grid_rows, 0, v >= 0, ">= 0",                                                                \
    "rows of every image grid (`ctx.log_image`, `gantry sample` unless `--rows`); 0: 8 images a row")                \
  X(bool, log_grad_norm, log_grad_norm, false, true, "",                                                             \
    "log `grad_norm_<optimizer>`, the total 2-norm of each optimizer's averaged gradients before clipping")          \
  X(int64_t, accumulate_grad_batches, accumulate_grad_batches, 1, v > 0, "> 0",                                      \
    "`ctx.optimize` sums the gradients of k calls (each loss divided by k) and steps on the k-th; DDP "              \
    "all-reduces only then. Manual optimization included (Lightning refuses it there); per optimizer: "              \
    "`optimizers.<name>.accumulate_grad_batches`. `global_step`, `max_steps` and step schedules count "              \
    "batches")                                                                                                       \
  X(BatchCount, fast_dev_run, fast_dev_run, (BatchCount{0, 1.0, true}), !v.is_fraction(), "true, false or a count",  \
    "`true` or n: n batches (true: 1) of training, one validation pass of at most n batches, the sample "            \
    "grids and one checkpoint, in a scratch run directory removed after; prints each hook's time. No "               \
    "resume, quality score, best checkpoints or early stopping")                                                     \
  X(BatchCount, limit_train_batches, limit_train_batches, BatchCount{},                                              \
    !v.from_bool && !v.none() && (!v.is_fraction() || v.fraction <= 1), "a count > 0 or a fraction in (0, 1]",       \
    "each epoch trains on this many of its batches per rank (a count, or a fraction such as 0.25)")                  \
  X(BatchCount, limit_val_batches, limit_val_batches, BatchCount{},                                                  \
    !v.from_bool && (!v.is_fraction() || (v.fraction >= 0 && v.fraction <= 1)),                                      \
    "a count >= 0 or a fraction in [0, 1]",                                                                          \
    "each validation pass runs this many of its batches per rank; 0: no validation")                                 \
  X(BatchCount, overfit_batches, overfit_batches, BatchCount{0},                                                     \
    !v.from_bool && (!v.is_fraction() || (v.fraction >= 0 && v.fraction <= 1)),                                      \
    "a count >= 0 or a fraction in [0, 1]",                                                                          \
    "train every epoch on the same first batches of the unshuffled training data (and validate on at most "          \
    "as many); 0: off")                                                                                              \
  X(int64_t, log_histograms_every_n_steps, log_histograms_every_n_steps, 0, v >= 0, ">= 0",                          \
    "TensorBoard histograms of every parameter and its averaged gradient (before clipping) every n batches "         \
    "(`weights/<module>.<name>`, `grads/...`); 0: never")                                                            \
  X(ProfilerKind, profiler, profiler, ProfilerKind::kNone, true, "",                                                 \
    "`simple`: at the end, each step part's, callback's and plugin hook's calls, mean, total and share of the "      \
    "fit, over the ranks with the slowest named (printed and `profile.txt`); `trace`: LibTorch's profiler over "     \
    "rank 0's steps `[profile_first_step, +profile_steps)` into a Chrome/Perfetto JSON trace in the run directory")  \
  X(int64_t, profile_first_step, profile_first_step, 3, v >= 0, ">= 0",                                              \
    "`profiler: trace`: the global step the trace starts at (the batches before it warm up)")                        \
  X(int64_t, profile_steps, profile_steps, 5, v > 0, "> 0", "`profiler: trace`: how many batches it records")        \
  X(bool, log_throughput, log_throughput, false, true, "",                                                           \
    "log `samples_per_sec`, `batches_per_sec` (all ranks together) and, once the FLOPs of a batch are known, "       \
    "`flops_per_sec` and `mfu` against the peak (measured GEMM rate; a table for A100/H100/H200) in every row")      \
  X(double, flops_per_batch, flops_per_batch, 0, v >= 0, ">= 0",                                                     \
    "`log_throughput`: one rank's FLOPs per batch (forward, backward, optimizer); 0: counted once by the "           \
    "profiler's FLOP counter on this run's second batch")                                                            \
  X(AcceleratorKind, accelerator, accelerator, AcceleratorKind::kCpu, true, "",                                      \
    "`cuda`: one GPU per rank (`cuda:LOCAL_RANK`, NCCL; a CUDA build only); `auto`: CUDA when a device is "          \
    "visible (docs/cuda.md)")                                                                                        \
  X(int64_t, devices, devices, 1, v > 0, "> 0", "ranks per node: must match the launch (`gantry launch -n`)")        \
  X(int64_t, num_nodes, num_nodes, 1, v > 0, "> 0", "nodes: must match the launch")                                  \
  X(int64_t, threads, threads, 0, v >= 0, ">= 0 (0: the cores available)",                                           \
    "intra-op threads per rank; 0: the cores available to it (LibTorch's own default is 1 here)")                    \
  X(std::string, out_dir, out_dir, "runs", !v.empty(), "a directory",                                                \
    "run directories go to `<out_dir>/<name>/<timestamp>/` (relative to the working directory)")                     \
  X(ProgressMode, progress, progress, ProgressMode::kAuto, true, "",                                                 \
    "`auto`: `bar` on a terminal, `lines` otherwise; `none`: neither")                                               \
  X(std::string, resume, resume, "", true, "",                                                                       \
    "`auto` (the newest valid checkpoint of the experiment; the default on a SLURM restart), a checkpoint "          \
    "path, or `fresh` (step 0, also on a SLURM restart); empty: a new run")                                          \
  X(double, dist_timeout, dist_timeout, 300, v > 0, "> 0 seconds",                                                   \
    "seconds a rank waits for the others (rendezvous, collectives)")                                                 \
  X(double, straggler_factor, straggler_factor, 2.0, v == 0 || v > 1, "> 1 (0: off)",                                \
    "with more than one rank: rank 0 names a rank whose busy time per step (its step minus its waits for the "       \
    "others) is more than this many times the other ranks' median for `straggler_intervals` metrics rows in a "      \
    "row (a `straggler:` line and event, `ranks.csv`, the end's summary; every rank of a host at once names "        \
    "the host); 0: never")                                                                                           \
  X(int64_t, straggler_intervals, straggler_intervals, 3, v > 0, "> 0",                                              \
    "`straggler_factor`: how many metrics rows in a row a rank must be that slow")                                   \
  X(int64_t, check_replicas_every_n_steps, check_replicas_every_n_steps, 0, v >= 0, ">= 0",                          \
    "with more than one rank: also check every n batches that the replicas are identical (a checksum per "           \
    "parameter, all-reduced; always before each checkpoint and at the end); 0: only then")                           \
  X(GradCompression, grad_compression, grad_compression, GradCompression::kNone, true, "",                           \
    "`fp16`: DDP's fp16 compression hook (slower on CPU/Gloo; not with `grad_transport=shm`)")                       \
  X(BufferBroadcast, broadcast_buffers, broadcast_buffers, BufferBroadcast::kOnRead, true, "",                       \
    "rank 0's buffers (BatchNorm stats) to all ranks when they are read, or `every_step` (DDP's schedule)")          \
  X(bool, fused_adam, fused_adam, true, true, "",                                                                    \
    "step a `torch::optim::Adam` with gantry's one-pass kernel (same math and state, within float "                  \
    "rounding); false: LibTorch's `step()`")                                                                         \
  X(GradTransport, grad_transport, grad_transport, GradTransport::kAuto, true, "",                                   \
    "how gradients are averaged: shared memory when every rank is on one host, else Gloo (`gloo`, `shm` "            \
    "force one)")                                                                                                    \
  X(bool, step_in_backward, step_in_backward, true, true, "",                                                        \
    "with the fused Adam in a world of one: step each parameter inside backward as soon as its gradient is "         \
    "complete (bit-identical to stepping after backward, faster); false: after backward")                            \
  X(WeightLayout, weight_layout, weight_layout, WeightLayout::kAuto, true, "",                                       \
    "`auto`: a CPU float32 `Linear` weight whose rows are a multiple of 4 KiB is stored transposed (no "             \
    "cache-set aliasing in its forward product; shape, values and checkpoints unchanged); `as_built`: leave "        \
    "every layout alone")                                                                                            \
  X(bool, huge_pages, huge_pages, true, true, "",                                                                    \
    "before building the model, ask the kernel for transparent huge pages for the heap's free top "                  \
    "(`madvise`; needs THP `always` or `madvise`; off when `GLIBC_TUNABLES` sets malloc options)")                   \
  X(double, gradient_clip_val, gradient_clip_val, 0, v >= 0, ">= 0 (0: no clipping)",                                \
    "clip every optimizer's gradients after the DDP average, before its step (Lightning's key): the total "          \
    "2-norm to at most the value, or each element to [-v, v]; 0: never. Turns step-in-backward off for it")          \
  X(ClipAlgorithm, gradient_clip_algorithm, gradient_clip_algorithm, ClipAlgorithm::kNorm, true, "",                 \
    "`norm`: the total 2-norm of the optimizer's gradients; `value`: each element")                                  \
  X(PrecisionMode, precision, precision, PrecisionMode::k32, true, "",                                               \
    "`bf16-mixed`: the plugin's hooks under autocast to bfloat16 (CPU or CUDA); weights, gradients and "             \
    "optimizer state stay float32. `16-mixed` is refused")                                                           \
  X(ReadMetrics, read_metrics, read_metrics, ReadMetrics::kAuto, true, "",                                           \
    "when logged values are copied to the host: `every_step`, or `on_log` (only when a row, grid or "                \
    "checkpoint needs them: no host-device sync in between; a NaN is reported with its step, later). "               \
    "`auto`: `every_step` on the CPU, `on_log` on a GPU")                                                            \
  X(bool, cuda_graphs, cuda_graphs, false, true, "",                                                                 \
    "on CUDA, one rank: the whole training step captured as a CUDA graph after 3 warm-up steps and replayed "        \
    "(a step that cannot be captured runs eagerly with one line saying why; docs/cuda.md)")

#define GANTRY_KEYS_EMA(X)                                                                                    \
  X(double, decay, decay, 0, v >= 0 && v < 1, "in [0, 1) (0: no EMA; typical: 0.999)",                        \
    "an exponential moving average of the weights, updated after every batch on every rank: `shadow = "       \
    "decay * shadow + (1 - decay) * weight`; checkpointed, used for the sample grids and `gantry sample`. "   \
    "0: off")                                                                                                 \
  X(std::string, modules, modules, "", true, "",                                                              \
    "the modules it averages: comma-separated `modules()` names; empty: all")                                 \
  X(bool, warmup, warmup, true, true, "",                                                                     \
    "the decay after the step-t batch is min(decay, (1 + t) / (10 + t)) (TensorFlow's num_updates): early "   \
    "shadows follow the weights instead of averaging the random initialisation; false: `decay` from step 1")  \
  X(bool, for_validation, for_validation, false, true, "",                                                    \
    "validation runs with the EMA weights too (the grids, the quality score and `gantry sample` always do); " \
    "false: with the trained weights")

#define GANTRY_KEYS_METRICS(X)                                                                                    \
  X(int64_t, quality_every_n_steps, quality_every_n_steps, 0, v >= 0, ">= 0 (0: no quality score)",               \
    "the sample-quality score every n batches (and before the first and after the last): `quality_fd`, "          \
    "`quality_class_entropy`, `quality_seconds`; 0: never (docs/quality.md)")                                     \
  X(std::string, quality_classifier, quality_classifier, "", true, "",                                            \
    "the classifier: a checkpoint, run or experiment directory (its newest checkpoint) of a plugin with "         \
    "`features()` (SDK 1.2), e.g. `runs/classifier_fashion_mnist`")                                               \
  X(int64_t, quality_samples, quality_samples, 10000, v >= 2, ">= 2 (typical: 10000)",                            \
    "samples per score (split among the ranks)")                                                                  \
  X(int64_t, quality_batch_size, quality_batch_size, 500, v > 0, "> 0", "samples generated and embedded at once") \
  X(int64_t, quality_pr_samples, quality_pr_samples, 2000, v >= 0, ">= 0 (0: not computed)",                      \
    "of each score's samples and of the real ones, this many for `quality_precision`, `quality_recall` "          \
    "(k = 3 nearest neighbours in feature space) and `quality_kid` (the unbiased kernel distance)")               \
  X(int64_t, quality_seed, quality_seed, 0, true, "",                                                             \
    "the seed of the samples' inputs (the training's random stream is left as it was)")

#define GANTRY_KEYS_CHECKPOINT(X)                                                                                \
  X(int64_t, every_n_steps, every_n_steps, 0, v >= 0, ">= 0",                                                    \
    "also checkpoint every n batches (always at the end); 0: only at the end")                                   \
  X(int64_t, every_n_epochs, every_n_epochs, 1, v >= 0, ">= 0",                                                  \
    "also checkpoint after every n-th epoch, before the next one's first batch (Lightning's default: every "     \
    "epoch), so a killed multi-epoch run loses at most an epoch; 0: not at epoch ends")                          \
  X(double, every_n_minutes, every_n_minutes, 0, v >= 0, ">= 0",                                                 \
    "also checkpoint when this many minutes of training passed since the last checkpoint (Lightning's "          \
    "`train_time_interval`; every rank at the same batch, the first rank whose clock says so decides); 0: off")  \
  X(int64_t, keep_last, keep_last, 3, v >= 0, ">= 0 (0: keep all)",                                              \
    "keep only the newest n checkpoints of a run (a resumed run's earlier ones included); 0: all")               \
  X(std::string, monitor, monitor, "", true, "",                                                                 \
    "a logged metric (`val_loss`, `quality_fd`): the checkpoints of its best values are kept, checked whenever " \
    "it gets a new value (a training, validation or score row); empty: none (Lightning's `ModelCheckpoint`)")    \
  X(MonitorMode, mode, mode, MonitorMode::kMin, true, "", "which value of `monitor` is best")                    \
  X(int64_t, save_top_k, save_top_k, 1, v >= -1, ">= -1",                                                        \
    "with `monitor`: keep the k best as `checkpoints/best_step_<step>.ckpt`, `checkpoints/best.ckpt` links the " \
    "best; -1: every checked value; 0: none. A tie keeps the earlier; a NaN is never kept")                      \
  X(bool, save_last, save_last, true, true, "",                                                                  \
    "the checkpoints every `every_n_steps` and at the end (`step_*.ckpt`, `keep_last` of them); false (with "    \
    "`monitor`): the best ones only")

#define GANTRY_KEYS_EARLY_STOPPING(X)                                                                            \
  X(std::string, monitor, monitor, "", true, "",                                                                 \
    "a logged metric: the run stops (every rank at the same batch) when it stopped improving; checked whenever " \
    "it gets a new value; empty: never (Lightning's `EarlyStopping`)")                                           \
  X(MonitorMode, mode, mode, MonitorMode::kMin, true, "", "which way `monitor` improves")                        \
  X(int64_t, patience, patience, 3, v >= 1, ">= 1", "checks without an improvement before the run stops")        \
  X(double, min_delta, min_delta, 0, v >= 0, ">= 0", "an improvement is a change by more than this")             \
  X(std::string, stopping_threshold, stopping_threshold, "", valid_number_or_empty(v), "a number, or empty",     \
    "stop as soon as `monitor` is at least this good; empty: none")                                              \
  X(std::string, divergence_threshold, divergence_threshold, "", valid_number_or_empty(v), "a number, or empty", \
    "stop as soon as `monitor` is worse than this; empty: none")                                                 \
  X(bool, check_finite, check_finite, true, true, "", "stop when `monitor` is NaN or infinite")

#define GANTRY_KEYS_MONITOR(X)                                                                                \
  X(bool, enabled, enabled, true, true, "", "serve the live stream from rank 0 (`gantry-monitor HOST:PORT`)") \
  X(std::string, host, host, "127.0.0.1", valid_ip_address(v),                                                \
    "an IP address to listen on (127.0.0.1, 0.0.0.0 for every interface, ::1)",                               \
    "the address to listen on (`0.0.0.0`: every interface); reach a cluster node with `ssh -L`")              \
  X(int64_t, port, port, 0, v >= 0 && v <= 65535, "a TCP port, or 0 for a free one", "0: a free port")        \
  X(std::string, token, token, "", true, "", "the stream's token; empty: a random one per run")

#define GANTRY_KEYS_SLURM(X)                                                                                        \
  X(std::string, partition, partition, "", valid_slurm_partition(v), "partition names (letters, digits, _ . - ,)",  \
    "`--partition`; empty: the cluster's default")                                                                  \
  X(std::string, time, time, "01:00:00", valid_slurm_time(v),                                                       \
    "a SLURM time limit: MM, HH:MM:SS, D-HH:MM:SS (e.g. 01:00:00)", "`--time`")                                     \
  X(std::string, mem, mem, "", valid_slurm_mem(v), "a SLURM memory size such as 32G or 4000M (empty: the default)", \
    "`--mem` per node, e.g. `32G`; empty: the default")                                                             \
  X(int64_t, cpus_per_task, cpus_per_task, 0, v >= 0, ">= 0", "`--cpus-per-task`; 0: `trainer.threads`, else 1")    \
  X(std::string, account, account, "", valid_slurm_account(v), "an account name (letters, digits, _ . -)",          \
    "`--account`; empty: none")                                                                                     \
  X(std::string, signal, signal, "USR1@90", valid_slurm_signal(v), "a SLURM --signal value such as USR1@90",        \
    "`--signal`: the warning signal the tasks get before the time limit (they checkpoint and requeue)")             \
  X(std::string, template_path, template, "slurm/train.sbatch", true, "",                                           \
    "the sbatch template `gantry submit` renders")                                                                  \
  X(int64_t, array_parallel, array_parallel, 0, v >= 0, ">= 0 (0: no limit)",                                       \
    "`gantry submit --sweep`: at most this many points at once (`--array`'s `%N`); 0: no limit")

#define GANTRY_KEYS_OPTIMIZER(X)                                                                               \
  X(double, gradient_clip_val, gradient_clip_val, 0, v >= 0, ">= 0 (0: no clipping)",                          \
    "`trainer.gradient_clip_val` for this optimizer (default: the trainer's)")                                 \
  X(ClipAlgorithm, gradient_clip_algorithm, gradient_clip_algorithm, ClipAlgorithm::kNorm, true, "",           \
    "`trainer.gradient_clip_algorithm` for this optimizer (default: the trainer's)")                           \
  X(int64_t, accumulate_grad_batches, accumulate_grad_batches, 1, v > 0, "> 0",                                \
    "`trainer.accumulate_grad_batches` for this optimizer (default: the trainer's)")                           \
  X(SchedulerKind, scheduler, scheduler, SchedulerKind::kNone, true, "",                                       \
    "the lr over the run: `step` (times `gamma` every `step_size` intervals), `cosine` or `linear` (to "       \
    "`min_lr` at the run's end; needs `max_steps` or `max_epochs`); logged as `lr-<name>`")                    \
  X(ScheduleInterval, interval, interval, ScheduleInterval::kStep, true, "",                                   \
    "what the schedule counts: `step` (batches) or `epoch`")                                                   \
  X(int64_t, warmup, warmup, 0, v >= 0, ">= 0", "intervals of linear warm-up, from lr/warmup up to lr")        \
  X(int64_t, step_size, step_size, 1, v > 0, "> 0", "`step`: multiply by `gamma` every `step_size` intervals") \
  X(double, gamma, gamma, 0.1, v > 0, "> 0", "`step`: the factor")                                             \
  X(double, min_lr, min_lr, 0, v >= 0, ">= 0", "`cosine`, `linear`: the lr at the run's end")
