#include "search/pbt.hpp"

#include <algorithm>

namespace gantry::search {

namespace {

bool living(const Trial& t) {
  return t.status != Status::kStopped && t.status != Status::kFailed && t.status != Status::kDone;
}

}  // namespace

std::vector<int64_t> interval_steps(int64_t r, int64_t budget) {
  std::vector<int64_t> out;
  for (int64_t s = r; r > 0 && s < budget; s += r) out.push_back(s);
  out.push_back(budget);
  return out;
}

Action Pbt::next(const SearchState& s) const {
  for (const auto& t : s.trials) {
    if (t.status == Status::kInterrupted) return {Action::Kind::kResume, t.id, t.target};
    if (t.status == Status::kNew) return {Action::Kind::kNew, t.id, steps.front()};
  }
  if (int(s.trials.size()) < population) return {Action::Kind::kNew, int(s.trials.size()), steps.front()};
  if (s.decided <= 0) return {};
  const auto at = std::find(steps.begin(), steps.end(), s.decided);
  if (at == steps.end() || at + 1 == steps.end()) return {};
  for (const auto& t : s.trials)
    if (t.status == Status::kPaused && t.reached() == s.decided) return {Action::Kind::kResume, t.id, *(at + 1)};
  return {};
}

int64_t Pbt::decide_at(const SearchState& s) const {
  if (int(s.trials.size()) < population) return -1;
  int64_t step = -1;
  for (const auto& t : s.trials) {
    if (!living(t)) continue;
    if (t.status != Status::kPaused) return -1;  // running, interrupted, never started
    if (step >= 0 && t.reached() != step) return -1;
    step = t.reached();
  }
  return step > s.decided && step < steps.back() ? step : -1;
}

std::vector<Exploit> Pbt::decide(const SearchState& s, int64_t step) const {
  const std::vector<int> at = ranked_at(s, step, maximize, living);
  const size_t k = size_t(double(at.size()) * quantile);
  std::vector<Exploit> out;
  for (size_t i = 0; i < k; ++i) {
    const int worst = at[at.size() - 1 - i];
    std::mt19937_64 rng = trial_rng(seed, uint64_t(worst), 1 + uint64_t(step));
    Exploit e;
    e.trial = worst;
    e.from = at[size_t(rng() % k)];
    e.step = step;
    const Trial& source = s.trials[size_t(e.from)];
    if (space)
      for (const Dimension& d : *space) {
        const bool resample = rng() % 4 == 0;
        e.overrides.push_back(d.key + "=" + d.perturb(source.value(d.key), rng, resample));
      }
    e.seed = rng();
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace gantry::search
