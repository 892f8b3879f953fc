#include "chart.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

namespace gantry::client {

namespace {

// Towards white: 0 leaves the colour, 1 is white.
uint32_t lighten(uint32_t rgb, double f) {
  uint32_t out = 0;
  for (int shift : {16, 8, 0}) {
    const double c = (rgb >> shift) & 0xff;
    out |= static_cast<uint32_t>(std::lround(c + (255 - c) * f)) << shift;
  }
  return out;
}

ChartAxis axis(double lo, double hi, int ticks) {
  ChartAxis a{lo, hi, {}};
  const double step = tick_step(hi - lo, ticks);
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step)
    a.ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  return a;
}

void flatten(const YAML::Node& node, const std::string& prefix, std::map<std::string, std::string>& out) {
  if (node.IsMap()) {
    for (const auto& kv : node)
      flatten(kv.second, prefix.empty() ? kv.first.as<std::string>() : prefix + "." + kv.first.as<std::string>(), out);
    return;
  }
  if (node.IsScalar()) {
    out[prefix] = node.Scalar();
    return;
  }
  YAML::Emitter e;
  e << YAML::Flow << node;
  out[prefix] = e.c_str();
}

}  // namespace

double Chart::to_axis(double value) const { return log_y ? std::log10(value) : value; }

std::string Chart::y_label(double tick) const {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", log_y ? std::pow(10.0, tick) : tick);
  return buf;
}

std::vector<std::string> chart_groups(const std::vector<ChartRun>& runs) {
  std::set<std::string> groups;
  for (const auto& r : runs)
    if (r.visible && r.series)
      for (const auto& [name, s] : *r.series) groups.insert(metric_group(name));
  return {groups.begin(), groups.end()};
}

namespace {

// x of a run's points: steps, or wall times shifted to the run's start.
const std::vector<double>& base_x(const Series& s, XAxis x) { return x == XAxis::kStep ? s.steps : s.wall_times; }
double x_offset(const ChartRun& r, XAxis x) { return x == XAxis::kRelative ? -r.start_time : 0; }

}  // namespace

Chart ChartModel::build(const std::vector<ChartRun>& runs, const std::string& group, const ChartOptions& opt) {
  Chart chart;
  chart.group = group;
  chart.log_y = opt.log_y;
  const bool several = runs.size() > 1;
  // The lines: every visible run's metrics of this group, runs in order.
  struct Source {
    size_t run;
    const std::string* metric;
    const Series* series;
  };
  std::vector<Source> sources;
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0;
  for (size_t r = 0; r < runs.size(); ++r) {
    if (!runs[r].visible || !runs[r].series) continue;
    for (const auto& [name, s] : *runs[r].series) {
      if (metric_group(name) != group) continue;
      sources.push_back({r, &name, &s});
      const auto& bx = base_x(s, opt.x);
      const double off = x_offset(runs[r], opt.x);
      if (!bx.empty()) x0 = std::min(x0, bx.front() + off), x1 = std::max(x1, bx.back() + off);
    }
  }
  if (!(x0 <= x1)) x0 = 0, x1 = 1;
  if (opt.zoomed) x0 = opt.x_lo, x1 = opt.x_hi;
  if (x1 <= x0) {  // one point (or none): centred, with room either side
    const double half = std::max(1.0, std::abs(x0) * 0.05);
    x0 -= half;
    x1 += half;
  }
  const int columns = std::max(10, opt.columns);
  auto usable = [&](double v) { return std::isfinite(v) && (!opt.log_y || v > 0); };
  double y0 = std::numeric_limits<double>::infinity(), y1 = -y0;
  size_t metric_in_run = 0;
  for (size_t k = 0; k < sources.size(); ++k) {
    const Source& src = sources[k];
    metric_in_run = (k > 0 && sources[k - 1].run == src.run) ? metric_in_run + 1 : 0;
    const Series& s = *src.series;
    const auto& bx = base_x(s, opt.x);
    const double off = x_offset(runs[src.run], opt.x);
    ChartLine line;
    line.run = src.run;
    line.metric = *src.metric;
    line.label = several ? runs[src.run].name + ": " + line.metric : line.metric;
    line.color = several ? lighten(series_color(src.run), 1 - std::pow(0.55, double(metric_in_run)))
                         : series_color(metric_in_run);
    Cache& cache = cache_[{runs[src.run].name, line.metric}];
    auto keep = [&](const std::vector<size_t>& idx, const std::vector<double>& y, std::vector<double>& ox,
                    std::vector<double>& oy, bool ranges) {
      for (size_t i : idx) {
        if (!usable(y[i])) continue;
        const double x = bx[i] + off;
        ox.push_back(x);
        oy.push_back(y[i]);
        if (ranges && x >= x0 && x <= x1)
          y0 = std::min(y0, chart.to_axis(y[i])), y1 = std::max(y1, chart.to_axis(y[i]));
      }
    };
    keep(cache.raw.decimate(bx, s.values, x0 - off, x1 - off, columns, s.generation), s.values, line.x, line.y, true);
    if (opt.smoothing > 0) {
      const auto& sm = cache.smoother.update(s.values, opt.smoothing, s.generation);
      keep(cache.smooth.decimate(bx, sm, x0 - off, x1 - off, columns, cache.smoother.generation()), sm, line.sx,
           line.sy, false);
    }
    line.markers = line.x.size() <= kMarkerPoints;
    chart.lines.push_back(std::move(line));
  }
  if (!(y0 <= y1)) y0 = 0, y1 = 1;
  const double pad = (y1 - y0) * 0.05 + (y1 == y0 ? 0.5 : 0);
  chart.x = axis(x0, x1, 6);
  chart.y = axis(y0 - pad, y1 + pad, 5);
  x_kind_ = opt.x;
  return chart;
}

std::string ChartModel::readout(const std::vector<ChartRun>& runs, const Chart& chart, double at) const {
  std::string text;
  char buf[160];
  for (const auto& line : chart.lines) {
    const Series& s = runs[line.run].series->at(line.metric);
    const long i = nearest_index(base_x(s, x_kind_), at - x_offset(runs[line.run], x_kind_));
    if (i < 0) continue;
    if (text.empty()) text = "step " + std::to_string(static_cast<long long>(s.steps[i]));
    const auto it = cache_.find({runs[line.run].name, line.metric});
    const bool smoothed = !line.sx.empty() && it != cache_.end() && size_t(i) < it->second.smoother.smoothed().size();
    if (smoothed)
      std::snprintf(buf, sizeof buf, "\n%s %.5g (smoothed %.5g)", line.label.c_str(), s.values[i],
                    it->second.smoother.smoothed()[i]);
    else
      std::snprintf(buf, sizeof buf, "\n%s %.5g", line.label.c_str(), s.values[i]);
    text += buf;
  }
  return text;
}

std::vector<std::string> differing_keys(const std::vector<std::string>& config_yamls,
                                        std::map<std::string, std::vector<std::string>>* values) {
  std::vector<std::map<std::string, std::string>> flat(config_yamls.size());
  std::set<std::string> keys;
  for (size_t i = 0; i < config_yamls.size(); ++i) {
    try {
      flatten(YAML::Load(config_yamls[i]), "", flat[i]);
    } catch (const YAML::Exception&) {
      // an unreadable config has no keys: every key shows as missing from it
    }
    for (const auto& [k, v] : flat[i]) keys.insert(k);
  }
  std::vector<std::string> out;
  for (const auto& k : keys) {
    if (k == "name" || k.rfind("trainer.out_dir", 0) == 0 || k == "trainer.resume" || k == "trainer.pause_at_step" ||
        k.rfind("monitor.", 0) == 0)
      continue;  // bookkeeping: differs between sweep points or runs without telling them apart
    std::vector<std::string> column;
    for (const auto& f : flat) {
      const auto it = f.find(k);
      column.push_back(it == f.end() ? "" : it->second);
    }
    bool differ = false;
    for (const auto& v : column) differ = differ || v != column.front();
    if (!differ) continue;
    out.push_back(k);
    if (values) (*values)[k] = column;
  }
  return out;
}

const RunsTable& RunsTableModel::update(const std::vector<ChartRun>& runs, const std::vector<std::string>& configs,
                                        size_t most) {
  size_t known = 0;
  for (const auto& c : configs) known += c.empty() ? 0 : 1;
  if (known != configs_seen_) {
    configs_seen_ = known;
    table_.values.clear();
    table_.keys = known == configs.size() ? differing_keys(configs, &table_.values) : std::vector<std::string>{};
  }
  std::set<std::string> names;
  for (const auto& r : runs)
    if (r.series)
      for (const auto& [name, s] : *r.series)
        if (name.rfind("lr-", 0) != 0 && !(name.size() > 8 && name.compare(name.size() - 8, 8, "_seconds") == 0))
          names.insert(name);
  table_.metrics.assign(names.begin(), names.end());
  if (table_.metrics.size() > most) table_.metrics.resize(most);
  return table_;
}

}  // namespace gantry::client
