// Where a client's messages come from: a live server (StreamClient) or a run
// directory on disk (LogSource). Either fills an inbox on its own thread; the
// GUI thread drains it into its RunState at its own pace (a frame, a timer).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "wire/message.hpp"

namespace gantry::client {

struct SourceStatus {
  enum class State {
    kConnecting,    ///< first attempt in progress
    kConnected,     ///< live: backfill then new messages
    kReconnecting,  ///< lost; retrying with backoff
    kFollowing,     ///< reading a run directory's log as it grows
    kEnded,         ///< the run ended and its server went away: nothing more will come
    kRefused,       ///< the server refused us (wrong token, other protocol): no retry
  };
  State state = State::kConnecting;
  std::string text;       ///< one line for a status bar
  int attempts = 0;       ///< connection attempts so far
  uint64_t received = 0;  ///< messages received, duplicates included
  double since = 0;       ///< when `state` last changed (Unix s)
};
const char* to_string(SourceStatus::State s);

class Source {
 public:
  virtual ~Source() = default;
  /// Moves every message received since the last call into `out` (appended, in order).
  void drain(std::vector<wire::Message>& out);
  SourceStatus status() const;
  /// The run directory it reads (LogSource), or "" (a live stream's is not known).
  virtual std::string run_dir() const { return ""; }

 protected:
  void deliver(wire::Message m);
  void set_status(SourceStatus::State state, std::string text);
  void count_attempt();

 private:
  mutable std::mutex mu_;
  std::vector<wire::Message> inbox_;
  SourceStatus status_;
};

/// "HOST:PORT [--token T]", "ws://HOST:PORT/", the runner's printed line
/// ("monitor: gantry-monitor HOST:PORT --token T"), or a run directory.
struct Target {
  bool is_dir = false;
  std::string host;
  uint16_t port = 0;
  std::string token;
  std::string dir;  ///< the run directory (with stream.gantrylog)
  std::string describe() const;
};
/// Parses what a user typed or pasted; `token` (from --token) fills a missing
/// one. Throws std::invalid_argument with one line naming what is wrong.
Target parse_target(const std::string& text, const std::string& token = "");

/// One run found on disk, named for a legend.
struct RunDir {
  std::string name;  ///< relative to the path given: "20261202-065822", "lr=1e-4,batch_size=32"
  std::string dir;   ///< the run directory (holds stream.gantrylog)
};
/// Every run under the given paths: a run directory is itself; any other
/// directory is searched (4 levels, links not followed, `latest` skipped) for
/// run directories: an experiment's runs, a sweep's points. A point (or
/// experiment) with one run is named by the point; names are relative to the
/// path given, prefixed by its last part when several paths are given.
/// Sorted by name within each path. Throws std::invalid_argument naming a
/// path that is not a directory or holds no run.
std::vector<RunDir> find_runs(const std::vector<std::string>& paths);

/// What a command line names, each to watch: directories (every run under
/// them, as find_runs) and live targets ("HOST:PORT [--token T]", the
/// runner's line), in any mix and number: a word that is neither a token nor
/// part of the runner's line starts the next target. `token` (--token before
/// any target) fills a live target's missing one. Names: the run's
/// (find_runs) or HOST:PORT. Throws std::invalid_argument naming the bad word.
struct NamedTarget {
  std::string name;
  Target target;
};
std::vector<NamedTarget> parse_targets(const std::vector<std::string>& words, const std::string& token = "");

/// Opens the source for a target: a StreamClient or a LogSource. `last_seq`:
/// what the caller already has.
std::unique_ptr<Source> open_source(const Target& target, uint64_t last_seq = 0);

}  // namespace gantry::client
