#include "io/metrics_csv.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "gantry/errors.hpp"
#include "files/files.hpp"

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

const char* const kFixed[] = {"step", "epoch", "wall_time", "kind"};

std::string header_of(const std::vector<std::string>& columns) {
  std::string h = "step,epoch,wall_time,kind";
  for (const auto& c : columns) h += "," + c;
  return h + "\n";
}

}  // namespace

MetricsCsv::MetricsCsv(std::string path, std::vector<std::string> columns, int64_t drop_after, bool partial_at_drop)
    : path_(std::move(path)), columns_(std::move(columns)) {
  std::string header;
  {
    std::ifstream in(path_);
    if (in) std::getline(in, header);
  }
  if (!header.empty()) {
    const auto cells = split_csv_line(header);
    const size_t first = cells.size() >= 4 && cells[3] == "kind" ? 4 : 3;  // 3: before `kind`
    columns_.assign(cells.begin() + std::min(first, cells.size()), cells.end());
  }
  reopen();
  if (header.empty()) {
    std::fputs(header_of(columns_).c_str(), file_);
    std::fflush(file_);
  } else {
    drop_train_at_ = partial_at_drop ? drop_after : -1;
    rewrite(columns_, drop_after, nullptr);  // also learns each kind's last step
    drop_train_at_ = -1;
  }
}

MetricsCsv::~MetricsCsv() {
  if (file_) std::fclose(file_);
}

void MetricsCsv::reopen() {
  if (file_) std::fclose(file_);
  file_ = std::fopen(path_.c_str(), "a");
  if (!file_) throw Error("cannot open " + path_ + ": " + std::strerror(errno));
}

std::string MetricsCsv::line_of(const Row& row) const {
  std::string line;
  auto cell = [&](const std::string& name) {
    const auto it = row.cells.find(name);
    return it == row.cells.end() ? std::string() : it->second;
  };
  for (const char* f : kFixed) line += cell(f) + ",";
  for (const auto& c : columns_) line += cell(c) + ",";
  line.back() = '\n';
  return line;
}

void MetricsCsv::rewrite(const std::vector<std::string>& columns, int64_t keep_up_to, const Row* merge) {
  std::fflush(file_);
  const std::string old = read_file(path_);
  std::istringstream in(old);
  std::string line;
  std::getline(in, line);
  const std::vector<std::string> names = split_csv_line(line);
  columns_ = columns;
  last_step_.clear();
  std::string out = header_of(columns_);
  bool merged = false;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    Row row;
    const auto cells = split_csv_line(line);
    for (size_t i = 0; i < cells.size() && i < names.size(); ++i)
      if (!cells[i].empty()) row.cells[names[i]] = cells[i];
    int64_t step = 0;
    try {
      step = std::stoll(row.cells.at("step"));
    } catch (const std::exception&) {
      continue;  // a torn last line from a crash
    }
    if (step > keep_up_to) {
      ++dropped_rows_;
      dropped_to_step_ = std::max(dropped_to_step_, step);
      continue;
    }
    const std::string kind = row.cells.count("kind") ? row.cells["kind"] : "";
    if (step == drop_train_at_ && kind == "train") continue;
    if (merge && !merged && std::to_string(step) == merge->cells.at("step") && kind == merge->cells.at("kind")) {
      for (const auto& [name, value] : merge->cells) row.cells[name] = value;
      merged = true;
    }
    last_step_[kind] = step;
    out += line_of(row);
  }
  if (merge && !merged) {  // its row was dropped (a torn line): the merge is the row
    out += line_of(*merge);
    last_step_[merge->cells.at("kind")] = std::stoll(merge->cells.at("step"));
  }
  std::fclose(file_);
  file_ = nullptr;
  write_file_atomic(path_, out);
  reopen();
}

void MetricsCsv::write(int64_t step, int64_t epoch, double wall_time, const std::string& kind,
                       const std::vector<std::pair<std::string, double>>& values) {
  std::vector<std::string> columns = columns_;
  for (const auto& [name, v] : values)
    if (std::find(columns.begin(), columns.end(), name) == columns.end()) columns.push_back(name);
  Row row;
  char buf[64];
  row.cells["step"] = std::to_string(step);
  row.cells["epoch"] = std::to_string(epoch);
  std::snprintf(buf, sizeof buf, "%.3f", wall_time);
  row.cells["wall_time"] = buf;
  row.cells["kind"] = kind;
  for (const auto& [name, v] : values) {
    std::snprintf(buf, sizeof buf, "%.9g", v);
    row.cells[name] = buf;
  }
  const auto last = last_step_.find(kind);
  if (last != last_step_.end() && last->second == step) {  // the step's row of this kind: merged into it
    rewrite(columns, std::numeric_limits<int64_t>::max(), &row);
    return;
  }
  if (columns.size() != columns_.size()) rewrite(columns, std::numeric_limits<int64_t>::max(), nullptr);
  std::fputs(line_of(row).c_str(), file_);
  std::fflush(file_);  // one write per row: followers (tail -f, a monitor) see each as it lands
  last_step_[kind] = step;
}

void MetricsCsv::flush() {
  if (file_) std::fflush(file_);
}

}  // namespace gantry
