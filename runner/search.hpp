// `gantry search CONFIG key=DIST ... --method asha|random --trials N
// --budget STEPS --metric M`: trials of sampled values, each an ordinary run,
// paused at rungs and promoted by asynchronous successive halving; local, K
// at a time (see search.cpp, docs/search.md).
#pragma once

#include <string>
#include <vector>

#include "search/plan.hpp"

namespace gantry {

/// Runs the search (or, with `summary_only`, prints its leaderboard).
/// Returns 0 when it ended, 1 when a trial failed (the others ran), 128 +
/// signal when stopped (rerun the command: it continues).
int run_search(const std::string& config, const std::vector<std::string>& args, const search::SearchOptions& opt);

}  // namespace gantry
