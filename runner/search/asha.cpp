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
  struct Entry {
    int trial;
    Score score;
  };
  std::vector<Entry> at;
  for (const auto& t : s.trials)
    if (const Score* sc = t.score_at(rungs[size_t(k)])) at.push_back({t.id, *sc});
  std::stable_sort(at.begin(), at.end(), [&](const Entry& a, const Entry& b) {
    if (better(a.score.value, b.score.value, maximize)) return true;
    if (better(b.score.value, a.score.value, maximize)) return false;
    return a.score.order < b.score.order;
  });
  std::vector<int> out;
  const size_t n = at.size() / size_t(std::max<int64_t>(eta, 1));
  for (size_t i = 0; i < n; ++i)
    if (at[i].score.value == at[i].score.value) out.push_back(at[i].trial);
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
