#include "series.hpp"

#include <algorithm>
#include <cmath>

namespace gantry::client {

void Series::append(int64_t step, double wall_time, double value) {
  steps.push_back(static_cast<double>(step));
  wall_times.push_back(wall_time);
  values.push_back(value);
}

void Series::drop_after(int64_t step) {
  size_t keep = 0;
  for (size_t i = 0; i < steps.size(); ++i)
    if (steps[i] <= static_cast<double>(step)) {
      steps[keep] = steps[i];
      wall_times[keep] = wall_times[i];
      values[keep] = values[i];
      ++keep;
    }
  if (keep != steps.size()) ++generation;
  steps.resize(keep);
  wall_times.resize(keep);
  values.resize(keep);
}

std::vector<double> smooth_ema(const std::vector<double>& values, double weight) {
  Smoother s;
  return s.update(values, weight);
}

const std::vector<double>& Smoother::update(const std::vector<double>& values, double weight,
                                            uint64_t data_generation) {
  if (weight != weight_ || values.size() < out_.size() || data_generation != data_generation_) {
    data_generation_ = data_generation;
    ++generation_;
    out_.clear();
    weight_ = weight;
    last_ = 0;
    accum_ = 0;
    constant_ = true;
  }
  if (!out_.empty() && constant_)
    for (size_t i = out_.size(); i < values.size(); ++i)
      if (values[i] != first_) {  // no longer constant: TensorBoard smooths it all
        ++generation_;
        out_.clear();
        last_ = 0;
        accum_ = 0;
        constant_ = false;
        break;
      }
  if (out_.empty() && !values.empty()) {
    first_ = values[0];
    constant_ = std::all_of(values.begin(), values.end(), [&](double v) { return v == first_; });
  }
  for (size_t i = out_.size(); i < values.size(); ++i) {
    const double v = values[i];
    if (constant_ || !std::isfinite(v)) {
      out_.push_back(v);
      continue;
    }
    last_ = last_ * weight + (1 - weight) * v;
    ++accum_;
    const double debias = weight == 1 ? 1 : 1 - std::pow(weight, static_cast<double>(accum_));
    out_.push_back(last_ / debias);
  }
  return out_;
}

std::vector<size_t> decimate(const std::vector<double>& x, const std::vector<double>& y, double x0, double x1,
                             int columns) {
  Decimator d;
  return d.decimate(x, y, x0, x1, columns);
}

void Decimator::extend(const std::vector<double>& y) {
  for (size_t b = lo_.size(); (b + 1) * kBlock <= y.size(); ++b) {
    size_t lo = kNone, hi = kNone;
    for (size_t i = b * kBlock; i < (b + 1) * kBlock; ++i) {
      if (!std::isfinite(y[i])) continue;
      if (lo == kNone || y[i] < y[lo]) lo = i;
      if (hi == kNone || y[i] > y[hi]) hi = i;
    }
    lo_.push_back(lo);
    hi_.push_back(hi);
  }
}

std::vector<size_t> Decimator::decimate(const std::vector<double>& x, const std::vector<double>& y, double x0,
                                        double x1, int columns, uint64_t generation) {
  std::vector<size_t> out;
  const size_t n = std::min(x.size(), y.size());
  if (generation != generation_ || lo_.size() * kBlock > n) {
    lo_.clear();
    hi_.clear();
    generation_ = generation;
  }
  extend(y);
  if (n == 0 || columns <= 0 || !(x1 >= x0)) return out;
  const auto xb = x.begin(), xe = x.begin() + static_cast<long>(n);
  const size_t begin = static_cast<size_t>(std::lower_bound(xb, xe, x0) - xb);
  const size_t end = static_cast<size_t>(std::upper_bound(xb, xe, x1) - xb);
  for (size_t j = begin; j-- > 0;)
    if (std::isfinite(y[j])) {
      out.push_back(j);
      break;
    }
  const double span = x1 > x0 ? x1 - x0 : 1;
  auto column = [&](double v) { return std::min<long>(columns - 1, static_cast<long>((v - x0) / span * columns)); };
  size_t i = begin;
  while (i < end) {
    // The points of this column: [i, stop).
    const long c = column(x[i]);
    const size_t stop = static_cast<size_t>(std::partition_point(xb + static_cast<long>(i), xb + static_cast<long>(end),
                                                                 [&](double v) { return column(v) <= c; }) -
                                            xb);
    size_t lo = kNone, hi = kNone;
    auto consider = [&](size_t k) {
      if (k == kNone) return;
      if (lo == kNone || y[k] < y[lo] || (y[k] == y[lo] && k < lo)) lo = k;
      if (hi == kNone || y[k] > y[hi] || (y[k] == y[hi] && k < hi)) hi = k;
    };
    for (size_t k = i; k < stop;) {
      if (k % kBlock == 0 && k + kBlock <= stop && k / kBlock < lo_.size()) {  // a whole block
        consider(lo_[k / kBlock]);
        consider(hi_[k / kBlock]);
        k += kBlock;
      } else {
        if (std::isfinite(y[k])) consider(k);
        ++k;
      }
    }
    if (lo != kNone) {
      out.push_back(std::min(lo, hi));
      if (lo != hi) out.push_back(std::max(lo, hi));
    }
    i = stop;
  }
  for (size_t j = end; j < n; ++j)
    if (std::isfinite(y[j])) {
      out.push_back(j);
      break;
    }
  return out;
}

std::string metric_group(const std::string& name) {
  if (const size_t slash = name.find('/'); slash != std::string::npos && slash > 0) return name.substr(0, slash);
  if (name == "loss" || (name.size() > 5 && name.compare(name.size() - 5, 5, "_loss") == 0)) return "loss";
  return name;
}

double tick_step(double span, int ticks) {
  if (!(span > 0) || ticks <= 0) return 1;
  const double raw = span / ticks;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

uint32_t series_color(size_t i) {
  static const uint32_t kPalette[] = {0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd, 0x8c564b};
  return kPalette[i % (sizeof kPalette / sizeof kPalette[0])];
}

long nearest_index(const std::vector<double>& x, double at) {
  if (x.empty()) return -1;
  const auto it = std::lower_bound(x.begin(), x.end(), at);
  if (it == x.begin()) return 0;
  if (it == x.end()) return static_cast<long>(x.size()) - 1;
  const long i = static_cast<long>(it - x.begin());
  return (at - x[i - 1] <= x[i] - at) ? i - 1 : i;
}

}  // namespace gantry::client
