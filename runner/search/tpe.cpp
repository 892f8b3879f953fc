#include "search/tpe.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace gantry::search {

namespace {

constexpr double kPi = 3.14159265358979323846;

double uniform01(std::mt19937_64& rng) { return double(rng() >> 11) * 0x1.0p-53; }

double normal(std::mt19937_64& rng) {  // Box-Muller: the same on every platform (std::normal_distribution is not)
  const double u = 1.0 - uniform01(rng), v = uniform01(rng);
  return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * kPi * v);
}

double phi(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

// A mixture of Gaussians truncated to [0, 1]: one at each observation, the
// prior N(0.5, 1) besides, each weight 1; bandwidths as Optuna's
// (the larger gap to a neighbour, clipped to [1 / min(100, n + 1), 1]).
struct Parzen {
  std::vector<double> mu, sigma;

  explicit Parzen(std::vector<double> points) {
    points.push_back(0.5);  // the prior's place
    std::vector<size_t> order(points.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return points[a] < points[b]; });
    const size_t n = points.size();
    const double low = 1.0 / double(std::min<size_t>(100, n + 1));
    mu.resize(n);
    sigma.resize(n);
    for (size_t k = 0; k < n; ++k) {
      const size_t i = order[k];
      const double left = k > 0 ? points[i] - points[order[k - 1]] : 0;
      const double right = k + 1 < n ? points[order[k + 1]] - points[i] : 0;
      mu[i] = points[i];
      sigma[i] = std::clamp(std::max(left, right), low, 1.0);
    }
    sigma[n - 1] = 1.0;  // the prior's width is the whole range
  }

  double draw(std::mt19937_64& rng) const {
    const size_t i = size_t(rng() % mu.size());
    for (int tries = 0; tries < 100; ++tries) {
      const double x = mu[i] + sigma[i] * normal(rng);
      if (x >= 0 && x <= 1) return x;
    }
    return std::clamp(mu[i], 0.0, 1.0);
  }

  double log_pdf(double x) const {
    double p = 0;
    for (size_t i = 0; i < mu.size(); ++i) {
      const double z = (x - mu[i]) / sigma[i];
      const double mass = phi((1 - mu[i]) / sigma[i]) - phi((0 - mu[i]) / sigma[i]);
      p += std::exp(-0.5 * z * z) / (sigma[i] * std::sqrt(2 * kPi) * std::max(mass, 1e-12));
    }
    return std::log(std::max(p / double(mu.size()), std::numeric_limits<double>::min()));
  }
};

}  // namespace

int tpe_startup(int trials) { return trials >= 30 ? 10 : std::max(2, trials / 3); }

std::vector<std::string> Tpe::sample(const SearchState& s, int trial) const {
  std::mt19937_64 rng = trial_rng(seed, uint64_t(trial), 0);
  // Ranked: the furthest step first, then the score there (NaN last), ties the earlier.
  std::vector<const Trial*> scored;
  for (const auto& t : s.trials)
    if (!t.scores.empty() && t.id != trial) scored.push_back(&t);
  if (int(s.trials.size()) < startup || int(scored.size()) < 2 || !space) {
    std::vector<std::string> out;
    if (space)
      for (const auto& d : *space) out.push_back(d.key + "=" + d.sample(rng));
    return out;
  }
  std::stable_sort(scored.begin(), scored.end(), [&](const Trial* a, const Trial* b) {
    const Score &x = a->scores.back(), &y = b->scores.back();
    if (x.step != y.step) return x.step > y.step;
    if (better(x.value, y.value, maximize)) return true;
    if (better(y.value, x.value, maximize)) return false;
    return x.order < y.order;
  });
  const size_t good = std::min<size_t>(25, size_t(std::ceil(gamma * double(scored.size()))));
  std::mt19937_64 draws = trial_rng(seed, uint64_t(trial), 2);
  std::vector<std::string> out;
  for (const Dimension& d : *space) {
    std::vector<double> l, g;
    for (size_t i = 0; i < scored.size(); ++i) (i < good ? l : g).push_back(d.unit(scored[i]->value(d.key)));
    if (d.kind == Dimension::Kind::kChoice) {
      const size_t k = d.values.size();
      auto weights = [&](const std::vector<double>& at) {
        std::vector<double> w(k, 1.0 / double(k));  // the prior: one observation spread evenly
        for (const double u : at) w[std::min(k - 1, size_t(u * double(k)))] += 1;
        return w;
      };
      const std::vector<double> wl = weights(l), wg = weights(g);
      double total_l = 0, total_g = 0;
      for (size_t i = 0; i < k; ++i) total_l += wl[i], total_g += wg[i];
      size_t best = 0;
      double best_score = -std::numeric_limits<double>::infinity();
      for (int c = 0; c < candidates; ++c) {
        double r = uniform01(draws) * total_l;
        size_t i = 0;
        while (i + 1 < k && r >= wl[i]) r -= wl[i++];
        const double score = std::log(wl[i] / total_l) - std::log(wg[i] / total_g);
        if (score > best_score) best_score = score, best = i;
      }
      out.push_back(d.key + "=" + d.values[best]);
      continue;
    }
    const Parzen pl(l), pg(g);
    double best = 0.5, best_score = -std::numeric_limits<double>::infinity();
    for (int c = 0; c < candidates; ++c) {
      const double x = pl.draw(draws);
      const double score = pl.log_pdf(x) - pg.log_pdf(x);
      if (score > best_score) best_score = score, best = x;
    }
    out.push_back(d.key + "=" + d.from_unit(best));
  }
  return out;
}

}  // namespace gantry::search
