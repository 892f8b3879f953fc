// The run log: an append-only file of frames, each stored as
// [u32 length][u32 CRC-32 of the frame][frame]. After a crash at most the last
// record is torn; replay() detects it and stops there.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace gantry::wire {

class RecordWriter {
 public:
  /// Opens `path` for appending (creating it). Throws std::runtime_error.
  explicit RecordWriter(const std::string& path);
  ~RecordWriter();
  RecordWriter(const RecordWriter&) = delete;
  RecordWriter& operator=(const RecordWriter&) = delete;

  /// Appends one frame and hands it to the OS.
  void append(const std::string& frame);

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
};

struct Replay {
  std::vector<std::string> frames;  ///< every whole, intact record, in order
  bool torn_tail = false;           ///< a partial or corrupt record ended the file
  size_t valid_bytes = 0;           ///< length of the intact prefix
};

/// Reads every intact record of `path` (missing file: no records).
Replay replay(const std::string& path);

}  // namespace gantry::wire
