#include "io/run_dir.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "gantry/errors.hpp"

namespace fs = std::filesystem;

namespace gantry {

std::string make_run_dir(const std::string& out_dir, const std::string& name) {
  const fs::path experiment = fs::path(out_dir) / name;
  std::error_code ec;
  fs::create_directories(experiment, ec);
  if (ec) throw Error("cannot create " + experiment.string() + ": " + ec.message());
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  fs::path run;
  for (int i = 0;; ++i) {
    run = experiment / (i ? std::string(stamp) + "-" + std::to_string(i) : std::string(stamp));
    if (fs::create_directory(run, ec)) break;  // atomic: never two runs in one folder
    if (ec) throw Error("cannot create " + run.string() + ": " + ec.message());
  }
  for (const char* sub : {"images", "checkpoints"}) fs::create_directory(run / sub);
  point_latest(experiment.string(), run.filename().string());
  return run.string();
}

void point_latest(const std::string& experiment_dir, const std::string& run_name) {
  const fs::path experiment(experiment_dir);
  const fs::path tmp = experiment / (".latest." + std::to_string(::getpid()));
  std::error_code ec;
  fs::remove(tmp, ec);
  fs::create_directory_symlink(run_name, tmp, ec);
  if (!ec) fs::rename(tmp, experiment / "latest", ec);
}

std::string tensorboard_dir(const std::string& run_dir) {
  std::error_code ec;
  fs::path run = fs::weakly_canonical(fs::absolute(run_dir), ec);
  if (ec) run = fs::path(run_dir).lexically_normal();
  if (run.filename().empty()) run = run.parent_path();
  return (run.parent_path() / "tensorboard" / run.filename()).string();
}

RunDirLock::RunDirLock(const std::string& run_dir) {
  const std::string path = (fs::path(run_dir) / ".lock").string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error("cannot open " + path + ": " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    char buf[256] = {};
    const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
    std::string holder = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "another process";
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    ::close(fd_);
    fd_ = -1;
    throw Error("run directory " + run_dir + " is in use by " + holder +
                " (another run of this experiment): wait for it to end, or give this run another name");
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string owner = "gantry pid " + std::to_string(::getpid()) + " on " + host + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, owner.data(), owner.size(), 0) < 0) {
    // The lock holds without the note; only the message to a second run is poorer.
  }
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace gantry
