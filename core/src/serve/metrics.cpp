#include "serve/metrics.hpp"

#include <cstdio>
#include <set>

#include "serve/parse.hpp"

namespace gantry::serve {

void Histogram::add(double x) {
  for (size_t i = 0; i < bounds.size(); ++i)
    if (x <= bounds[i]) ++counts[i];
  ++count;
  sum += x;
}

std::string Histogram::render(const std::string& name, const std::string& help) const {
  std::string out = "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  char buf[160];
  for (size_t i = 0; i < bounds.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s_bucket{le=\"%g\"} %llu\n", name.c_str(), bounds[i],
                  static_cast<unsigned long long>(counts[i]));
    out += buf;
  }
  std::snprintf(buf, sizeof buf, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %g\n%s_count %llu\n", name.c_str(),
                static_cast<unsigned long long>(count), name.c_str(), sum, name.c_str(),
                static_cast<unsigned long long>(count));
  return out + buf;
}

void Metrics::request(const std::string& route, int status, double seconds) {
  static const std::set<std::string> known{"/healthz", "/readyz", "/v1/info", "/v1/sample", "/v1/forward", "/metrics"};
  std::lock_guard lock(m_);
  ++requests_[{known.count(route) ? route : "other", status}];
  latency_.add(seconds);
}

void Metrics::batch(int64_t rows) {
  std::lock_guard lock(m_);
  batch_rows_.add(double(rows));
}

std::string Metrics::render(int64_t queue_depth, int64_t model_step) const {
  std::string out;
  std::lock_guard lock(m_);
  out += "# HELP gantry_serve_requests_total Requests answered, by route and status.\n";
  out += "# TYPE gantry_serve_requests_total counter\n";
  for (const auto& [key, n] : requests_)
    out += "gantry_serve_requests_total{route=\"" + json_escape(key.first) + "\",status=\"" +
           std::to_string(key.second) + "\"} " + std::to_string(n) + "\n";
  out += latency_.render("gantry_serve_request_seconds", "Time from a request's arrival to its answer.");
  out += batch_rows_.render("gantry_serve_batch_rows", "Rows of each forward (dynamic batching).");
  out += "# HELP gantry_serve_queue_depth Requests waiting for the model.\n# TYPE gantry_serve_queue_depth gauge\n";
  out += "gantry_serve_queue_depth " + std::to_string(queue_depth) + "\n";
  out += "# HELP gantry_serve_model_step The served checkpoint's global step.\n# TYPE gantry_serve_model_step gauge\n";
  out += "gantry_serve_model_step " + std::to_string(model_step) + "\n";
  out += "# HELP gantry_serve_model_swaps_total Newer checkpoints swapped in (--watch).\n";
  out += "# TYPE gantry_serve_model_swaps_total counter\ngantry_serve_model_swaps_total " +
         std::to_string(swaps.load()) + "\n";
  out += "# HELP gantry_serve_timeouts_total Requests answered 504 (--request-timeout-ms).\n";
  out += "# TYPE gantry_serve_timeouts_total counter\ngantry_serve_timeouts_total " + std::to_string(timeouts.load()) +
         "\n";
  return out;
}

}  // namespace gantry::serve
