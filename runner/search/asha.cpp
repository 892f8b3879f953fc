#include "search/asha.hpp"

#include <algorithm>

namespace gantry::search {

std::vector<int64_t> rung_steps(int64_t r, int64_t eta, int64_t budget) {
  std::vector<int64_t> out;
  for (int64_t s = r; s < budget; s *= eta) {
    out.push_back(s);
    if (eta < 2) break;
  }
  out.push_back(budget);
  return out;
}

int Asha::rung_of(int64_t step) const {
  for (size_t k = 0; k < rungs.size(); ++k)
    if (rungs[k] == step) return int(k);
  return -1;
}

std::vector<int> Asha::top(const SearchState& s, int k) const {
  const std::vector<int> ranked = ranked_at(s, rungs[size_t(k)], maximize);
  std::vector<int> out;
  const size_t n = ranked.size() / size_t(std::max<int64_t>(eta, 1));
  for (size_t i = 0; i < n; ++i) {
    const double v = s.trials[size_t(ranked[i])].score_at(rungs[size_t(k)])->value;
    if (v == v) out.push_back(ranked[i]);  // a NaN is never promoted
  }
  return out;
}

Action Asha::next(const SearchState& s) const {
  for (const auto& t : s.trials) {
    if (t.status == Status::kInterrupted) return {Action::Kind::kResume, t.id, t.target};
    if (t.status == Status::kNew) return {Action::Kind::kNew, t.id, rungs.front()};  // sampled, never started
  }
  // The highest rung first (Algorithm 2: for k = K-1 down to 0).
  for (int k = int(rungs.size()) - 2; k >= 0; --k)
    for (const int id : top(s, k)) {
      const Trial& t = s.trials[size_t(id)];
      if (t.status == Status::kPaused && t.reached() == rungs[size_t(k)])
        return {Action::Kind::kResume, id, rungs[size_t(k) + 1]};
    }
  if (int(s.trials.size()) < max_trials) return {Action::Kind::kNew, int(s.trials.size()), rungs.front()};
  return {};
}

}  // namespace gantry::search
