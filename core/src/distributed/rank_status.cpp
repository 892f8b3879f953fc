#include "distributed/rank_status.hpp"

#include "distributed/dist_env.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "distributed/distributed.hpp"
#include "distributed/gpu_probe.hpp"
#include "distributed/shm_allreduce.hpp"
#include "files/files.hpp"
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

double cpu_seconds() {  // this process's, user + system, every thread
  rusage u{};
  if (::getrusage(RUSAGE_SELF, &u) != 0) return -1;
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// Below this many ms of busy time per step above the others' median, no rank
// is a straggler whatever the ratio: sub-millisecond steps on a shared
// machine differ by more than 2x from scheduling alone.
constexpr double kMinExcessMs = 1.0;

// A node's link is slow when the shortest round trip to rank 0's store of
// any of its ranks is at least kMinLinkRatio (or the straggler factor, if
// larger) x the other nodes' ranks' median and kMinLinkExcessMs above it. A
// link slows every rank of its node; the scheduler delays one rank's
// heartbeat thread at a time: at 128 ranks on 2 cores here single ranks'
// round trips reached 25-54 ms against a median of 3-19 ms, and no node's
// every rank at once beyond 2.7x.
constexpr double kMinLinkExcessMs = 20.0;
constexpr double kMinLinkRatio = 4.0;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + long(mid), v.end());
  if (v.size() % 2) return v[mid];
  const double upper = v[mid];
  return (upper + *std::max_element(v.begin(), v.begin() + long(mid))) / 2;
}

// Where most of a rank's busy time went, as the event says it.
std::string busiest_part(const wire::RankStatus& s) {
  const double busy = s.busy_ms();
  if (busy <= 0) return "";
  const std::pair<double, const char*> parts[] = {
      {s.data_ms, "waiting for data"},
      {s.compute_ms, "in compute (forward and backward)"},
      {s.optimizer_ms, "in the optimizer step"},
      {s.other_ms, "in callbacks (rows, grids, checkpoints)"},
  };
  const auto* top = std::max_element(std::begin(parts), std::end(parts),
                                     [](const auto& a, const auto& b) { return a.first < b.first; });
  char text[96];
  std::snprintf(text, sizeof text, "%.0f%% %s", 100 * std::clamp(top->first / busy, 0.0, 1.0), top->second);
  return text;
}

std::string rank_list(const std::vector<uint32_t>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(ranks[i]);
    if (j > i) out += (j == i + 1 ? "," : "-") + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

// Each node's link: the shortest round trip of its ranks (nodes without one
// measured are absent), against the other nodes' ranks' median (in a
// synchronous job every rank waits as long for a slow link: the busy times
// cannot say whose), and whether it is slow.
struct NodeLinks {
  std::map<std::string, double> shortest, median;
  std::map<std::string, bool> slow;
};
NodeLinks node_links(const std::vector<wire::RankStatus>& all, double factor) {
  NodeLinks out;
  for (const auto& s : all)
    if (s.link_ms >= 0) {
      auto [it, fresh] = out.shortest.emplace(s.host, s.link_ms);
      if (!fresh) it->second = std::min(it->second, s.link_ms);
    }
  for (const auto& [host, link] : out.shortest) {
    std::vector<double> others;
    for (const auto& s : all)
      if (s.host != host && s.link_ms >= 0) others.push_back(s.link_ms);
    const double m = median(others);
    out.median[host] = m;
    out.slow[host] = !others.empty() && link > std::max(kMinLinkRatio, factor) * m && link - m > kMinLinkExcessMs;
  }
  return out;
}

}  // namespace

std::vector<std::string> StragglerWatch::update(std::vector<wire::RankStatus>& all, int64_t step) {
  std::vector<std::string> lines;
  std::vector<double> busy;
  for (const auto& s : all) busy.push_back(s.busy_ms());
  struct Flag {
    uint32_t rank;
    double ratio;
    std::string host, part;
    bool link = false;  // flagged for its link alone
  };
  const NodeLinks links = node_links(all, factor_);
  const auto& node_link = links.shortest;
  const auto& link_medians = links.median;
  std::map<std::string, bool> slow_links = links.slow;
  std::vector<Flag> became;
  for (size_t i = 0; i < all.size(); ++i) {
    auto& s = all[i];
    Seen& seen = seen_[s.rank];
    seen.host = s.host;
    const bool slow_link = slow_links[s.host];
    if (busy[i] < 0 && !slow_link) continue;  // not measured (a writer without the parts)
    std::vector<double> others;
    for (size_t j = 0; j < all.size(); ++j)
      if (j != i && busy[j] >= 0) others.push_back(busy[j]);
    if (others.empty() && !slow_link) continue;
    const double m = median(others);
    const double ratio = m > 0 && busy[i] >= 0 ? busy[i] / m : 0;
    // Or the rank the others wait for at the shared-memory exchanges: last
    // there far more often than its share (1/N), whatever its busy time says
    // (a rank frozen inside a collective counts its frozen time as comm).
    const size_t n = all.size();
    // (Last at either of an exchange's two barriers: by chance about 2/N.)
    const bool last = n >= 4 && s.last_pct > std::max(60.0, 300.0 / double(n));
    const bool slow = (ratio > factor_ && busy[i] - m > kMinExcessMs) || last || slow_link;
    seen.run = slow ? seen.run + 1 : 0;
    if (seen.flagged && !slow) {
      seen.flagged = false;
      seen.until = step;
      char text[160];
      std::snprintf(text, sizeof text, "rank %u (%s) is no longer slower than the median (%.1fx)", s.rank,
                    s.host.c_str(), ratio);
      lines.push_back(text);
    } else if (!seen.flagged && seen.run >= intervals_) {
      seen.flagged = true;
      seen.until = -1;
      if (seen.since < 0) seen.since = step;
      seen.part = ratio > factor_ ? busiest_part(s) : "";
      if (last) {
        char text[96];
        std::snprintf(text, sizeof text, "last at %.0f%% of the gradient exchanges", s.last_pct);
        seen.part += (seen.part.empty() ? "" : ", ") + std::string(text);
      }
      const bool link_only = slow_link && seen.part.empty();
      if (slow_link) {
        char text[128];
        std::snprintf(text, sizeof text,
                      "a round trip to rank 0 takes %.0f ms or more (the other nodes' median %.1f ms)",
                      node_link.at(s.host), link_medians.at(s.host));
        seen.part += (seen.part.empty() ? "" : ", ") + std::string(text);
      }
      became.push_back({s.rank, ratio, s.host, seen.part, link_only});
    }
    if (seen.flagged) seen.worst = std::max(seen.worst, ratio);
    s.straggler = seen.flagged;
  }
  // Every rank of one host at once (and not every rank of the job): the host.
  std::map<std::string, std::vector<const Flag*>> by_host;
  std::map<std::string, size_t> host_ranks;
  for (const auto& s : all) ++host_ranks[s.host];
  for (const auto& f : became) by_host[f.host].push_back(&f);
  for (const auto& [host, flags] : by_host) {
    std::vector<uint32_t> ranks;
    double worst = 0;
    for (const Flag* f : flags) {
      ranks.push_back(f->rank);
      worst = std::max(worst, f->ratio);
    }
    std::sort(ranks.begin(), ranks.end());
    char text[320];
    if (flags.size() > 1 && flags.size() == host_ranks[host] && host_ranks.size() > 1) {
      if (flags.front()->link)
        std::snprintf(text, sizeof text, "%s (ranks %s) has a slow link: %s", host.c_str(), rank_list(ranks).c_str(),
                      flags.front()->part.c_str());
      else if (worst > factor_)
        std::snprintf(text, sizeof text, "%s (ranks %s) is %.1fx slower than the median: %s", host.c_str(),
                      rank_list(ranks).c_str(), worst, flags.front()->part.c_str());
      else
        std::snprintf(text, sizeof text, "%s (ranks %s) holds the others back: %s (busy %.1fx the median)",
                      host.c_str(), rank_list(ranks).c_str(), flags.front()->part.c_str(), worst);
      lines.push_back(text);
      continue;
    }
    for (const Flag* f : flags) {
      if (f->link)
        std::snprintf(text, sizeof text, "rank %u (%s) has a slow link: %s", f->rank, host.c_str(), f->part.c_str());
      else if (f->ratio > factor_)
        std::snprintf(text, sizeof text, "rank %u (%s) is %.1fx slower than the median: %s", f->rank, host.c_str(),
                      f->ratio, f->part.c_str());
      else
        std::snprintf(text, sizeof text, "rank %u (%s) holds the others back: %s (busy %.1fx the median)", f->rank,
                      host.c_str(), f->part.c_str(), f->ratio);
      lines.push_back(text);
    }
  }
  return lines;
}

void StragglerWatch::mark(std::vector<wire::RankStatus>& all) const {
  for (auto& s : all) {
    const auto it = seen_.find(s.rank);
    s.straggler = it != seen_.end() && it->second.flagged;
  }
}

std::string StragglerWatch::summary() const {
  std::string out;
  for (const auto& [rank, s] : seen_) {
    if (s.since < 0) continue;
    char text[256];
    std::snprintf(text, sizeof text, "%srank %u (%s) from step %ld%s%s, up to %.1fx the median (%s)",
                  out.empty() ? "" : "; ", rank, s.host.c_str(), long(s.since),
                  s.until < 0 ? " to the end" : " to step ", s.until < 0 ? "" : std::to_string(s.until).c_str(),
                  s.worst, s.part.c_str());
    out += text;
  }
  return out.empty() ? "none" : out;
}

RankStatusReporter::RankStatusReporter(int rank, ProcessGroup* pg, RunStream* stream, std::string run_dir,
                                       GpuProbe* gpu, double straggler_factor, int64_t straggler_intervals)
    : rank_(rank), pg_(pg), stream_(stream), run_dir_(std::move(run_dir)), gpu_(gpu) {
  own_.rank = static_cast<uint32_t>(rank);
  own_.host = node_name();
  last_cpu_ = cpu_seconds();
  if (rank == 0 && pg && straggler_factor > 0)
    watch_ = std::make_unique<StragglerWatch>(straggler_factor, straggler_intervals);
}

RankStatusReporter::~RankStatusReporter() = default;

void RankStatusReporter::report(int64_t step, int64_t batch_size, const StepParts* parts, bool write) {
  const auto now = std::chrono::steady_clock::now();
  const double dt = std::chrono::duration<double>(now - last_time_).count();
  const double cpu = cpu_seconds();
  // No step since the last report (the final one follows the last row's):
  // keep what was measured then rather than report 0.
  if (last_step_ >= 0 && dt > 0 && step > last_step_) {
    const double steps = double(step - last_step_);
    rate_ = steps * double(batch_size) / dt;
    if (cpu >= 0 && last_cpu_ >= 0) own_.cpu_pct = 100 * (cpu - last_cpu_) / dt;
    if (parts) {
      const StepParts& a = last_parts_;
      const StepParts& b = *parts;
      auto ms = [&](double seconds) { return std::max(0.0, 1000 * seconds / steps); };
      own_.step_ms = ms(dt);
      own_.data_ms = ms((b.data - a.data) + (b.next_batch - a.next_batch));
      own_.comm_ms = ms((b.all_reduce - a.all_reduce) + (b.sync - a.sync) + gather_wait_);
      own_.optimizer_ms = ms(b.optimizer - a.optimizer);
      own_.compute_ms = ms((b.training_step - a.training_step) - (b.next_batch - a.next_batch) -
                           (b.all_reduce - a.all_reduce) - (b.optimizer - a.optimizer));
      own_.other_ms = std::max(0.0, own_.step_ms - own_.data_ms - own_.comm_ms - own_.optimizer_ms - own_.compute_ms);
    }
  }
  const uint64_t entered = ShmAllreduce::exchanges(), reached_last = ShmAllreduce::exchanges_reached_last();
  if (last_step_ >= 0 && entered > last_entered_)
    own_.last_pct = 100.0 * double(reached_last - last_reached_last_) / double(entered - last_entered_);
  last_entered_ = entered;
  last_reached_last_ = reached_last;
  if (parts) last_parts_ = *parts;
  last_cpu_ = cpu;
  last_step_ = step;
  own_.step = step;
  own_.samples_per_s = rate_;
  own_.rss_mib = resident_mib();
  if (gpu_) {
    const GpuProbe::Reading g = gpu_->read();
    own_.gpu_util_pct = g.util_pct;
    own_.gpu_mem_mib = g.mem_mib;
    own_.gpu_power_w = g.power_w;
  }
  own_.wall_time = unix_time();
  if (pg_) {
    const std::vector<double> trips = pg_->store_round_trips_ms();
    own_.link_ms = trips.empty() ? -1 : median(trips);
  }
  if (pg_) pg_->report_counts("step " + std::to_string(step));
  if (pg_) {
    // A collective: every rank reports here; its wait for the others is comm
    // of the next interval (the interval below starts after it).
    gathered_ = pg_->gather_status(wire::encode({0, own_}));
    gather_wait_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - now).count();
  }
  last_time_ = now;
  if (write) this->write();
}

std::string RankStatusReporter::straggler_summary() const { return watch_ ? watch_->summary() : ""; }

void RankStatusReporter::write() {
  if (rank_ != 0) return;
  std::vector<wire::RankStatus> all;
  if (!pg_) {
    all.push_back(own_);
  } else {
    for (const auto& frame : gathered_) {
      if (frame.empty()) continue;  // that rank has not reported yet
      try {
        const wire::Message m = wire::decode(frame);
        if (const auto* s = std::get_if<wire::RankStatus>(&m.payload)) all.push_back(*s);
      } catch (const wire::WireError&) {
        // Not ours to fail a run over: that rank's row is missing until it reports again.
      }
    }
  }
  // The watch sees each step's statuses once (the end writes the last ones again).
  if (watch_ && own_.step != written_step_) {
    for (const std::string& line : watch_->update(all, own_.step)) {
      std::printf("straggler: %s\n", line.c_str());
      std::fflush(stdout);
      if (stream_) stream_->event("straggler", own_.step, unix_time(), line);
    }
  } else if (watch_) {
    watch_->mark(all);  // as the watch last said
  }
  written_step_ = own_.step;
  std::string csv =
      "rank,host,step,samples_per_s,rss_mib,wall_time,step_ms,data_ms,compute_ms,comm_ms,optimizer_ms,other_ms,"
      "busy_ms,cpu_pct,gpu_util_pct,gpu_mem_mib,gpu_power_w,straggler,last_pct,link_ms\n";
  std::vector<double> busy;
  for (const auto& s : all) {
    char row[768];
    std::snprintf(row, sizeof row,
                  "%u,%s,%ld,%.1f,%.1f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.1f,%.0f,%.0f,%.1f,%d,%.1f,%.3f\n",
                  s.rank, s.host.c_str(), long(s.step), s.samples_per_s, s.rss_mib, s.wall_time, s.step_ms, s.data_ms,
                  s.compute_ms, s.comm_ms, s.optimizer_ms, s.other_ms, s.busy_ms(), s.cpu_pct, s.gpu_util_pct,
                  s.gpu_mem_mib, s.gpu_power_w, s.straggler ? 1 : 0, s.last_pct, s.link_ms);
    csv += row;
    if (stream_) stream_->rank_status(s);
    if (s.busy_ms() >= 0) busy.push_back(s.busy_ms());
  }
  write_file_atomic((std::filesystem::path(run_dir_) / "ranks.csv").string(), csv);
  // TensorBoard: the spread over ranks (not in the stream's scalars: the
  // monitor has the statuses themselves), and each rank's busy time.
  if (stream_ && !busy.empty() && all.size() > 1) {
    TfEventsWriter& tb = stream_->tensorboard();
    const double wall = unix_time();
    tb.scalar("ranks/busy_ms_median", median(busy), own_.step, wall);
    tb.scalar("ranks/busy_ms_max", *std::max_element(busy.begin(), busy.end()), own_.step, wall);
    const int width = int(std::to_string(all.size() - 1).size());
    for (const auto& s : all) {
      if (s.busy_ms() < 0) continue;
      char tag[64];
      std::snprintf(tag, sizeof tag, "ranks/busy_ms/rank_%0*u", width, s.rank);
      tb.scalar(tag, s.busy_ms(), own_.step, wall);
    }
  }
}

}  // namespace gantry
