// The process group of a data-parallel job: rendezvous through a TCPStore on
// the master, Gloo on CPU (and NCCL for CUDA tensors in a CUDA build), and
// PyTorch DDP's own gradient engine (c10d::Reducer)
// per optimizer. Only core's trainer uses it; plugins never see it.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

#include "distributed/dist_env.hpp"
#include "gantry/core_export.hpp"

namespace c10d {
class ProcessGroup;
class Reducer;
class Store;
}  // namespace c10d

namespace gantry {

class ShmAllreduce;
struct StoreCounts;

/// "" when this process may open the descriptors `world_size` ranks need on
/// rank `rank`; else the line saying how many and how to raise the limit.
GANTRY_CORE_EXPORT std::string check_file_limit(int rank, int world_size);

/// NCCL's version as LibTorch 2.x reports it (torch::cuda::nccl::version():
/// major << 32 | minor << 16 | patch, torch/csrc/cuda/nccl.cpp), as "2.27.3".
/// A pure function, so the CPU tests check it.
GANTRY_CORE_EXPORT std::string nccl_version_text(uint64_t packed);

class GANTRY_CORE_EXPORT ProcessGroup {
 public:
  /// Rendezvous of `env.world_size` ranks at env.master_addr:master_port. Every
  /// rank waits at most `timeout` for the others and then names those that did
  /// not arrive. Throws gantry::Error. `nccl`: CUDA tensors go through an
  /// NCCL backend (one GPU per rank; CUDA builds only), CPU tensors through Gloo.
  ProcessGroup(const DistEnv& env, std::chrono::milliseconds timeout, bool nccl = false);
  ~ProcessGroup();

  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  const DistEnv& env() const { return env_; }

  /// Overwrites `tensors` with rank 0's values (coalesced into few messages).
  void broadcast(const std::vector<torch::Tensor>& tensors);
  /// In-place sum / max over ranks. A small CPU tensor (at most
  /// kSmallAllreduceBytes: the stop agreement, metrics, flags) goes through a
  /// recursive-doubling exchange over Gloo's send/recv, log2(N) rounds of one
  /// message each way per rank, instead of Gloo's ring (2(N-1) messages one
  /// after another per rank, whatever the size); every rank gets the same bits
  /// (each round sums the same two operands on both sides). Larger or CUDA
  /// tensors go through the backend's all-reduce.
  void allreduce_sum(torch::Tensor& t);
  void allreduce_max(torch::Tensor& t);
  /// Every rank's `t` (same shape everywhere), by rank.
  std::vector<torch::Tensor> allgather(const torch::Tensor& t);
  /// Starts a max all-reduce of `t` (which must stay alive) and returns the
  /// function that waits for it. A small CPU tensor's exchange runs on one
  /// thread of this group (started at the first call), beside the caller's
  /// work and collectives.
  std::function<void()> allreduce_max_async(torch::Tensor& t);
  static constexpr int64_t kSmallAllreduceBytes = 16 * 1024;

  c10::intrusive_ptr<c10d::ProcessGroup> group() const;
  /// 0, 1, 2, ...: ids that are the same on every rank when taken in the same order.
  int next_id() { return next_id_++; }

  /// Rank 0's `value` under `key`, on every rank (rank 0 publishes, the others wait for it).
  std::string share(const std::string& key, const std::string& value);
  /// Waits until every rank has called it.
  void barrier();
  /// The timeout every wait uses (trainer.dist_timeout).
  std::chrono::milliseconds timeout() const { return timeout_; }
  /// A collective: every rank's status record (a few hundred bytes: an
  /// encoded wire::RankStatus), gathered to rank 0 in one message from each
  /// rank: by rank on rank 0, empty elsewhere.
  std::vector<std::string> gather_status(const std::string& record);
  /// After a collective failed: which ranks stopped responding, from their
  /// heartbeats (every rank bumps a counter in the store twice a second from
  /// its own thread; a SIGSTOPped, hung or dead rank's counter stands still)
  /// and their progress (the collectives each entered, published by the same
  /// thread: a rank that beats but never came to this collective is hung in
  /// its own code). A rank that ended (its own error) is not blamed. The first
  /// verdict is kept in the store and every later rank reads it; rank 0,
  /// whose process holds the store, stays until every other rank has read it
  /// (at most ~4 s), so nobody blames rank 0 for leaving first. A named rank
  /// is also reported to `gantry launch` (GANTRY_LAUNCH_REPORT_FD). Takes
  /// ~1.5 s. "" when nobody is to blame.
  std::string silent_ranks();
  /// The round trips, in ms, of this rank's last 8 heartbeat requests to
  /// rank 0's store (twice a second: ~4 s; none before the first): the
  /// rank's link to rank 0's node, a slow link's delay included, measured off
  /// the training thread. Their median (the rank status's link_ms) is not
  /// moved by one request the scheduler delayed on a loaded host.
  std::vector<double> store_round_trips_ms();
  /// GANTRY_DIST_STATS=1: one line on stderr with this rank's store requests,
  /// heartbeat requests and collectives so far, `when` (bench/scale.sh reads
  /// them at start-up, each logged step and the end; docs/scaling.md).
  void report_counts(const std::string& when);
  /// Counts a collective this rank enters (the gradient all-reduce of a
  /// backward; ProcessGroup's own collectives count themselves).
  void entering() { entered_.fetch_add(1, std::memory_order_relaxed); }

 private:
  /// Runs a collective; a failure (a rank died or hung) becomes one Error line.
  template <class F>
  void collective(const char* what, F&& f);
  enum class Op { kSum, kMax };
  bool small(const torch::Tensor& t) const;
  /// The recursive-doubling all-reduce of a small CPU tensor; `seq` (taken
  /// in call order, the same on every rank) keeps concurrent ones apart.
  void tree_allreduce(torch::Tensor& t, Op op, uint32_t seq);

  DistEnv env_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<StoreCounts> counts_;       // the store's requests
  std::shared_ptr<StoreCounts> beat_counts_;  // the heartbeat's
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
  int next_id_ = 0;
  std::atomic<int64_t> entered_{0};
  struct Heartbeat;
  std::unique_ptr<Heartbeat> heartbeat_;
  std::atomic<uint32_t> small_seq_{0};
  struct Worker;  // runs the async small all-reduces; ends (joined) before pg_ goes
  std::unique_ptr<Worker> worker_;
};

/// Gradient averaging for one optimizer's parameters, one of two ways:
///  - Gloo: c10d::Reducer, buckets of ~25 MiB (the first 1 MiB) in reverse
///    order, all-reduced while backward still runs;
///  - shared memory (every rank on one host): ShmAllreduce after backward.
/// Call prepare() right before the backward and finish() right after it.
class GANTRY_CORE_EXPORT GradSync {
 public:
  enum class Transport { kGloo, kShm };
  /// kShm falls back to Gloo (on every rank together) when a rank cannot map
  /// the segment or the parameters are not float32 on the CPU: see transport().
  /// `fp16` (Gloo only): all-reduce the buckets as fp16 and decompress.
  GradSync(ProcessGroup& pg, std::vector<torch::Tensor> params, Transport transport, bool fp16 = false);
  ~GradSync();
  void prepare();  ///< also counts the all-reduce as entered (ProcessGroup::entering)
  /// After backward: with shared memory, exchanges and averages the gradients
  /// now (throws gantry::Error naming a rank that does not come); Gloo: nothing.
  void finish();
  Transport transport() const { return shm_ ? Transport::kShm : Transport::kGloo; }
  /// The process group's silent_ranks(), for an error message after a failed exchange.
  std::string silent_ranks() { return pg_->silent_ranks(); }
  /// Gloo: when backward computed the last gradient of these parameters
  /// (steady_clock; the epoch before the first backward). What backward
  /// spends after it is the Reducer's wait for the all-reduce: the other
  /// ranks' gradients, the wire. Shared memory: the epoch (finish() is the wait).
  std::chrono::steady_clock::time_point last_gradient() const {
    return std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(last_gradient_->load()));
  }

 private:
  std::shared_ptr<std::atomic<int64_t>> last_gradient_ = std::make_shared<std::atomic<int64_t>>(0);
  std::shared_ptr<c10d::Reducer> reducer_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<ShmAllreduce> shm_;
  ProcessGroup* pg_ = nullptr;
  int world_ = 1;
};

/// Ranks named by their nodes (`node_of[r]`: rank r's node): a node whose
/// every rank is named as a whole, "node3 (ranks 8-11, all 4 of its ranks)";
/// some of a node's, "rank 9 (node3, 1 of its 4)"; groups joined by "; ".
GANTRY_CORE_EXPORT std::string ranks_by_node(const std::vector<int>& ranks, const std::vector<std::string>& node_of);

}  // namespace gantry
