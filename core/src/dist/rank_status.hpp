// Per-rank status: rank, host, step, samples/s, resident memory, time. Every
// rank publishes its own at each metrics row (a wire::RankStatus frame in the
// rendezvous store); rank 0 writes the latest record of each to ranks.csv and
// streams them (during training another rank's may be one row behind; at the
// end all are final). One job: the trainer only says when.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "wire/message.hpp"

namespace gantry {

class ProcessGroup;
class RunStream;

class RankStatusReporter {
 public:
  /// `pg`: null in a world of one. `stream` and `run_dir`: rank 0's (null and
  /// "" elsewhere). All must outlive the reporter.
  RankStatusReporter(int rank, ProcessGroup* pg, RunStream* stream, std::string run_dir);

  /// Measures this rank's status at `step` (samples/s since the previous
  /// report, at `batch_size` per step) and publishes it; with `write`, rank 0
  /// then writes every rank's latest (write()).
  void report(int64_t step, int64_t batch_size, bool write = true);
  /// Rank 0: ranks.csv and a RankStatus message per rank, from every rank's
  /// latest published status. Elsewhere: nothing.
  void write();

 private:
  int rank_;
  ProcessGroup* pg_;
  RunStream* stream_;
  std::string run_dir_;
  wire::RankStatus own_;
  std::chrono::steady_clock::time_point last_time_ = std::chrono::steady_clock::now();
  int64_t last_step_ = -1;
  double rate_ = 0;
};

}  // namespace gantry
