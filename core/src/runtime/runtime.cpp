#include "runtime/runtime.hpp"

#include "files/files.hpp"

#include <chrono>

#include <dlfcn.h>
#include <malloc.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

namespace gantry {

std::string error_text(const std::exception& e) {
  if (const auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
  return e.what();
}

BlasInfo detect_blas() {
  BlasInfo info;
  // The torch wheel's LibTorch (2.x) carries MKL inside itself: its products
  // never reach a libblas.so.3, whatever the loader resolves sgemm_ to.
  if (at::show_config().find("BLAS_INFO=mkl") != std::string::npos) {
    info.name = "MKL (built into LibTorch)";
    return info;
  }
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

namespace {

bool g_allocator_tuned = false;  // configure_allocator() applied its settings

// Whether the kernel gives transparent huge pages to regions that ask
// (/sys/kernel/mm/transparent_hugepage/enabled is [always] or [madvise]).
bool huge_pages_on_request() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  std::getline(f, modes);
  return modes.find("[always]") != std::string::npos || modes.find("[madvise]") != std::string::npos;
}

}  // namespace

size_t advise_huge_heap() {
  // What GLIBC_TUNABLES=glibc.malloc.hugetlb=1 does, from inside: the heap's
  // top is grown (virtual memory only: nothing is touched; the trim threshold
  // keeps it) and asked for 2 MiB pages, so the parameters, optimizer state
  // and step buffers allocated from it later are backed by huge pages on
  // first touch. Adam and the element-wise kernels stream ~60 MB a step;
  // over 4 KiB pages that is ~15,000 pages, far more than the TLB holds (the
  // likely reason; not counted here): +3-6% steps/s on the GAN here.
  constexpr size_t kHuge = 2 << 20, kBlock = 240 << 20;
  static bool done = false;
  if (done || !g_allocator_tuned || !huge_pages_on_request()) return 0;  // untuned, glibc would trim the top at once
  done = true;
  char* const before = static_cast<char*>(::sbrk(0));
  void* a = std::malloc(kBlock);
  void* b = std::malloc(kBlock);
  asm volatile("" : : "r"(a), "r"(b) : "memory");  // or the compiler drops the malloc/free pairs
  std::free(b);
  std::free(a);
  char* const after = static_cast<char*>(::sbrk(0));
  if (before == reinterpret_cast<char*>(-1) || after <= before) return 0;  // no sbrk heap to advise
  // The whole free top of the heap (it may begin below `before`: the top pad
  // of an earlier growth), where the next allocations are carved from.
  const size_t top = ::mallinfo2().keepcost;
  char* const start = top > static_cast<size_t>(after - before) ? after - top : before;
  const auto up = (reinterpret_cast<uintptr_t>(start) + kHuge - 1) & ~uintptr_t(kHuge - 1);
  const auto down = reinterpret_cast<uintptr_t>(after) & ~uintptr_t(kHuge - 1);
  if (down <= up || ::madvise(reinterpret_cast<void*>(up), down - up, MADV_HUGEPAGE) != 0) return 0;
  return down - up;
}

bool configure_allocator() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables && std::string(tunables).find("glibc.malloc.") != std::string::npos) return false;
  // Each step frees and re-allocates the same multi-MiB activations and
  // gradients; by default glibc serves them with mmap/munmap (or trims the
  // heap top), paying page faults every step.
  g_allocator_tuned = mallopt(M_MMAP_THRESHOLD, 256 << 20) == 1 && mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1 &&
                      mallopt(M_TOP_PAD, 64 << 20) == 1;
  return g_allocator_tuned;
}

std::pair<uint64_t, uint64_t> file_limits() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return {0, 0};
  return {r.rlim_cur, r.rlim_max};
}

uint64_t raise_file_limit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return 0;
  const rlim_t want = r.rlim_max == RLIM_INFINITY ? rlim_t(1) << 20 : std::min<rlim_t>(r.rlim_max, rlim_t(1) << 20);
  if (r.rlim_cur < want) {
    rlimit raised = r;
    raised.rlim_cur = want;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) r = raised;
  }
  return r.rlim_cur;
}

namespace {
std::atomic<int> g_stop{0};

extern "C" void on_stop_signal(int sig) {
  if (sig == SIGINT && g_stop.load() == SIGINT) {  // second Ctrl-C: now, without a half-written file
    remove_noted_temp_file();
    _exit(130);
  }
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
  // A lost terminal or ssh session: stop and save as for SIGTERM, not death
  // without a checkpoint (docs/trainer.md: detach with nohup, setsid or tmux).
  sigaction(SIGHUP, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
}

bool requeue_follows(int sig) {
  const char* job = std::getenv("SLURM_JOB_ID");
  return (sig == SIGUSR1 || sig == SIGUSR2) && job && *job;
}

int stop_requested() { return g_stop.load(); }

void clear_stop_request() { g_stop.store(0); }

}  // namespace gantry
