// The engine's small readers and file helpers (gantry/engine.hpp) that need
// no LibTorch: a run's metrics.csv as a search reads it, and the files and
// cores the runner asks about. Kept out of commands.cpp, which includes torch.
#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "files/files.hpp"
#include "gantry/engine.hpp"
#include "io/metrics_csv.hpp"
#include "runtime/runtime.hpp"

namespace gantry::engine {

LastMetrics last_metrics(const std::string& metrics_csv) {
  std::ifstream in(metrics_csv);
  std::string header, line;
  std::getline(in, header);
  if (header.empty()) return {};
  LastMetrics m;
  m.columns = split_csv_line(header);
  m.values.resize(m.columns.size());
  bool any = false;
  while (std::getline(in, line)) {
    const std::vector<std::string> cells = split_csv_line(line);
    for (size_t i = 0; i < cells.size() && i < m.values.size(); ++i)
      if (!cells[i].empty()) {
        m.values[i] = cells[i];
        any = true;
      }
  }
  if (!any) return {};
  return m;
}

MetricSeries metric_series(const std::string& metrics_csv, const std::string& metric) {
  std::ifstream in(metrics_csv);
  std::string header, line;
  std::getline(in, header);
  MetricSeries m;
  if (header.empty()) return m;
  m.columns = split_csv_line(header);
  const auto at = std::find(m.columns.begin(), m.columns.end(), metric);
  if (at == m.columns.end() || m.columns.empty() || m.columns[0] != "step") return m;
  const size_t col = size_t(at - m.columns.begin());
  while (std::getline(in, line)) {
    const std::vector<std::string> cells = split_csv_line(line);
    if (col >= cells.size() || cells[col].empty() || cells[0].empty()) continue;
    char* end = nullptr;
    const long long step = std::strtoll(cells[0].c_str(), &end, 10);
    if (*end) continue;
    m.steps.push_back(step);
    m.values.push_back(cells[col]);
  }
  return m;
}

void write_file_atomic(const std::string& path, const std::string& bytes) { gantry::write_file_atomic(path, bytes); }

std::string read_file(const std::string& path, uint64_t max_bytes, const std::string& what) {
  return gantry::read_file(path, max_bytes, what);
}

int available_cores() { return gantry::available_cores(); }

}  // namespace gantry::engine
