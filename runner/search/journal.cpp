#include "search/journal.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "gantry/engine.hpp"
#include "gantry/errors.hpp"
#include "wire/record_log.hpp"

namespace fs = std::filesystem;

namespace gantry::search {

namespace {

std::string host_name() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

double now_s() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

// "host:pid" -> host, pid.
bool split_worker(const std::string& who, std::string& host, long& pid) {
  const size_t colon = who.rfind(':');
  if (colon == std::string::npos) return false;
  host = who.substr(0, colon);
  pid = std::strtol(who.c_str() + colon + 1, nullptr, 10);
  return pid > 0;
}

// The holder and time a lock file holds ("host:pid time"); false when unreadable.
bool read_holder(const fs::path& path, std::string& who, double& at) {
  std::ifstream in(path);
  return bool(in >> who >> at);
}

}  // namespace

std::string this_worker() { return host_name() + ":" + std::to_string(::getpid()); }

bool worker_alive(const std::string& who, const fs::path& workers, double lease_s) {
  std::string host;
  long pid = 0;
  if (!split_worker(who, host, pid)) return false;
  if (host == host_name()) return ::kill(pid_t(pid), 0) == 0 || errno == EPERM;
  std::string named;
  double at = 0;
  if (!read_holder(workers / who, named, at)) return false;
  return now_s() - at < lease_s;
}

void renew_lease(const fs::path& workers) {
  std::error_code ec;
  fs::create_directories(workers, ec);
  char buf[64];
  std::snprintf(buf, sizeof buf, " %.3f\n", now_s());
  engine::write_file_atomic((workers / this_worker()).string(), this_worker() + buf);
}

JournalLock::JournalLock(const fs::path& path, double lease_s, double wait_s) : path_(path) {
  const std::string me = this_worker();
  const double until = now_s() + wait_s;
  for (int attempt = 0;; ++attempt) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
      char buf[64];
      std::snprintf(buf, sizeof buf, " %.3f\n", now_s());
      const std::string text = me + buf;
      const bool ok = ::write(fd, text.data(), text.size()) == ssize_t(text.size()) && ::fsync(fd) == 0;
      ::close(fd);
      if (!ok) {
        ::unlink(path.c_str());
        throw Error("cannot write the search's lock " + path.string() + ": " + std::strerror(errno));
      }
      return;
    }
    if (errno != EEXIST) throw Error("cannot create the search's lock " + path.string() + ": " + std::strerror(errno));
    std::string who;
    double at = 0;
    const bool read = read_holder(path, who, at);
    std::error_code ec;
    const auto written = fs::last_write_time(path, ec);
    // A holder that died holding it (kill -9, a lost node): its lease is over, or its process on this host is gone.
    // A lock whose content is not there yet (created, not written) is left alone for a lease.
    std::string host;
    long pid = 0;
    const bool gone_here =
        read && split_worker(who, host, pid) && host == host_name() && ::kill(pid_t(pid), 0) != 0 && errno == ESRCH;
    const bool stale =
        read ? (now_s() - at > lease_s || gone_here)
             : (!ec && fs::file_time_type::clock::now() - written > std::chrono::duration<double>(lease_s));
    if (stale) {
      const fs::path aside = path.string() + ".broken." + me;
      if (::rename(path.c_str(), aside.c_str()) == 0) {  // only one breaker wins: the others find it gone
        ::unlink(aside.c_str());
        ++broken_;
      }
      continue;
    }
    if (now_s() > until)
      throw Error("the search's lock " + path.string() + " is held by " + (read ? who : std::string("someone")) +
                  " for more than " + std::to_string(int(wait_s)) + " s: remove it if that process is gone");
    std::this_thread::sleep_for(std::chrono::milliseconds(5 + (attempt % 8) * 5));
  }
}

JournalLock::~JournalLock() { ::unlink(path_.c_str()); }

Journal::Journal(const fs::path& path, bool writable) : path_(path), writable_(writable) { read(false); }

Journal::~Journal() = default;

void Journal::refresh() { read(true); }

void Journal::read(bool locked) {
  const wire::Replay r = wire::replay(path_.string());
  for (size_t i = applied_; i < r.frames.size(); ++i) {
    try {
      state_.apply(r.frames[i]);
    } catch (const std::exception& e) {
      throw Error("search journal " + path_.string() + ": record " + std::to_string(i + 1) + " cannot be read (" +
                  e.what() + "): it was not written by this gantry, or edited");
    }
  }
  applied_ = std::max(applied_, r.frames.size());
  if (!r.corrupt.empty()) note_ = wire::describe(r.corrupt);
  if (r.torn_tail) {
    note_ += std::string(note_.empty() ? "" : "; ") + "a torn last record cut (" +
             std::to_string(fs::file_size(path_) - r.valid_bytes) + " bytes: an append the search was killed in)";
    if (writable_ && locked && ::truncate(path_.c_str(), off_t(r.valid_bytes)) != 0)
      throw Error("cannot cut the torn tail of " + path_.string() + ": " + std::strerror(errno));
  }
}

std::unique_ptr<JournalLock> Journal::lock(double lease_s) {
  auto l = std::make_unique<JournalLock>(path_.string() + ".lock", lease_s);
  refresh();
  return l;
}

void Journal::append(const std::vector<std::string>& fields) {
  const std::string r = record(fields);
  SearchState after = state_;  // a record the state refuses is never written
  try {
    after.apply(r);
  } catch (const std::exception& e) {
    throw Error("search journal " + path_.string() + ": refused to write '" + r + "': " + e.what() + " (a bug)");
  }
  try {
    wire::RecordWriter w(path_.string());  // opened anew: appends after what others wrote
    w.append(r);
    if (::fsync(w.fd()) != 0 && errno != EINVAL)
      throw Error("cannot sync " + path_.string() + ": " + std::strerror(errno));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(e.what());
  }
  state_.apply(r);  // in place: references into state() stay valid
  ++applied_;
}

}  // namespace gantry::search
