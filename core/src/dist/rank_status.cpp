#include "dist/rank_status.hpp"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "dist/distributed.hpp"
#include "io/files.hpp"
#include "io/run_stream.hpp"
#include "runtime/runtime.hpp"

namespace gantry {

namespace {

double resident_mib() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return double(resident) * double(::sysconf(_SC_PAGESIZE)) / (1 << 20);
}

}  // namespace

RankStatusReporter::RankStatusReporter(int rank, ProcessGroup* pg, RunStream* stream, std::string run_dir)
    : rank_(rank), pg_(pg), stream_(stream), run_dir_(std::move(run_dir)) {
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  own_.rank = static_cast<uint32_t>(rank);
  own_.host = host;
}

void RankStatusReporter::report(int64_t step, int64_t batch_size, bool write) {
  const auto now = std::chrono::steady_clock::now();
  const double dt = std::chrono::duration<double>(now - last_time_).count();
  // No step since the last report (the final one follows the last row's):
  // keep the rate measured then rather than report 0.
  if (last_step_ >= 0 && dt > 0 && step > last_step_) rate_ = double(step - last_step_) * double(batch_size) / dt;
  last_time_ = now;
  last_step_ = step;
  own_.step = step;
  own_.samples_per_s = rate_;
  own_.rss_mib = resident_mib();
  own_.wall_time = unix_time();
  if (pg_) pg_->report_counts("step " + std::to_string(step));
  if (pg_) pg_->publish_status(wire::encode({0, own_}));
  if (write) this->write();
}

void RankStatusReporter::write() {
  if (rank_ != 0) return;
  std::vector<wire::RankStatus> all;
  if (!pg_) {
    all.push_back(own_);
  } else {
    for (const auto& frame : pg_->collect_status()) {
      if (frame.empty()) continue;  // that rank has not reported yet
      try {
        const wire::Message m = wire::decode(frame);
        if (const auto* s = std::get_if<wire::RankStatus>(&m.payload)) all.push_back(*s);
      } catch (const wire::WireError&) {
        // Not ours to fail a run over: that rank's row is missing until it reports again.
      }
    }
  }
  std::string csv = "rank,host,step,samples_per_s,rss_mib,wall_time\n";
  for (const auto& s : all) {
    char row[512];
    std::snprintf(row, sizeof row, "%u,%s,%ld,%.1f,%.1f,%.3f\n", s.rank, s.host.c_str(), long(s.step), s.samples_per_s,
                  s.rss_mib, s.wall_time);
    csv += row;
    if (stream_) stream_->rank_status(s);
  }
  write_file_atomic((std::filesystem::path(run_dir_) / "ranks.csv").string(), csv);
}

}  // namespace gantry
