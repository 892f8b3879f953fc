// The search's journal on disk (state.hpp says what its records mean): read
// back whole when opened (a torn last record, what kill -9 mid-append
// leaves, is cut off), each append handed to the disk (fsync) before the
// search acts on it.
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

class Journal {
 public:
  /// Reads `path` (missing: an empty search). `writable`: opens it for
  /// appending, a torn tail cut first. Throws gantry::Error naming the file
  /// and the record it cannot read.
  Journal(const std::filesystem::path& path, bool writable);
  ~Journal();

  const SearchState& state() const { return state_; }
  /// Appends one record, syncs it, and applies it to state().
  void append(const std::vector<std::string>& fields);
  const std::filesystem::path& path() const { return path_; }
  /// What reading it found that a user should know ("" when nothing):
  /// a torn tail cut, damaged records skipped.
  const std::string& note() const { return note_; }

 private:
  std::filesystem::path path_;
  SearchState state_;
  std::unique_ptr<wire::RecordWriter> writer_;
  std::string note_;
};

}  // namespace gantry::search
