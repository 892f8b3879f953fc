// Whether a run that says "running" still has a writer (issue 44.1): the
// stream alone cannot tell a killed run from a quiet one, so a client judges
// it from facts outside the stream, as W&B calls a run "crashed":
//   - the run directory's lock note ("gantry pid N on HOST", io/run_dir.cpp)
//     names a process on this host that is gone (or whose pid was reused);
//   - a live stream closed without an end record and its server has not
//     answered for 15 s (the server lives in the writer's process);
//   - no record for max(5 min, 10 x the run's own status interval), which is
//     all a client on another host can know.
// A writer seen alive on this host is never judged by the age of its records.
#pragma once

#include <string>

#include "run_state.hpp"
#include "source.hpp"

namespace gantry::client {

/// Who holds a run directory, from its `.lock` note.
struct Writer {
  bool known = false;  ///< a note was there and parsed
  long pid = 0;
  std::string host;
  bool here = false;         ///< the note's host is this host
  bool alive = false;        ///< here, and that pid is a gantry process started before the note was written
  std::string text() const;  ///< "gantry pid 41 on node3"
};
Writer writer_of(const std::string& run_dir);

/// Seconds a live stream may stay closed without an end record before the run is lost.
constexpr double kLostAfterClosed = 15;
/// The least silence after which a run whose writer cannot be seen is lost.
constexpr double kLostAfterSilent = 300;

/// Why the run is lost at `now` (Unix s), or "" when it may still be alive.
/// Only a run whose messages say running can be lost.
std::string lost_why(const RunState& state, const SourceStatus& source, const std::string& run_dir, double now);

/// Marks or clears `state`'s lost verdict from lost_why; reads the run
/// directory at most once a second (a GUI calls it every frame or tick).
void check_lost(RunState& state, const Source& source, double now);

}  // namespace gantry::client
