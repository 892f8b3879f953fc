#include "io/progress.hpp"
#include "config/config.hpp"

#include <unistd.h>

#include <atomic>
#include <cmath>

namespace gantry {

namespace {
std::atomic<bool> g_line_open{false};
}  // namespace

bool progress_line_open() { return g_line_open.load(); }

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const auto s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", long(s / 3600), long(s / 60 % 60), long(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%02ld:%02ld", long(s / 60), long(s % 60));
  return buf;
}

Progress::Mode Progress::parse_mode(ProgressMode mode, std::FILE* out) {
  if (mode == ProgressMode::kBar) return Mode::kBar;
  if (mode == ProgressMode::kLines) return Mode::kLines;
  if (mode == ProgressMode::kNone) return Mode::kNone;
  return ::isatty(::fileno(out)) ? Mode::kBar : Mode::kLines;
}

Progress::Progress(Mode mode, int64_t total_steps, int64_t batches_per_epoch, int64_t batch_size, std::FILE* out)
    : mode_(mode),
      total_(total_steps),
      per_epoch_(batches_per_epoch),
      batch_size_(batch_size),
      out_(out),
      start_(Clock::now()),
      last_draw_(start_),
      window_start_(start_) {}

void Progress::update(int64_t step, int64_t epoch, int64_t batch_in_epoch,
                      const std::vector<std::pair<std::string, double>>& values) {
  if (first_step_ < 0) first_step_ = window_step_ = step - 1;  // a resumed run starts mid-way
  step_ = step;
  epoch_ = epoch;
  batch_ = batch_in_epoch;
  values_ = values;
  if (mode_ == Mode::kNone) return;
  const auto now = Clock::now();
  const double since_draw = std::chrono::duration<double>(now - last_draw_).count();
  if (since_draw < (mode_ == Mode::kBar ? 0.1 : 10.0)) return;
  const double window = std::chrono::duration<double>(now - window_start_).count();
  if (window > 0 && step > window_step_) {
    const double r = double(step - window_step_) * double(batch_size_) / window;
    rate_ = rate_ > 0 ? 0.7 * rate_ + 0.3 * r : r;
  }
  window_start_ = now;
  window_step_ = step;
  last_draw_ = now;
  draw(false);
}

void Progress::message(const std::string& text) {
  if (mode_ == Mode::kBar && drawn_) std::fputs("\r\033[K", out_);
  std::fputs((text + "\n").c_str(), out_);
  if (mode_ == Mode::kBar && drawn_) draw(false);
  std::fflush(out_);
}

void Progress::draw(bool final) {
  char buf[128];
  std::string line;
  const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  if (final && elapsed > 0 && first_step_ >= 0) rate_ = double(step_ - first_step_) * double(batch_size_) / elapsed;
  std::snprintf(buf, sizeof buf, "epoch %ld (%ld/%ld)  step %ld", long(epoch_), long(batch_), long(per_epoch_),
                long(step_));
  line += buf;
  if (total_ > 0) {
    std::snprintf(buf, sizeof buf, "/%ld", long(total_));
    line += buf;
  }
  if (mode_ == Mode::kBar && total_ > 0) {
    const int width = 20;
    const int fill = static_cast<int>(width * std::min(1.0, double(step_) / double(total_)));
    line += " [" + std::string(fill, '#') + std::string(width - fill, '.') + "]";
  }
  for (const auto& [name, v] : values_) {
    std::snprintf(buf, sizeof buf, "  %s %.4g", name.c_str(), v);
    line += buf;
  }
  std::snprintf(buf, sizeof buf, "  %.0f samples/s", rate_);
  line += buf;
  if (total_ > 0 && rate_ > 0 && !final)
    line += "  ETA " + format_duration(double(total_ - step_) * batch_size_ / rate_);
  line += "  " + format_duration(elapsed);
  if (mode_ == Mode::kBar) {
    std::fputs(("\r\033[K" + line).c_str(), out_);
    drawn_ = true;
    g_line_open = true;
  } else {
    std::fputs((line + "\n").c_str(), out_);
  }
  std::fflush(out_);
}

void Progress::finish() {
  if (mode_ == Mode::kNone) return;
  draw(true);
  if (mode_ == Mode::kBar) std::fputs("\n", out_);
  std::fflush(out_);
  drawn_ = false;
  g_line_open = false;
}

}  // namespace gantry
