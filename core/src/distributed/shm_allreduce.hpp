// Gradient averaging through shared memory, for ranks on one host. Gloo
// all-reduces over loopback TCP: on this GAN (7.8 MiB of gradients a step, 2
// ranks on 2 busy cores) that costs ~14 ms a step and keeps the job at ~57%
// scaling efficiency. Here each rank copies its gradients into its slot of a
// segment in /dev/shm, the ranks sum disjoint chunks of it (each chunk summed
// by one rank in a fixed order: every rank gets the same bits), and copy the
// result back: a few passes over memory and two barriers. No LibTorch.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "gantry/core_export.hpp"

namespace gantry {

class GANTRY_CORE_EXPORT ShmAllreduce {
 public:
  /// The default bound of a segment (GANTRY_SHM_SEGMENT_MIB sets another:
  /// GradSync) and the least chunk, in floats.
  static constexpr size_t kSegmentBudget = size_t(256) << 20;
  static constexpr size_t kMinChunk = size_t(128) << 10;  // 512 KiB

  /// Maps segment `name` ("/gantry-..."; rank 0 creates it, the others open it
  /// once rank 0 has) for an exchange of `count` floats per rank, in chunks
  /// of chunk() floats: world slots and a result of chunk() floats each. The
  /// chunk is all of `count` unless world + 1 slots of it would pass
  /// `segment_budget` bytes (many ranks on one host: 128 ranks' slots of this
  /// GAN's 7.8 MiB were 1 GiB of /dev/shm), then the budget's share, at least
  /// kMinChunk; every rank must pass the same. A barrier waits by
  /// spinning ~50 us, then yielding until ~1 ms, then sleeping (50 us growing
  /// to 2 ms: a rank waiting for a dead or stopped peer costs ~no CPU, also
  /// with more ranks than cores); every ~10 ms of waiting it throws
  /// gantry::Error when a missing rank's process has exited (ranks register
  /// their pids), after `timeout_s` naming the missing ranks, and within
  /// `stop_grace_s` of a stop signal (SIGTERM, SIGINT, SIGUSR1/2:
  /// runtime.hpp's stop_requested()) naming the ranks it was still waiting for.
  ShmAllreduce(const std::string& name, int rank, int world, size_t count, bool create, double timeout_s,
               double stop_grace_s = 5.0, size_t segment_budget = kSegmentBudget);
  ~ShmAllreduce();
  ShmAllreduce(const ShmAllreduce&) = delete;
  ShmAllreduce& operator=(const ShmAllreduce&) = delete;

  /// This rank's input: write up to chunk() floats here, then call run().
  float* slot() { return data_ + static_cast<size_t>(rank_) * chunk_; }
  /// result[i] = scale * sum over ranks of slot[i] for i < n (n <= chunk());
  /// valid after run() until the next run().
  void run(float scale, size_t n);
  void run(float scale) { run(scale, chunk_); }
  const float* result() const { return data_ + static_cast<size_t>(world_) * chunk_; }
  /// Removes the segment's name (once every rank has mapped it); the memory lives on.
  void unlink();
  size_t count() const { return count_; }
  size_t chunk() const { return chunk_; }
  /// This process's exchanges so far (run() of every instance) and those at
  /// whose barriers (gradients written, sums written) it came last, after
  /// every other rank, at least once: a rank the others wait for comes last
  /// at nearly all of them, wherever its time went (its own work, or frozen:
  /// descheduled, stopped). The rank status reports the share.
  static uint64_t exchanges();
  static uint64_t exchanges_reached_last();

 private:
  bool barrier(const char* what);     // true: this rank came last
  std::string missing_ranks() const;  // "0, 3": those not at the current barrier

  std::string name_;
  int rank_, world_;
  size_t count_, chunk_, bytes_ = 0;
  double timeout_s_, stop_grace_s_;
  void* map_ = nullptr;
  std::atomic<uint64_t>* arrived_ = nullptr;  // per rank: barriers passed (one cache line each)
  float* data_ = nullptr;                     // world slots, then the result
  uint64_t phase_ = 0;
};

}  // namespace gantry
