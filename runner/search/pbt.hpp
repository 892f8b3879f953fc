// Population based training (Jaderberg et al., "Population Based Training
// of Neural Networks", 2017), generational: the population (--trials
// members) trains in intervals of --rung steps; when every living member has
// paused at the interval's end, the bottom quarter by score at that step
// each copy a member of the top quarter (exploit: its checkpoint, weights,
// optimizer and trainer state, EMA, schedule, with new random streams) and
// perturb its values (explore: x0.8 or x1.2, a neighbouring choice, or a
// fresh draw with probability 1/4, as Ray Tune's PBT does). Every decision
// compares scores at the same step and is a function of the journal and the
// seed alone, so a rerun makes the same ones (docs/search.md).
#pragma once

#include <cstdint>
#include <vector>

#include "search/asha.hpp"
#include "search/space.hpp"
#include "search/state.hpp"

namespace gantry::search {

/// The interval ends of PBT: r, 2r, 3r, ... below the budget, then the budget.
std::vector<int64_t> interval_steps(int64_t r, int64_t budget);

struct Exploit {
  int trial = -1;                      ///< the member that copies
  int from = -1;                       ///< the member it copies
  int64_t step = 0;                    ///< at this step (both are paused there)
  std::vector<std::string> overrides;  ///< its explored values
  uint64_t seed = 0;                   ///< its new random streams' seed
};

struct Pbt {
  std::vector<int64_t> steps;  ///< the interval ends; the last is the budget
  int population = 0;
  bool maximize = false;
  uint64_t seed = 0;
  const std::vector<Dimension>* space = nullptr;
  double quantile = 0.25;

  /// What a free worker does next: an interrupted member goes on, the
  /// population is started, a member that paused at the last decided step
  /// trains its next interval; kNone while the interval's others run, or
  /// when decide_at() has a step to decide.
  Action next(const SearchState& s) const;
  /// The step whose exploits are due (every living member paused there,
  /// nothing running, not yet decided), or -1.
  int64_t decide_at(const SearchState& s) const;
  /// The exploits at `step`: the bottom floor(n/4) of the n members scored
  /// there, worst first, each copying one of the top floor(n/4) drawn from
  /// its own stream. A NaN is the worst; a tie keeps the earlier result on top.
  std::vector<Exploit> decide(const SearchState& s, int64_t step) const;
};

}  // namespace gantry::search
