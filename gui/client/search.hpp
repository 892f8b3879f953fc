// A `gantry search` as both GUIs show it (docs/search.md): its trials are
// ordinary runs under <search>/trial_NNNN/, its decisions are in
// <search>/journal. The runs table shows each trial's status as the search
// sees it (running, promoted, paused, stopped, done, failed, interrupted),
// its rung and its score there; trials the search starts while the window
// is open are added to the runs. The journal is read with the search's own
// code (runner/search/state.hpp: no LibTorch), as `gantry search --summary` reads it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "search/state.hpp"
#include "source.hpp"

namespace gantry::client {

/// One search's journal, re-read when it changes.
class SearchJournal {
 public:
  explicit SearchJournal(std::string search_dir);
  const std::string& dir() const { return dir_; }
  /// Re-reads the journal when its size or time changed; true when it did.
  bool refresh();
  const search::SearchState& state() const { return state_; }
  /// A record it could not read ("" when none): what is shown is the state up to it.
  const std::string& error() const { return error_; }
  /// "asha", "tpe", "pbt", "random" ("" before the first record).
  std::string method() const;
  /// The metric the search ranks by.
  std::string metric() const;
  /// The rung steps (PBT: its intervals' ends), ascending.
  const std::vector<int64_t>& rungs() const { return rungs_; }

 private:
  std::string dir_;
  search::SearchState state_;
  std::vector<int64_t> rungs_;
  std::string error_;
  uint64_t size_ = ~uint64_t(0);
  int64_t mtime_ns_ = -1;
};

/// What the runs table shows of one trial.
struct TrialRow {
  std::string status;  ///< search::shown_status
  std::string rung;    ///< "2 of 3" (the rungs its scores reached), "-" before the first
  std::string score;   ///< its metric at its last rung ("%.4g"), "-" before the first, "nan"
  std::string note;    ///< why it ended, whom it copied (PBT)
};
TrialRow trial_row(const SearchJournal& journal, int trial);

/// Where a run directory sits in a search: <search>/trial_NNNN/<run>, with
/// <search>/journal. nullopt for any other run.
struct TrialOf {
  std::string search_dir;
  int trial = -1;
};
std::optional<TrialOf> trial_of(const std::string& run_dir);

/// The searches among the runs a window watches.
class SearchFollower {
 public:
  /// The runs watched, in the window's order: each one's directory ("" for
  /// a live run) and name.
  void watch(const std::vector<std::string>& dirs, const std::vector<std::string>& names);
  /// Re-reads the journals (at most once every `every_s` seconds of `now_s`)
  /// and returns the trials started since that are not watched yet, named
  /// as their watched siblings are; they count as watched from now on, after
  /// the others: the caller appends them to its runs in this order.
  std::vector<RunDir> poll(double now_s, double every_s = 1.0);
  /// Whether some watched run is a search's trial.
  bool any() const { return !journals_.empty(); }
  /// Run i's row, nullopt when it is not a trial.
  std::optional<TrialRow> row(size_t run) const;
  /// The column title of the score: the first search's metric.
  std::string metric() const;

 private:
  struct Watched {
    int journal = -1;  ///< index into journals_, -1: not a trial
    int trial = -1;
    std::string name;
  };
  std::vector<Watched> runs_;
  std::vector<SearchJournal> journals_;
  std::vector<std::set<int>> known_;  ///< per journal: the trials watched
  double last_poll_ = -1e300;
};

}  // namespace gantry::client
