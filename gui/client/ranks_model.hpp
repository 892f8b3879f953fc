// The ranks of a run at a glance, as both GUIs draw them: ranks grouped by
// node (host), each with a heat (its busy time per step against the job's
// median: who holds the others back), its parts, stale and straggler flags;
// a summary per node and for the job; the order of the detail table (by
// rank, or the slowest node and rank first). Built from a RunState on each
// redraw (O(ranks log ranks): 128 ranks in well under a millisecond).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "run_state.hpp"

namespace gantry::client {

struct RankCell {
  wire::RankStatus status;  ///< a copy: the cell outlives the state's next message
  /// busy / the job's median busy (1: typical; -1: not measured).
  double ratio = -1;
  /// 0 (at or under the median) .. 1 (twice the median or more); -1: unknown.
  double heat = -1;
  bool stale = false;      ///< silent too long in a live run
  bool straggler = false;  ///< rank 0 says so (the status's flag)
};

struct NodeGroup {
  std::string host;
  std::vector<RankCell> ranks;  ///< by rank, or slowest first
  double busy_median = -1;      ///< ms per step over its measured ranks (-1: none)
  double busy_max = -1;
  double max_ratio = -1;  ///< its slowest rank's ratio
  double samples_per_s = 0;
  int stragglers = 0, stale = 0;
};

struct RanksSummary {
  std::vector<NodeGroup> nodes;  ///< by first rank, or the slowest node first
  size_t ranks = 0;
  double busy_median = -1;  ///< over every measured rank
  double busy_max = -1;
  double step_ms = -1;  ///< the median step time
  int stragglers = 0, stale = 0;
  /// "128 ranks on 32 nodes | step 41.2 ms, busy median 12.0 ms, max 28.3 ms |
  /// 1 straggler | 0 stopped reporting"
  std::string headline() const;
};

/// `now`: Unix s (for staleness). `slowest_first`: nodes by their slowest
/// rank's busy time, ranks within by theirs, both descending.
RanksSummary summarize_ranks(const RunState& state, double now, bool slowest_first);

/// The parts of a status's step, in the order both GUIs stack them, with
/// their names and colours (RGB): data, compute, comm, optimizer, other.
struct StepPart {
  const char* name;
  double ms;
  uint32_t rgb;
};
std::vector<StepPart> step_parts(const wire::RankStatus& s);

/// The colour of a heat (0 green .. 0.5 yellow .. 1 red; -1 grey), as RGB.
uint32_t heat_rgb(double heat);

/// A rank's one-line detail (tooltip): "rank 37 (node10): step 41.2 ms = data
/// 30.1 + compute 8.0 + comm 2.1 + optimizer 0.9 + other 0.1; busy 39.1 ms
/// (2.3x the median); CPU 98%; RSS 140 MiB; GPU 87% 20480 MiB 310 W; STRAGGLER".
std::string rank_detail(const RankCell& c);

}  // namespace gantry::client
