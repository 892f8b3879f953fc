// Batches from a Dataset (a plugin's own, or the runner's images as an
// ImageTensorDataset): DistributedSampler semantics (the
// same permutation from seed + epoch on every rank, padded to equal length, a
// disjoint shard per rank), prepared on a worker thread while the step runs.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "config/config.hpp"
#include "gantry/core_export.hpp"
#include "gantry/system.hpp"

namespace gantry {

class ImageTensorDataset;

struct LoaderOptions {
  int64_t batch_size = 64;
  bool shuffle = true;
  bool drop_last = false;
  int64_t prefetch = 2;
  uint64_t seed = 42;
  int rank = 0;
  int world_size = 1;
  bool pin_memory = false;  ///< batches in page-locked memory (a CUDA build copying to a GPU)
  BatchCount limit;         ///< batches of each epoch per rank (trainer.limit_*_batches); default all
};

class GANTRY_CORE_EXPORT DataLoader {
 public:
  /// Batches are the dataset's get_batch() (ImageTensorDataset's gather, in
  /// page-locked memory when options.pin_memory).
  DataLoader(std::shared_ptr<const Dataset> data, LoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// Batches per epoch on this rank (after options.limit); of an epoch whose
  /// first `from_sample` samples of the permutation were trained already.
  int64_t batches_per_epoch(int64_t from_sample = 0) const;
  /// Samples per epoch on this rank (after padding / dropping).
  int64_t samples_per_rank(int64_t from_sample = 0) const;
  /// Starts (or restarts) epoch `epoch`, skipping its first `skip` batches
  /// (resuming mid-epoch at the same world size and batch continues the same
  /// order). `from_sample`: the epoch's permutation from that position on
  /// (the samples before it were trained by an earlier run, at whatever world
  /// size and batch: strided shards of one permutation make the samples of k
  /// steps at W ranks x B exactly its first k x W x B), sharded over this
  /// world and padded from the permutation's start as DistributedSampler
  /// pads. from_sample 0 is the whole epoch.
  void start_epoch(int64_t epoch, int64_t skip = 0, int64_t from_sample = 0);
  /// The next batch of the epoch, or nothing at its end.
  std::optional<Batch> next();
  /// The sample indices of this rank for `epoch` (from `from_sample`), in order (for tests).
  torch::Tensor indices(int64_t epoch, int64_t from_sample = 0) const;

 private:
  void stop_worker();
  void work(torch::Tensor order, int64_t first, int64_t last, int64_t per_rank);
  Batch make_batch(const int64_t* idx, int64_t n) const;

  std::shared_ptr<const Dataset> data_;
  const ImageTensorDataset* images_ = nullptr;  // data_ when it is the runner's images (gather, pinned)
  LoaderOptions opt_;

  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> ready_;
  std::exception_ptr error_;
  bool stop_ = false;
  bool done_ = false;
};

}  // namespace gantry
