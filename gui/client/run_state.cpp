#include "run_state.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace gantry::client {

const char* to_string(RunStatus s) {
  switch (s) {
    case RunStatus::kWaiting:
      return "waiting";
    case RunStatus::kRunning:
      return "running";
    case RunStatus::kFinished:
      return "finished";
    case RunStatus::kStopped:
      return "stopped";
    case RunStatus::kRequeued:
      return "requeued";
    case RunStatus::kFailed:
      return "failed";
    case RunStatus::kPaused:
      return "paused";
    case RunStatus::kLost:
      return "lost";
  }
  return "?";
}

bool has_ended(RunStatus s) {
  return s == RunStatus::kFinished || s == RunStatus::kFailed || s == RunStatus::kStopped || s == RunStatus::kPaused ||
         s == RunStatus::kLost;
}

std::string duration_text(double s) {
  if (s < 0) return "-";
  const long long t = std::llround(s);
  char buf[48];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lld h %02lld min", t / 3600, (t % 3600) / 60);
  else if (t >= 60)
    std::snprintf(buf, sizeof buf, "%lld min %02lld s", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%lld s", t);
  return buf;
}

bool RunState::apply(const wire::Message& m) {
  if (m.seq != 0) {
    if (m.seq <= last_seq_) {
      ++duplicates_;
      return false;
    }
    if (m.seq != last_seq_ + 1) ++gaps_;
    last_seq_ = m.seq;
  }
  if (m.seq != 0 || std::holds_alternative<wire::Welcome>(m.payload)) lost_.clear();  // the writer is back
  std::visit([this](const auto& p) { on(p); }, m.payload);
  ++version_;
  return true;
}

void RunState::seen(int64_t step, double wall) {
  latest_step_ = std::max(latest_step_, step);
  latest_wall_ = std::max(latest_wall_, wall);
}

void RunState::on(const wire::RunInfo& m) {
  info_ = m;
  status_ = RunStatus::kRunning;
  latest_wall_ = std::max(latest_wall_, m.start_time);
}

void RunState::on(const wire::Scalars& m) {
  for (const auto& p : m.points) {
    series_[p.name].append(p.step, p.wall_time, p.value);
    seen(p.step, p.wall_time);
  }
  if (!m.points.empty()) {
    rows_.emplace_back(m.points.front().step, m.points.front().wall_time);
    if (rows_.size() > 64) rows_.erase(rows_.begin(), rows_.begin() + 32);
  }
}

void RunState::on(const wire::Image& m) {
  images_.push_back(m);
  seen(m.step, m.wall_time);
}

void RunState::on(const wire::RankStatus& m) {
  ranks_[m.rank] = m;
  seen(m.step, m.wall_time);
}

void RunState::on(const wire::Event& m) {
  if (m.kind == "dropped") {  // per connection: the server skipped images for this client
    dropped_images_ += std::strtoull(m.text.c_str(), nullptr, 10);
    return;
  }
  events_.push_back(m);
  seen(m.step, m.wall_time);
  if (m.kind == "resumed") {  // points after the checkpoint came from the run before the restart
    for (auto& [name, s] : series_) s.drop_after(m.step);
    images_.erase(std::remove_if(images_.begin(), images_.end(), [&](const auto& i) { return i.step > m.step; }),
                  images_.end());
    rows_.clear();
    latest_step_ = m.step;
    status_ = RunStatus::kRunning;
    alerts_cleared_ = alerts_.size();
  } else if (m.kind == "nan" || m.kind == "failed") {
    alerts_.push_back(m);
  }
  if (m.kind == "finished") status_ = RunStatus::kFinished;
  if (m.kind == "stopped") status_ = RunStatus::kStopped;
  if (m.kind == "requeued") status_ = RunStatus::kRequeued;
  if (m.kind == "paused") status_ = RunStatus::kPaused;
  if (m.kind == "failed") status_ = RunStatus::kFailed;
}

void RunState::mark_lost(std::string why) {
  if (status_ != RunStatus::kRunning || why.empty()) return;
  if (lost_ != why) ++version_;
  lost_ = std::move(why);
}

void RunState::clear_lost() {
  if (lost_.empty()) return;
  lost_.clear();
  ++version_;
}

std::string RunState::lost_text() const {
  return lost_.empty() ? "" : "lost at step " + std::to_string(latest_step_) + ": " + lost_;
}

double RunState::seconds_per_step() const {
  if (rows_.size() < 2) return -1;
  const auto& a = rows_.size() > 16 ? rows_[rows_.size() - 16] : rows_.front();
  const auto& b = rows_.back();
  if (b.first <= a.first) return -1;
  return (b.second - a.second) / static_cast<double>(b.first - a.first);
}

double RunState::stale_after() const {
  double interval = 0;
  if (rows_.size() >= 2) interval = rows_.back().second - rows_[rows_.size() - 2].second;
  return std::max(10.0, 3 * interval);
}

bool RunState::is_stale(const wire::RankStatus& r, double now) const {
  return status_ == RunStatus::kRunning && now - r.wall_time > stale_after();
}

double RunState::eta_seconds() const {
  if (!info_ || info_->total_steps <= 0 || status_ != RunStatus::kRunning) return -1;
  const double sps = seconds_per_step();
  if (sps < 0) return -1;
  return std::max<int64_t>(0, info_->total_steps - latest_step_) * sps;
}

}  // namespace gantry::client
