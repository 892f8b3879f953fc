// `gantry search ... --summary`: the leaderboard of a search's trials.
#pragma once

#include <string>

#include "search/plan.hpp"
#include "search/state.hpp"

namespace gantry::search {

/// The table, best first: the furthest step reached, then the score there
/// (ties: the earlier result); then the best trial, its values and its run.
std::string summary_text(const SearchState& s, const Plan& p);
void print_summary(const SearchState& s, const Plan& p);

}  // namespace gantry::search
