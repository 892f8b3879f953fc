#include "files/files.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gantry/errors.hpp"

namespace fs = std::filesystem;

namespace gantry {

namespace {

// The temp file write_file_atomic is writing now (remove_noted_temp_file).
char g_temp_file[4096];
std::atomic<bool> g_temp_file_set{false};

void note_temp_file(const char* path) {
  g_temp_file_set.store(false);
  if (!path || std::strlen(path) >= sizeof g_temp_file) return;
  std::memcpy(g_temp_file, path, std::strlen(path) + 1);
  g_temp_file_set.store(true);
}

[[noreturn]] void fail(const std::string& what, const std::string& path) {
  throw Error("cannot " + what + " " + path + ": " + std::strerror(errno));
}

void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // best effort: some file systems refuse
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

void remove_noted_temp_file() {
  if (g_temp_file_set.load()) ::unlink(g_temp_file);
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  const fs::path target(path);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  note_temp_file(tmp.c_str());  // a second Ctrl-C removes it before exiting
  struct Forget {
    ~Forget() { note_temp_file(nullptr); }
  } forget;
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("create", tmp);
  size_t done = 0;
  while (done < bytes.size()) {
    // In 8 MiB pieces: a signal arriving during one write(2) to a file waits
    // for its end, and two Ctrl-C within one long write would merge into one.
    const ssize_t n = ::write(fd, bytes.data() + done, std::min<size_t>(bytes.size() - done, size_t{8} << 20));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int saved = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      errno = saved;
      fail("write", tmp);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int saved = errno;
    ::unlink(tmp.c_str());
    errno = saved;
    fail("flush", tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int saved = errno;
    ::unlink(tmp.c_str());
    errno = saved;
    fail("rename into place", path);
  }
  fsync_dir(target.parent_path());
}

std::vector<std::string> remove_stale_temp_files(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> removed;
  std::error_code ec;
  std::vector<fs::path> folders{dir};
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory(ec) && !e.is_symlink(ec)) folders.push_back(e.path());
  for (const auto& folder : folders) {
    for (const auto& e : fs::directory_iterator(folder, ec)) {
      const std::string name = e.path().filename().string();
      const size_t at = name.rfind(".tmp.");
      if (at == std::string::npos || !e.is_regular_file(ec)) continue;
      const std::string digits = name.substr(at + 5);
      if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) continue;
      const pid_t pid = static_cast<pid_t>(std::stol(digits));
      if (pid <= 0 || ::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
      if (fs::remove(e.path(), ec)) removed.push_back(e.path().string());
    }
  }
  return removed;
}

namespace {

std::string kind_of(mode_t mode) {
  if (S_ISREG(mode)) return "";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

std::string size_text(uint64_t bytes) {
  char buf[32];
  if (bytes >= (uint64_t{1} << 30))
    std::snprintf(buf, sizeof buf, "%.1f GiB", double(bytes) / double(uint64_t{1} << 30));
  else if (bytes >= (uint64_t{1} << 20))
    std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / double(uint64_t{1} << 20));
  else
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(bytes));
  return buf;
}

}  // namespace

std::string read_file(const std::string& path, uint64_t max_bytes, const std::string& what) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open the " + what + ": " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw Error(path + ": cannot stat the " + what + ": " + std::strerror(errno));
  if (const std::string kind = kind_of(st.st_mode); !kind.empty()) throw Error(path + ": " + kind + ", not a " + what);
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes)
    throw Error(path + ": " + size_text(size) + ", more than the " + size_text(max_bytes) + " a " + what + " may be");
  std::string bytes;
  try {
    bytes.resize(size);  // what the file holds now; a writer appending meanwhile is not waited for
  } catch (const std::bad_alloc&) {
    throw Error(path + ": the " + what + " is " + size_text(size) + ", more than this process can allocate");
  }
  size_t got = 0;
  while (got < size) {
    const ssize_t n = ::pread(fd, bytes.data() + got, size - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(path + ": cannot read the " + what + ": " + std::strerror(errno));
    if (n == 0) break;  // cut meanwhile
    got += static_cast<size_t>(n);
  }
  bytes.resize(got);
  return bytes;
}

}  // namespace gantry
