#include "checkpoint/names.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>

namespace fs = std::filesystem;

namespace gantry::ckpt {

namespace {

std::string named(const char* prefix, int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "%sstep_%07ld.ckpt", prefix, long(step));
  return name;
}

// The digits of `name` after `prefix` up to ".ckpt", or -1.
int64_t step_after(const std::string& name, const std::string& prefix) {
  const std::string ext = ".ckpt";
  if (name.size() <= prefix.size() + ext.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - ext.size(), ext.size(), ext) != 0)
    return -1;
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - ext.size());
  if (digits.empty() || digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stoll(digits);
}

}  // namespace

std::string step_file(int64_t step) { return named("", step); }
std::string best_file(int64_t step) { return named("best_", step); }

FileName parse_file(const std::string& name) {
  if (const int64_t s = step_after(name, "step_"); s >= 0) return {FileKind::kStep, s};
  if (const int64_t s = step_after(name, "best_step_"); s >= 0) return {FileKind::kBest, s};
  return {};
}

std::vector<Found> list_files(const std::string& checkpoints_dir) {
  std::vector<Found> all;
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(checkpoints_dir, ec)) {
    if (f.is_symlink(ec)) continue;  // best.ckpt: the file it names is listed itself
    const FileName name = parse_file(f.path().filename().string());
    if (name.kind == FileKind::kOther) continue;
    const auto t = fs::last_write_time(f.path(), ec);
    all.push_back({f.path().string(), name, int64_t(t.time_since_epoch().count())});
  }
  std::sort(all.begin(), all.end(), [](const Found& a, const Found& b) {
    return a.name.step != b.name.step ? a.name.step > b.name.step : a.mtime_ns > b.mtime_ns;
  });
  return all;
}

void prune_steps(const std::string& checkpoints_dir, int64_t keep_last) {
  if (keep_last <= 0) return;
  int64_t kept = 0;
  std::error_code ec;
  for (const Found& f : list_files(checkpoints_dir))
    if (f.name.kind == FileKind::kStep && ++kept > keep_last) fs::remove(f.path, ec);
}

std::string link_best(const std::string& checkpoints_dir, int64_t step) {
  const fs::path dir(checkpoints_dir);
  const fs::path tmp = dir / ".best.ckpt.tmp";
  std::error_code ec;
  fs::remove(tmp, ec);
  fs::create_symlink(best_file(step), tmp, ec);
  if (!ec) fs::rename(tmp, dir / kBestLink, ec);
  return ec ? ec.message() : "";
}

}  // namespace gantry::ckpt
