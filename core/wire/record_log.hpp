// The run log: an append-only file of frames, each stored as
// [u32 length][u32 CRC-32 of the frame][frame]. After a crash at most the last
// record is torn; replay() detects it and stops there. A record damaged in the
// middle of the file (a bit flip on disk) is skipped: readers resynchronise on
// the next intact frame (a length that fits and a CRC that matches) and keep
// every intact record after it.
#pragma once

#include <cstdio>
#include <cstdint>
#include <string>
#include <utility>
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
  /// The file's descriptor (opened for appending): a crash handler writes its
  /// last record there with write(2).
  int fd() const;

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
};

/// Bytes between two intact records that are no record: a damaged one.
struct CorruptRegion {
  uint64_t offset = 0;  ///< where it starts in the file
  uint64_t bytes = 0;
};

struct Replay {
  std::vector<std::string> frames;     ///< every whole, intact record, in order
  bool torn_tail = false;              ///< a partial or corrupt record ended the file
  size_t valid_bytes = 0;              ///< up to the end of the last intact record
  std::vector<CorruptRegion> corrupt;  ///< damaged records skipped between intact ones
};

/// One line describing `corrupt` for a warning ("" when empty):
/// "2 damaged records skipped (37 bytes at offset 1204, ...)".
std::string describe(const std::vector<CorruptRegion>& corrupt);

/// One Event record ([length][CRC][frame], as RecordWriter::append stores
/// it) encoded into `out` without allocating: what a signal handler may do.
/// Strings are cut to fit; returns the record's size (0: `cap` too small).
size_t encode_event_record(char* out, size_t cap, uint64_t seq, const char* kind, int64_t step, double wall_time,
                           const char* text) noexcept;

/// Reads every intact record of `path` (missing file: no records).
Replay replay(const std::string& path);

/// Follows a run log as it grows (a monitor reading a live run's directory):
/// each poll() returns the whole, intact records appended since the last one.
/// A record still being written is left for a later poll. If the file
/// shrinks (a resumed run cut a torn tail) it is read again from the start:
/// the caller drops what it already has by seq.
class RecordFollower {
 public:
  explicit RecordFollower(std::string path) : path_(std::move(path)) {}
  std::vector<std::string> poll();
  const std::string& path() const { return path_; }
  /// Bytes of intact records read so far.
  uint64_t offset() const { return offset_; }
  /// How many times the file was found shorter than what was read.
  int restarts() const { return restarts_; }
  /// Damaged records skipped so far (since the last restart).
  const std::vector<CorruptRegion>& corrupt() const { return corrupt_; }

 private:
  std::string path_;
  uint64_t offset_ = 0;
  int restarts_ = 0;
  std::vector<CorruptRegion> corrupt_;
};

}  // namespace gantry::wire
