// The search's journal on disk (state.hpp says what its records mean): read
// back whole when opened (a torn last record, what kill -9 mid-append
// leaves, is cut off), each append handed to the disk (fsync) before the
// search acts on it.
//
// Several searches (the workers of a SLURM array, on other nodes over NFS)
// share one journal: each decision is made under the journal's lock
// (JournalLock: a lock file created with O_EXCL, which NFS v3 and later make
// atomic, holding who and when; one older than its lease, or whose holder on
// this host is dead, is broken by a rename only one breaker wins), after
// re-reading what the others appended (the file is opened anew for every
// read and append: NFS's close-to-open consistency shows the others' writes).
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "search/state.hpp"

namespace gantry::wire {
class RecordWriter;
}

namespace gantry::search {

/// "host:pid" of this process: a worker's name in the journal.
std::string this_worker();
/// Whether worker `who` ("host:pid") still runs: on this host, whether its
/// process is alive; on another, whether its lease file in `workers` was
/// renewed within `lease_s` seconds.
bool worker_alive(const std::string& who, const std::filesystem::path& workers, double lease_s);
/// Renews this worker's lease file in `workers` (its time, written atomically).
void renew_lease(const std::filesystem::path& workers);

class JournalLock {
 public:
  /// Takes `path` (the journal's path + ".lock"), waiting up to
  /// `wait_s` seconds; a lock older than `lease_s`, or whose holder on this
  /// host is gone, is broken. Throws gantry::Error naming the file and its
  /// holder when it cannot be taken.
  JournalLock(const std::filesystem::path& path, double lease_s, double wait_s = 300);
  ~JournalLock();
  JournalLock(const JournalLock&) = delete;
  JournalLock& operator=(const JournalLock&) = delete;
  /// Locks broken on the way (a holder that died holding it).
  int broken() const { return broken_; }

 private:
  std::filesystem::path path_;
  int broken_ = 0;
};

class Journal {
 public:
  /// Reads `path` (missing: an empty search). `writable`: opens it for
  /// appending, a torn tail cut first. Throws gantry::Error naming the file
  /// and the record it cannot read.
  Journal(const std::filesystem::path& path, bool writable);
  ~Journal();

  const SearchState& state() const { return state_; }
  /// Appends one record, syncs it, and applies it to state(). With other
  /// writers, only under lock() (after its refresh).
  void append(const std::vector<std::string>& fields);
  /// The journal's lock, with what others appended since read into state()
  /// (a torn tail, a writer killed mid-append, cut). References into
  /// state() stay valid (records are applied in place).
  std::unique_ptr<JournalLock> lock(double lease_s);
  /// Reads what others appended since (call it holding the lock).
  void refresh();
  const std::filesystem::path& path() const { return path_; }
  /// What reading it found that a user should know ("" when nothing):
  /// a torn tail cut, damaged records skipped.
  const std::string& note() const { return note_; }

 private:
  std::filesystem::path path_;
  SearchState state_;
  void read(bool locked);  ///< a torn tail is cut only under the lock (else it may be another's append)
  bool writable_ = false;
  size_t applied_ = 0;  ///< frames of the file in state_
  std::string note_;
};

}  // namespace gantry::search
