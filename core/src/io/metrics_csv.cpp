#include "io/metrics_csv.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "gantry/errors.hpp"
#include "io/files.hpp"

namespace gantry {

std::vector<std::string> split_csv_line(const std::string& line, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string cell;
  while (std::getline(ss, cell, sep)) out.push_back(cell);
  if (!line.empty() && line.back() == sep) out.emplace_back();
  return out;
}

namespace {

std::string header_of(const std::vector<std::string>& columns) {
  std::string h = "step,epoch,wall_time";
  for (const auto& c : columns) h += "," + c;
  return h + "\n";
}

}  // namespace

MetricsCsv::MetricsCsv(std::string path) : path_(std::move(path)) {
  std::ifstream in(path_);
  std::string header;
  if (in && std::getline(in, header) && !header.empty()) {
    auto cells = split_csv_line(header);
    if (cells.size() >= 3) columns_.assign(cells.begin() + 3, cells.end());
  }
  file_ = std::fopen(path_.c_str(), "a");
  if (!file_) throw Error("cannot open " + path_ + ": " + std::strerror(errno));
  if (header.empty()) std::fputs(header_of(columns_).c_str(), file_);
}

MetricsCsv::~MetricsCsv() {
  if (file_) std::fclose(file_);
}

void MetricsCsv::rewrite_with_columns(const std::vector<std::string>& columns) {
  std::fflush(file_);
  const std::string old = read_file(path_);
  std::istringstream in(old);
  std::string line, out = header_of(columns);
  std::getline(in, line);  // old header
  const size_t pad = columns.size() - columns_.size();
  while (std::getline(in, line)) out += line + std::string(pad, ',') + "\n";
  std::fclose(file_);
  file_ = nullptr;
  write_file_atomic(path_, out);
  file_ = std::fopen(path_.c_str(), "a");
  if (!file_) throw Error("cannot open " + path_ + ": " + std::strerror(errno));
  columns_ = columns;
}

void MetricsCsv::write(int64_t step, int64_t epoch, double wall_time,
                       const std::vector<std::pair<std::string, double>>& values) {
  std::vector<std::string> columns = columns_;
  for (const auto& [name, v] : values)
    if (std::find(columns.begin(), columns.end(), name) == columns.end()) columns.push_back(name);
  if (columns.size() != columns_.size()) rewrite_with_columns(columns);
  std::string row = std::to_string(step) + "," + std::to_string(epoch);
  char buf[64];
  std::snprintf(buf, sizeof buf, ",%.3f", wall_time);
  row += buf;
  for (const auto& c : columns_) {
    row += ",";
    for (const auto& [name, v] : values)
      if (name == c) {
        std::snprintf(buf, sizeof buf, "%.9g", v);
        row += buf;
        break;
      }
  }
  row += "\n";
  std::fputs(row.c_str(), file_);
  std::fflush(file_);  // one write per row: followers (tail -f, a monitor) see each as it lands
}

void MetricsCsv::truncate_after(int64_t step) {
  std::fflush(file_);
  const std::string old = read_file(path_);
  std::istringstream in(old);
  std::string line, out;
  std::getline(in, line);
  out = line + "\n";
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      if (std::stoll(line.substr(0, line.find(','))) > step) continue;
    } catch (const std::exception&) {
      continue;  // a torn last line from a crash
    }
    out += line + "\n";
  }
  std::fclose(file_);
  file_ = nullptr;
  write_file_atomic(path_, out);
  file_ = std::fopen(path_.c_str(), "a");
  if (!file_) throw Error("cannot open " + path_ + ": " + std::strerror(errno));
}

void MetricsCsv::flush() {
  if (file_) std::fflush(file_);
}

}  // namespace gantry
