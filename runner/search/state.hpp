// A search's state: what its journal says (docs/search.md).
//
// The journal (<out_dir>/<name>/search/journal) is a run log of text
// records ([length][CRC-32][record], gantry::wire's RecordWriter): appended,
// never rewritten, so a search killed at any point (kill -9 included) reads
// it back whole, a torn last record dropped. Records, fields split by tabs:
//
//   search  <setting>=<value> ...           the settings (first record)
//   new     <trial> <key=value> ...         a trial and its values
//   run     <trial> <target step> <pid> <worker>  started, or promoted, to that step (by worker host:pid)
//   score   <trial> <step> <score>          its metric at a rung
//   end     <trial> <status> <text>         paused | done | stopped | failed | interrupted
//   exploit <trial> <from> <step> <seed> <key=value> ...  PBT: takes <from>'s checkpoint at <step> (new
//                                           random streams from <seed>), explored to these values
//   decided <step>                          PBT: the exploits at <step> are all done (their checkpoints copied)
//
// Every decision is made from this state alone (asha.hpp, pbt.hpp), so a
// rerun makes the ones the killed search had not made yet.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gantry::search {

enum class Status { kNew, kRunning, kPaused, kDone, kStopped, kFailed, kInterrupted };

/// "running", "paused", ... as the summary and the journal write them.
const char* status_name(Status s);

/// trial_0007: its directory and log under the search directory.
std::string trial_name(int t);

struct Score {
  int64_t step = 0;
  double value = 0;  ///< NaN: the metric was not finite
  size_t order = 0;  ///< the record's place in the journal: ties keep the earlier
};

struct Lineage {
  int from = -1;                       ///< the trial whose checkpoint was taken
  int64_t step = 0;                    ///< at that step
  uint64_t seed = 0;                   ///< the copy's new random streams
  std::vector<std::string> overrides;  ///< the values it had before
};

struct Trial {
  int id = 0;
  std::vector<std::string> overrides;  ///< "system.lr=0.0003", the space's keys only
  Status status = Status::kNew;
  std::string note;           ///< why it ended (a failed trial's last line)
  int64_t target = 0;         ///< the step it runs, or ran, to
  std::vector<Score> scores;  ///< one a rung (PBT: an interval), in step order
  std::vector<Lineage> lineage;
  bool promoted = false;  ///< its last run target is beyond its first rung (ASHA)
  long pid = 0;           ///< the process of its last run (a rerun waits for it to be gone)
  std::string worker;     ///< the search ("host:pid") that runs it; "" when written by one before workers

  /// The value of `key` among its overrides ("" if none).
  std::string value(const std::string& key) const;
  /// Its score at `step`, or nullptr.
  const Score* score_at(int64_t step) const;
  /// The step it has a checkpoint at that the next run goes on from: its last score's, or 0.
  int64_t reached() const { return scores.empty() ? 0 : scores.back().step; }
};

struct SearchState {
  std::map<std::string, std::string> settings;  ///< the `search` record's
  std::vector<Trial> trials;                    ///< by id (trial i at index i)
  int64_t decided = 0;                          ///< PBT: the last step whose exploits are done
  size_t records = 0;

  /// Applies one journal record; throws std::runtime_error on one it cannot read.
  void apply(const std::string& record);
  Trial& trial(int id);
  const Trial* find(int id) const;
  size_t count(Status s) const;
};

/// The record texts, fields joined by tabs (a tab or newline inside one becomes a space).
std::string record(const std::vector<std::string>& fields);

/// The trials with a score at `step` (those `keep` accepts, when given),
/// best first: a tie keeps the earlier result (the journal's order), a NaN last.
std::vector<int> ranked_at(const SearchState& s, int64_t step, bool maximize, bool (*keep)(const Trial&) = nullptr);

/// The status a person reads (the summary, both GUIs): running, promoted
/// (running past its first rung; ASHA only: a PBT member just runs),
/// paused, done, stopped, failed, interrupted.
std::string shown_status(const Trial& t, bool pbt = false);

/// Whether `a` is a better score than `b` (NaN is worst; a tie is not better).
inline bool better(double a, double b, bool maximize) {
  if (a != a) return false;
  if (b != b) return true;
  return maximize ? a > b : a < b;
}

}  // namespace gantry::search
