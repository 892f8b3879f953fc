#include "distributed/shm_allreduce.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "gantry/errors.hpp"
#include "runtime/runtime.hpp"

namespace gantry {

namespace {

constexpr size_t kLine = 64;  // one counter per cache line: ranks do not share lines

size_t header_bytes(int world) { return ((static_cast<size_t>(world) * kLine + 4095) / 4096) * 4096; }

// Rank r's line: the barriers it has passed, then its process id.
std::atomic<uint64_t>& counter(void* base, int r) {
  return *reinterpret_cast<std::atomic<uint64_t>*>(static_cast<char*>(base) + static_cast<size_t>(r) * kLine);
}
std::atomic<int64_t>& pid_of(void* base, int r) {
  return *reinterpret_cast<std::atomic<int64_t>*>(static_cast<char*>(base) + static_cast<size_t>(r) * kLine + 8);
}

std::atomic<uint64_t> g_entered{0}, g_last{0};

// Whether process `pid` (of this host) has exited.
bool gone(int64_t pid) { return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH; }

}  // namespace

ShmAllreduce::ShmAllreduce(const std::string& name, int rank, int world, size_t count, bool create, double timeout_s,
                           double stop_grace_s, size_t segment_budget)
    : name_(name),
      rank_(rank),
      world_(world),
      count_(count),
      chunk_(std::min(count, std::max(kMinChunk, segment_budget / ((static_cast<size_t>(world) + 1) * sizeof(float))))),
      timeout_s_(timeout_s),
      stop_grace_s_(stop_grace_s) {
  static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared-memory counters need lock-free atomics");
  chunk_ = std::max<size_t>(chunk_, 1);
  bytes_ = header_bytes(world) + (static_cast<size_t>(world) + 1) * chunk_ * sizeof(float);
  const int fd =
      create ? ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600) : ::shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0)
    throw Error("shared-memory gradient exchange: cannot " + std::string(create ? "create " : "open ") + "/dev/shm" +
                name + ": " + std::strerror(errno) + " (trainer.grad_transport=gloo avoids it)");
  if (create && ::ftruncate(fd, static_cast<off_t>(bytes_)) != 0) {
    const int e = errno;
    ::close(fd);
    ::shm_unlink(name.c_str());
    throw Error("shared-memory gradient exchange: cannot size /dev/shm" + name + " to " + std::to_string(bytes_ >> 20) +
                " MiB: " + std::strerror(e));
  }
  map_ = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw Error("shared-memory gradient exchange: cannot map /dev/shm" + name + ": " + std::strerror(errno));
  }
  arrived_ = static_cast<std::atomic<uint64_t>*>(map_);
  data_ = reinterpret_cast<float*>(static_cast<char*>(map_) + header_bytes(world));
  pid_of(map_, rank).store(::getpid(), std::memory_order_release);
}

ShmAllreduce::~ShmAllreduce() {
  if (map_) ::munmap(map_, bytes_);
}

void ShmAllreduce::unlink() { ::shm_unlink(name_.c_str()); }

std::string ShmAllreduce::missing_ranks() const {
  std::string who;
  for (int r = 0; r < world_; ++r)
    if (counter(map_, r).load(std::memory_order_acquire) < phase_) who += (who.empty() ? "" : ", ") + std::to_string(r);
  return who;
}

uint64_t ShmAllreduce::exchanges() { return g_entered.load(std::memory_order_relaxed); }
uint64_t ShmAllreduce::exchanges_reached_last() { return g_last.load(std::memory_order_relaxed); }

bool ShmAllreduce::barrier(const char* what) {
  using Clock = std::chrono::steady_clock;
  ++phase_;
  counter(map_, rank_).store(phase_, std::memory_order_release);
  auto arrived = [&] {
    for (int r = 0; r < world_; ++r)
      if (counter(map_, r).load(std::memory_order_acquire) < phase_) return false;
    return true;
  };
  if (arrived()) return true;  // everyone else was here first
  // The others are usually microseconds away: spin first, by the clock (a
  // count of spins or yields means nothing when ranks outnumber cores).
  const auto start = Clock::now();
  auto waited = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  while (waited() < 50e-6)
    if (arrived()) return false;
  while (waited() < 1e-3) {
    if (arrived()) return false;
    sched_yield();
  }
  auto nap = std::chrono::microseconds(50);
  double next_check = 0, stop_seen = -1;
  for (;;) {
    if (arrived()) return false;
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(2000));
    const double t = waited();
    if (t < next_check) continue;
    next_check = t + 0.01;
    // A rank whose process is gone will not come (ranks share this host).
    for (int r = 0; r < world_; ++r)
      if (counter(map_, r).load() < phase_ && gone(pid_of(map_, r).load()))
        throw Error("rank " + std::to_string(rank_) + ": rank " + std::to_string(r) + " (pid " +
                    std::to_string(pid_of(map_, r).load()) + ") exited during the gradient exchange (" + what +
                    "); its output says why");
    if (t > timeout_s_)
      throw Error("rank " + std::to_string(rank_) + ": rank(s) " + missing_ranks() +
                  " did not reach the gradient exchange (" + what + ") within " +
                  std::to_string(static_cast<int>(timeout_s_)) +
                  " s (trainer.dist_timeout); if a rank died, its output says why");
    // Asked to stop: a live peer still gets stop_grace_s to arrive (it was
    // signalled too and is finishing its step); then this rank says so and ends.
    if (const int sig = stop_requested()) {
      if (stop_seen < 0) stop_seen = t;
      if (t - stop_seen > stop_grace_s_) {
        char waited_s[32];
        std::snprintf(waited_s, sizeof waited_s, "%.1f", t);
        throw Error("rank " + std::to_string(rank_) + ": stopped by signal " + std::to_string(sig) + " while waiting " +
                    waited_s + " s for rank(s) " + missing_ranks() + " at the gradient exchange (" + what + ")");
      }
    }
  }
}

void ShmAllreduce::run(float scale, size_t n) {
  n = std::min(n, chunk_);
  // Last at either barrier: the others waited for this rank's gradients, or
  // for its share of the sums (it was frozen after it arrived).
  bool last = barrier("every rank's gradients written");
  // This rank sums elements [lo, hi) of every slot into the result.
  const size_t per = (n + static_cast<size_t>(world_) - 1) / static_cast<size_t>(world_);
  const size_t lo = std::min(n, per * static_cast<size_t>(rank_)), hi = std::min(n, lo + per);
  float* out = data_ + static_cast<size_t>(world_) * chunk_;
  const float* s0 = data_;
  if (world_ == 2) {
    const float* s1 = data_ + chunk_;
    for (size_t i = lo; i < hi; ++i) out[i] = (s0[i] + s1[i]) * scale;
  } else {
    for (size_t i = lo; i < hi; ++i) {
      float sum = s0[i];
      for (int r = 1; r < world_; ++r) sum += data_[static_cast<size_t>(r) * chunk_ + i];
      out[i] = sum * scale;
    }
  }
  last = barrier("the sums written") || last;
  g_entered.fetch_add(1, std::memory_order_relaxed);
  if (last) g_last.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace gantry
