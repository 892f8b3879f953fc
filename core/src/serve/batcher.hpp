// gantry serve's dynamic batching: requests wait in one bounded queue; an
// inference thread (--workers of them) gathers them into one forward of up
// to max_batch rows, waiting at most max_wait_ms for more after the first
// (LitServe's max_batch_size and batch_timeout), and hands each request its
// rows back. No thread waits for another request's answer; a request already
// answered (timed out) is skipped, not computed. The model is whatever
// `current` gives at the start of a batch: a --watch swap never changes it
// under a forward.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gantry/core_export.hpp"
#include "serve/metrics.hpp"

namespace gantry::serve {

/// What a batch runs on.
class BatchModel {
 public:
  virtual ~BatchModel() = default;
  /// [rows, ...] -> [rows, ...]; called from one inference thread at a time.
  virtual torch::Tensor forward(const torch::Tensor& batch) = 0;
  /// Named in the error of a forward that gives the wrong rows.
  virtual std::string name() const = 0;
};

struct Job {
  torch::Tensor input;  ///< [n, ...] rows of the model's input
  /// Called once, on an inference thread, with the model the batch ran on
  /// and this job's rows of its output, or with what the forward threw.
  std::function<void(std::shared_ptr<BatchModel>, torch::Tensor, std::exception_ptr)> done;
  std::shared_ptr<std::atomic<bool>> answered;  ///< set: already answered (timed out), skipped
};

struct BatchLimits {
  int64_t max_batch = 32;    ///< rows of one forward
  int64_t max_wait_ms = 0;   ///< how long the first request waits for more
  int64_t max_queue = 1024;  ///< requests waiting; beyond: HttpError 503
  int64_t workers = 1;       ///< inference threads
};

class GANTRY_CORE_EXPORT Batcher {
 public:
  Batcher(std::function<std::shared_ptr<BatchModel>()> current, BatchLimits limits, Metrics& metrics);
  ~Batcher();
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  /// Queues the job, or throws HttpError 503 (the queue is full, or the server is stopping).
  void submit(std::unique_ptr<Job> job);
  int64_t depth();
  /// Answers what is queued, then the threads end.
  void stop();

 private:
  void run();

  std::function<std::shared_ptr<BatchModel>()> current_;
  const BatchLimits limits_;
  Metrics& metrics_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Job>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace gantry::serve
