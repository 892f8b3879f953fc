// gantry serve's counters, rendered in Prometheus's text format (/metrics).
// No LibTorch: the batcher and the connections both count here.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "gantry/core_export.hpp"

namespace gantry::serve {

/// A Prometheus histogram: cumulative buckets at fixed upper bounds.
struct GANTRY_CORE_EXPORT Histogram {
  std::vector<double> bounds;
  std::vector<uint64_t> counts;  ///< per bound: values <= it
  uint64_t count = 0;
  double sum = 0;
  explicit Histogram(std::vector<double> b) : bounds(std::move(b)), counts(bounds.size(), 0) {}
  void add(double x);
  std::string render(const std::string& name, const std::string& help) const;
};

/// What /metrics reports. Thread-safe.
class GANTRY_CORE_EXPORT Metrics {
 public:
  /// A request answered: its route ("other" for an unknown one), status and time.
  void request(const std::string& route, int status, double seconds);
  /// One forward of `rows` rows.
  void batch(int64_t rows);
  /// The whole page; the gauges are the caller's (the queue, the served step).
  std::string render(int64_t queue_depth, int64_t model_step) const;

  std::atomic<uint64_t> swaps{0};     ///< newer checkpoints swapped in (--watch)
  std::atomic<uint64_t> timeouts{0};  ///< requests answered 504

 private:
  mutable std::mutex m_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;  // (route, status)
  Histogram latency_{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}};
  Histogram batch_rows_{{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096}};
};

}  // namespace gantry::serve
