// Asynchronous successive halving, promotion type (Li et al., "A System for
// Massively Parallel Hyperparameter Tuning", MLSys 2020, Algorithm 2): rungs
// at R, R*E, R*E^2, ... steps and the budget last; a free worker promotes the
// best trial of the highest rung it can (one in the top 1/E of the results
// that rung has so far, not promoted yet), and starts a new trial when no
// rung has one. Nobody waits for a rung to fill. A promoted trial resumes
// from the checkpoint its pause left (trainer.pause_at_step), not from 0.
#pragma once

#include <cstdint>
#include <vector>

#include "search/state.hpp"

namespace gantry::search {

/// The rung steps for a first rung `r`, factor `eta` and `budget` steps:
/// r, r*eta, ... while below the budget, then the budget.
std::vector<int64_t> rung_steps(int64_t r, int64_t eta, int64_t budget);

struct Action {
  enum class Kind { kNone, kNew, kResume } kind = Kind::kNone;
  int trial = -1;      ///< kResume: which
  int64_t target = 0;  ///< the step it runs to
};

struct Asha {
  std::vector<int64_t> rungs;
  int64_t eta = 3;
  int max_trials = 0;
  bool maximize = false;

  /// What a free worker does next; `busy`: trials running now (not offered).
  /// Interrupted trials (a stopped search) go on first, to their target.
  Action next(const SearchState& s) const;
  /// The rung index a step is (-1: none).
  int rung_of(int64_t step) const;
  /// The top floor(n / eta) trials of rung k by score (ties: the earlier result).
  std::vector<int> top(const SearchState& s, int k) const;
};

}  // namespace gantry::search
