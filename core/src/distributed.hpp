// The process group of a data-parallel job: rendezvous through a TCPStore on
// the master, Gloo on CPU, and PyTorch DDP's own gradient engine (c10d::Reducer)
// per optimizer. Only core's trainer uses it; plugins never see it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

#include "dist_env.hpp"
#include "gantry/core_export.hpp"

namespace c10d {
class ProcessGroup;
class Reducer;
class Store;
}  // namespace c10d

namespace gantry {

class GANTRY_CORE_EXPORT ProcessGroup {
 public:
  /// Rendezvous of `env.world_size` ranks at env.master_addr:master_port. Every
  /// rank waits at most `timeout` for the others and then names those that did
  /// not arrive. Throws gantry::Error.
  ProcessGroup(const DistEnv& env, std::chrono::milliseconds timeout);
  ~ProcessGroup();

  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  const DistEnv& env() const { return env_; }

  /// Overwrites `tensors` with rank 0's values (coalesced into few messages).
  void broadcast(const std::vector<torch::Tensor>& tensors);
  /// In-place sum / max over ranks.
  void allreduce_sum(torch::Tensor& t);
  void allreduce_max(torch::Tensor& t);
  /// Every rank's `t` (same shape everywhere), by rank.
  std::vector<torch::Tensor> allgather(const torch::Tensor& t);
  /// Starts a max all-reduce of `t` (which must stay alive) and returns the
  /// function that waits for it.
  std::function<void()> allreduce_max_async(torch::Tensor& t);

  c10::intrusive_ptr<c10d::ProcessGroup> group() const;

  /// Publishes this rank's status line (a small text record) in the store.
  void publish_status(const std::string& line);
  /// Every rank's newest status line that has been published, by rank ("" if none yet).
  std::vector<std::string> collect_status();

 private:
  /// Runs a collective; a failure (a rank died or hung) becomes one Error line.
  template <class F>
  void collective(const char* what, F&& f);

  DistEnv env_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
};

/// Gradient averaging for one optimizer's parameters, by c10d::Reducer: buckets
/// of ~25 MiB (the first 1 MiB) in reverse order, all-reduced while backward
/// still runs. Only gradients of a backward preceded by prepare() are synced.
class GANTRY_CORE_EXPORT GradSync {
 public:
  /// `fp16`: all-reduce the buckets as fp16 and decompress (halves the bytes).
  GradSync(ProcessGroup& pg, std::vector<torch::Tensor> params, bool fp16 = false);
  ~GradSync();
  /// Call right before the backward whose gradients must be averaged.
  void prepare();

 private:
  std::shared_ptr<c10d::Reducer> reducer_;
};

}  // namespace gantry
