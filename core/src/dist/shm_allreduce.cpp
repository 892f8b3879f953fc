#include "dist/shm_allreduce.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "config/errors.hpp"

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

// Whether process `pid` (of this host) has exited.
bool gone(int64_t pid) { return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH; }

}  // namespace

ShmAllreduce::ShmAllreduce(const std::string& name, int rank, int world, size_t count, bool create,
                           double timeout_s)
    : name_(name), rank_(rank), world_(world), count_(count), timeout_s_(timeout_s) {
  static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared-memory counters need lock-free atomics");
  bytes_ = header_bytes(world) + (static_cast<size_t>(world) + 1) * count * sizeof(float);
  const int fd = create ? ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600) : ::shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0)
    throw Error("shared-memory gradient exchange: cannot " + std::string(create ? "create " : "open ") + "/dev/shm" +
                name + ": " + std::strerror(errno) + " (trainer.grad_transport=gloo avoids it)");
  if (create && ::ftruncate(fd, static_cast<off_t>(bytes_)) != 0) {
    const int e = errno;
    ::close(fd);
    ::shm_unlink(name.c_str());
    throw Error("shared-memory gradient exchange: cannot size /dev/shm" + name + " to " +
                std::to_string(bytes_ >> 20) + " MiB: " + std::strerror(e));
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


void ShmAllreduce::barrier(const char* what) {
  ++phase_;
  counter(map_, rank_).store(phase_, std::memory_order_release);
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t spins = 0;; ++spins) {
    int missing = 0;
    for (int r = 0; r < world_; ++r) missing += counter(map_, r).load(std::memory_order_acquire) < phase_;
    if (!missing) return;
    if (spins < 2000) continue;  // the others are usually a few microseconds away
    if (spins < 20000) {
      sched_yield();
      continue;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    if ((spins & 255) != 0) continue;
    // Every ~15 ms: a rank whose process is gone will not come (ranks share this host).
    for (int r = 0; r < world_; ++r)
      if (counter(map_, r).load() < phase_ && gone(pid_of(map_, r).load()))
        throw Error("rank " + std::to_string(rank_) + ": rank " + std::to_string(r) + " (pid " +
                    std::to_string(pid_of(map_, r).load()) + ") exited during the gradient exchange (" + what +
                    "); its output says why");
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > timeout_s_) {
      std::string who;
      for (int r = 0; r < world_; ++r)
        if (counter(map_, r).load() < phase_) who += (who.empty() ? "" : ", ") + std::to_string(r);
      throw Error("rank " + std::to_string(rank_) + ": rank(s) " + who + " did not reach the gradient exchange (" +
                  what + ") within " + std::to_string(static_cast<int>(timeout_s_)) +
                  " s (trainer.dist_timeout); if a rank died, its output says why");
    }
  }
}

void ShmAllreduce::run(float scale) {
  barrier("every rank's gradients written");
  // This rank sums chunk [lo, hi) of every slot into the result.
  const size_t per = (count_ + static_cast<size_t>(world_) - 1) / static_cast<size_t>(world_);
  const size_t lo = std::min(count_, per * static_cast<size_t>(rank_)), hi = std::min(count_, lo + per);
  float* out = data_ + static_cast<size_t>(world_) * count_;
  const float* s0 = data_;
  if (world_ == 2) {
    const float* s1 = data_ + count_;
    for (size_t i = lo; i < hi; ++i) out[i] = (s0[i] + s1[i]) * scale;
  } else {
    for (size_t i = lo; i < hi; ++i) {
      float sum = s0[i];
      for (int r = 1; r < world_; ++r) sum += data_[static_cast<size_t>(r) * count_ + i];
      out[i] = sum * scale;
    }
  }
  barrier("the sums written");
}

}  // namespace gantry
