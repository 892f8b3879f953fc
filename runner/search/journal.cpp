#include "search/journal.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "gantry/errors.hpp"
#include "wire/record_log.hpp"

namespace gantry::search {

Journal::Journal(const std::filesystem::path& path, bool writable) : path_(path) {
  const wire::Replay r = wire::replay(path.string());
  for (size_t i = 0; i < r.frames.size(); ++i) {
    try {
      state_.apply(r.frames[i]);
    } catch (const std::exception& e) {
      throw Error("search journal " + path.string() + ": record " + std::to_string(i + 1) + " cannot be read (" +
                  e.what() + "): it was not written by this gantry, or edited");
    }
  }
  if (!r.corrupt.empty()) note_ = wire::describe(r.corrupt);
  if (r.torn_tail) {
    note_ += std::string(note_.empty() ? "" : "; ") + "a torn last record cut (" +
             std::to_string(std::filesystem::file_size(path) - r.valid_bytes) +
             " bytes: an append the search was killed in)";
    if (writable && ::truncate(path.c_str(), off_t(r.valid_bytes)) != 0)
      throw Error("cannot cut the torn tail of " + path.string() + ": " + std::strerror(errno));
  }
  if (!writable) return;
  try {
    writer_ = std::make_unique<wire::RecordWriter>(path.string());
  } catch (const std::exception& e) {
    throw Error(e.what());
  }
}

Journal::~Journal() = default;

void Journal::append(const std::vector<std::string>& fields) {
  const std::string r = record(fields);
  SearchState after = state_;  // a record the state refuses is never written
  try {
    after.apply(r);
  } catch (const std::exception& e) {
    throw Error("search journal " + path_.string() + ": refused to write '" + r + "': " + e.what() + " (a bug)");
  }
  try {
    writer_->append(r);
  } catch (const std::exception& e) {
    throw Error(e.what());
  }
  if (::fsync(writer_->fd()) != 0 && errno != EINVAL)
    throw Error("cannot sync " + path_.string() + ": " + std::strerror(errno));
  state_.apply(r);  // in place: references into state() stay valid
}

}  // namespace gantry::search
