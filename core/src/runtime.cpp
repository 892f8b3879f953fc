#include "runtime.hpp"

#include <dlfcn.h>
#include <malloc.h>
#include <sched.h>
#include <unistd.h>

#include <ATen/Parallel.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <filesystem>

namespace gantry {

BlasInfo detect_blas() {
  BlasInfo info;
  // LibTorch is loaded, so its BLAS is too: ask the loader who provides sgemm_.
  void* sym = ::dlsym(RTLD_DEFAULT, "sgemm_");
  Dl_info dl{};
  if (sym && ::dladdr(sym, &dl) && dl.dli_fname) {
    std::error_code ec;
    const auto real = std::filesystem::canonical(dl.dli_fname, ec);
    info.path = ec ? dl.dli_fname : real.string();
  }
  auto has = [&](const char* s) { return info.path.find(s) != std::string::npos; };
  // Decide by the library that provides sgemm_ (an OpenBLAS may be loaded too,
  // yet not be the one LibTorch's calls resolve to, e.g. under LD_PRELOAD).
  if (has("openblas"))
    info.name = "OpenBLAS";
  else if (has("mkl"))
    info.name = "MKL";
  else if (has("blis"))
    info.name = "BLIS";
  else if (has("/blas/libblas") || has("libblas.so")) {
    info.name = "reference BLAS";
    info.reference = true;
  } else
    info.name = "unknown";
  return info;
}

std::string blas_warning(const BlasInfo& blas) {
  if (!blas.reference) return "";
  return "warning: LibTorch is using the reference BLAS (" + blas.path +
         "), ~40x slower at matrix products: apt-get install libopenblas0-openmp";
}

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

int configure_threads(int64_t requested, int local_ranks) {
  int n = static_cast<int>(requested);
  if (n <= 0) n = std::max(1, available_cores() / std::max(1, local_ranks));
  at::set_num_threads(n);
  return n;
}

bool configure_allocator() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables && std::string(tunables).find("glibc.malloc.") != std::string::npos) return false;
  // Each step frees and re-allocates the same multi-MiB activations and
  // gradients; by default glibc serves them with mmap/munmap (or trims the
  // heap top), paying page faults every step.
  return mallopt(M_MMAP_THRESHOLD, 256 << 20) == 1 && mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1 &&
         mallopt(M_TOP_PAD, 64 << 20) == 1;
}

namespace {
std::atomic<int> g_stop{0};

extern "C" void on_stop_signal(int sig) {
  if (sig == SIGINT && g_stop.load() == SIGINT) _exit(130);  // second Ctrl-C: now
  // The first request wins: a preemption (USR1) followed by SLURM's SIGTERM
  // must still save and requeue.
  int none = 0;
  g_stop.compare_exchange_strong(none, sig);
}
}  // namespace

void install_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // SLURM's --signal=USR1@N before the time limit (USR2 where NCCL takes USR1):
  // stop at the next step boundary and save, instead of the default (death).
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGUSR2, &sa, nullptr);
}

int stop_requested() { return g_stop.load(); }

void clear_stop_request() { g_stop.store(0); }

}  // namespace gantry
