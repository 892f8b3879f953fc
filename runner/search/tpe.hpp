// The tree-structured Parzen estimator (Bergstra, Bardenet, Bengio, Kegl,
// "Algorithms for Hyper-Parameter Optimization", NeurIPS 2011), as Optuna's
// TPESampler does it by default (univariate, its bandwidths and prior):
// a new trial's values for `gantry search --method tpe`, which schedules
// trials as ASHA does (asha.hpp). After the first `startup` trials (random
// draws), the trials with a score are ranked: the furthest rung first, then
// the score there (Optuna ranks pruned trials so), and the top quarter
// (hyperopt's gamma 0.25, at most 25) is "good". In each key's unit space
// (space.hpp: log for loguniform) l(x) is a mixture of truncated Gaussians
// at the good values plus a prior N(0.5, 1), g(x) the same over the rest;
// 24 candidates drawn from l, the one with the largest l(x)/g(x) is taken.
// A choice is categorical: counts plus a uniform prior.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "search/space.hpp"
#include "search/state.hpp"

namespace gantry::search {

struct Tpe {
  const std::vector<Dimension>* space = nullptr;
  bool maximize = false;
  uint64_t seed = 0;
  int startup = 10;     ///< trials drawn at random first
  int candidates = 24;  ///< Optuna's n_ei_candidates
  double gamma = 0.25;  ///< the good quarter

  /// Trial `trial`'s overrides ("system.lr=0.0003", a key each), from the
  /// journal's scores so far and the trial's own stream: the same state
  /// gives the same values.
  std::vector<std::string> sample(const SearchState& s, int trial) const;
};

/// The startup trials for `trials` in all: 10, or a third of them when fewer
/// than 30 (at least 2).
int tpe_startup(int trials);

}  // namespace gantry::search
