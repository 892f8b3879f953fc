#include "ranks_model.hpp"

#include <algorithm>
#include <cstdio>
#include <map>

namespace gantry::client {

namespace {

double median_of(std::vector<double> v) {
  if (v.empty()) return -1;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + long(mid), v.end());
  if (v.size() % 2) return v[mid];
  const double upper = v[mid];
  return (upper + *std::max_element(v.begin(), v.begin() + long(mid))) / 2;
}

std::string fixed(double v, int digits) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", digits, v);
  return text;
}

}  // namespace

RanksSummary summarize_ranks(const RunState& state, double now, bool slowest_first) {
  RanksSummary out;
  std::vector<double> busy, steps;
  for (const auto& [rank, s] : state.ranks()) {
    if (s.busy_ms() >= 0) busy.push_back(s.busy_ms());
    if (s.step_ms >= 0) steps.push_back(s.step_ms);
  }
  out.busy_median = median_of(busy);
  out.busy_max = busy.empty() ? -1 : *std::max_element(busy.begin(), busy.end());
  out.step_ms = median_of(steps);
  std::map<std::string, size_t> node_of;  // host -> index in out.nodes (first rank's order)
  for (const auto& [rank, s] : state.ranks()) {
    RankCell c;
    c.status = s;
    c.stale = state.is_stale(s, now);
    c.straggler = s.straggler;
    if (s.busy_ms() >= 0 && out.busy_median > 0) {
      c.ratio = s.busy_ms() / out.busy_median;
      c.heat = std::clamp(c.ratio - 1, 0.0, 1.0);
    }
    auto [it, fresh] = node_of.emplace(s.host, out.nodes.size());
    if (fresh) {
      out.nodes.emplace_back();
      out.nodes.back().host = s.host;
    }
    NodeGroup& n = out.nodes[it->second];
    n.ranks.push_back(c);
    n.samples_per_s += s.samples_per_s;
    n.stragglers += c.straggler;
    n.stale += c.stale;
    ++out.ranks;
    out.stragglers += c.straggler;
    out.stale += c.stale;
  }
  for (NodeGroup& n : out.nodes) {
    std::vector<double> b;
    for (const RankCell& c : n.ranks)
      if (c.status.busy_ms() >= 0) b.push_back(c.status.busy_ms());
    n.busy_median = median_of(b);
    n.busy_max = b.empty() ? -1 : *std::max_element(b.begin(), b.end());
    for (const RankCell& c : n.ranks) n.max_ratio = std::max(n.max_ratio, c.ratio);
  }
  if (slowest_first) {
    auto key = [](const RankCell& c) { return c.status.busy_ms(); };
    for (NodeGroup& n : out.nodes)
      std::stable_sort(n.ranks.begin(), n.ranks.end(),
                       [&](const RankCell& a, const RankCell& b) { return key(a) > key(b); });
    std::stable_sort(out.nodes.begin(), out.nodes.end(),
                     [](const NodeGroup& a, const NodeGroup& b) { return a.busy_max > b.busy_max; });
  }
  return out;
}

std::string RanksSummary::headline() const {
  std::string t = std::to_string(ranks) + (ranks == 1 ? " rank" : " ranks") + " on " + std::to_string(nodes.size()) +
                  (nodes.size() == 1 ? " node" : " nodes");
  if (step_ms >= 0)
    t += " | step " + fixed(step_ms, 1) + " ms, busy median " + fixed(busy_median, 1) + " ms, max " +
         fixed(busy_max, 1) + " ms";
  t += " | " + std::to_string(stragglers) + (stragglers == 1 ? " straggler" : " stragglers");
  t += " | " + std::to_string(stale) + " stopped reporting";
  return t;
}

std::vector<StepPart> step_parts(const wire::RankStatus& s) {
  if (s.step_ms < 0) return {};
  return {{"data", s.data_ms, 0x4e79a7},
          {"compute", s.compute_ms, 0x59a14f},
          {"comm", s.comm_ms, 0xbab0ac},
          {"optimizer", s.optimizer_ms, 0xf28e2b},
          {"other", s.other_ms, 0xb07aa1}};
}

uint32_t heat_rgb(double heat) {
  if (heat < 0) return 0x808080;
  const double h = std::clamp(heat, 0.0, 1.0);
  // green (60,170,80) -> yellow (235,200,60) -> red (215,50,40)
  auto mix = [](uint32_t a, uint32_t b, double t) {
    uint32_t out = 0;
    for (int shift : {16, 8, 0}) {
      const double x = double((a >> shift) & 0xff), y = double((b >> shift) & 0xff);
      out |= uint32_t(x + (y - x) * t + 0.5) << shift;
    }
    return out;
  };
  return h < 0.5 ? mix(0x3caa50, 0xebc83c, h * 2) : mix(0xebc83c, 0xd73228, (h - 0.5) * 2);
}

std::string rank_detail(const RankCell& c) {
  const wire::RankStatus& s = c.status;
  std::string t = "rank " + std::to_string(s.rank) + " (" + s.host + "): step " + std::to_string(s.step);
  if (s.step_ms >= 0) {
    t += ", " + fixed(s.step_ms, 1) + " ms =";
    bool first = true;
    for (const StepPart& p : step_parts(s)) {
      t += std::string(first ? " " : " + ") + p.name + " " + fixed(p.ms, 1);
      first = false;
    }
    t += "; busy " + fixed(s.busy_ms(), 1) + " ms";
    if (c.ratio >= 0) t += " (" + fixed(c.ratio, 1) + "x the median)";
  }
  if (s.last_pct >= 0) t += "; last at " + fixed(s.last_pct, 0) + "% of the exchanges";
  if (s.link_ms >= 0) t += "; round trip to rank 0 " + fixed(s.link_ms, 1) + " ms";
  if (s.cpu_pct >= 0) t += "; CPU " + fixed(s.cpu_pct, 0) + "%";
  t += "; RSS " + fixed(s.rss_mib, 0) + " MiB";
  if (s.gpu_util_pct >= 0 || s.gpu_mem_mib >= 0)
    t +=
        "; GPU " + fixed(s.gpu_util_pct, 0) + "% " + fixed(s.gpu_mem_mib, 0) + " MiB " + fixed(s.gpu_power_w, 0) + " W";
  if (c.straggler) t += "; STRAGGLER";
  if (c.stale) t += "; stopped reporting";
  return t;
}

}  // namespace gantry::client
