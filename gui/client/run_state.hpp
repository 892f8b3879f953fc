// What a client knows about a run: everything the stream said, applied in
// seq order with duplicates dropped (a reconnect may overlap). Both GUIs draw
// from a RunState; it is not thread-safe (the GUI thread owns it).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "series.hpp"
#include "wire/message.hpp"

namespace gantry::client {

enum class RunStatus { kWaiting, kRunning, kFinished, kStopped, kRequeued, kFailed, kPaused, kLost };
const char* to_string(RunStatus s);
/// Nothing more will come unless someone resumes it: finished, failed,
/// stopped, paused (trainer.pause_at_step: a search's trial at a rung), or
/// lost (its writer is gone without an end record: killed, host down). A
/// requeued run comes back by itself.
bool has_ended(RunStatus s);

/// "1 h 02 min", "3 min 05 s", "12 s"; "-" when negative (unknown).
std::string duration_text(double seconds);

class RunState {
 public:
  /// Applies one message. Returns false when it was already applied (its seq
  /// is not after the last one) and was ignored. Seq 0 (per-connection:
  /// Welcome, `dropped`) is always applied.
  bool apply(const wire::Message& m);

  /// The last run seq applied (0: none): what a reconnect asks to resume after.
  uint64_t last_seq() const { return last_seq_; }
  /// Messages whose seq skipped ahead (should stay 0: the server never leaves a gap).
  uint64_t gaps() const { return gaps_; }
  /// Duplicates ignored.
  uint64_t duplicates() const { return duplicates_; }
  /// Changes with every applied message: a view redraws when it moved.
  uint64_t version() const { return version_; }

  const std::optional<wire::RunInfo>& info() const { return info_; }
  const std::map<std::string, Series>& series() const { return series_; }
  const std::vector<wire::Image>& images() const { return images_; }
  const std::map<uint32_t, wire::RankStatus>& ranks() const { return ranks_; }
  const std::vector<wire::Event>& events() const { return events_; }
  /// What the messages say, unless the run was judged lost since
  /// (client::check_lost, from facts outside the stream): then kLost.
  RunStatus status() const { return lost_.empty() ? status_ : RunStatus::kLost; }
  /// A run that was running is lost: `why` ("no end record, the writer's
  /// process (gantry pid 41 on node3) is gone"). A run that ended is never
  /// lost. A later message (a resumed or reconnected writer) clears it.
  void mark_lost(std::string why);
  void clear_lost();
  /// "lost at step 1200: no end record, ..." while lost, else "".
  std::string lost_text() const;
  /// The last check_lost time (Unix s): it reads the run directory at most once a second.
  double& lost_checked_at() { return lost_checked_at_; }
  /// The newest step and wall time seen in any message.
  int64_t latest_step() const { return latest_step_; }
  double latest_wall_time() const { return latest_wall_; }
  /// Images a slow connection skipped (the server coalesced them).
  uint64_t dropped_images() const { return dropped_images_; }
  /// Events that deserve a banner (nan, failed), newest last.
  const std::vector<wire::Event>& alerts() const { return alerts_; }
  /// The alert to show now: the newest one, unless the run was resumed after
  /// it (a failed run resumed and finished is finished). nullptr: none.
  const wire::Event* current_alert() const { return alerts_.size() > alerts_cleared_ ? &alerts_.back() : nullptr; }

  /// Seconds per step over the recent scalars, and the estimated seconds
  /// left (-1 when unknown: no total_steps, or too few points).
  double seconds_per_step() const;
  double eta_seconds() const;

  /// Seconds of silence after which a rank of a running run counts as
  /// stopped: 3 report intervals, at least 10 s.
  double stale_after() const;
  /// Whether rank `r` has been silent too long at `now` (Unix s); never for a run that ended.
  bool is_stale(const wire::RankStatus& r, double now) const;

 private:
  void on(const wire::RunInfo& m);
  void on(const wire::Scalars& m);
  void on(const wire::Image& m);
  void on(const wire::RankStatus& m);
  void on(const wire::Event& m);
  void on(const wire::Hello&) {}
  void on(const wire::Welcome&) {}
  void seen(int64_t step, double wall);

  uint64_t last_seq_ = 0, gaps_ = 0, duplicates_ = 0, version_ = 0, dropped_images_ = 0;
  std::optional<wire::RunInfo> info_;
  std::map<std::string, Series> series_;
  std::vector<wire::Image> images_;
  std::map<uint32_t, wire::RankStatus> ranks_;
  std::vector<wire::Event> events_, alerts_;
  size_t alerts_cleared_ = 0;  // alerts before a later `resumed`
  RunStatus status_ = RunStatus::kWaiting;
  std::string lost_;  // why the run is lost; empty: not lost
  double lost_checked_at_ = 0;
  int64_t latest_step_ = 0;
  double latest_wall_ = 0;
  // (step, wall time) of recent scalar rows, for the rate and the ETA
  std::vector<std::pair<int64_t, double>> rows_;
};

}  // namespace gantry::client
