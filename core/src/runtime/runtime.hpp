// Facts about the process the trainer runs in: BLAS, cores, threads, signals;
// LibTorch's exceptions as one line.
#pragma once

#include <cstddef>

#include <stdexcept>
#include <string>
#include <utility>

#include "gantry/core_export.hpp"
#include "io/clock.hpp"

namespace gantry {

struct BlasInfo {
  std::string name;        ///< "OpenBLAS", "reference BLAS", "MKL", "MKL (built into LibTorch)", "BLIS" or "unknown"
  std::string path;        ///< the library that provides dgemm_/sgemm_
  bool reference = false;  ///< Netlib's reference BLAS: ~40x slower at matrix products
};

/// Which BLAS LibTorch's matrix products go to (Debian's LibTorch calls
/// whatever libblas.so.3 the alternatives system selects; the torch wheel's
/// has MKL built in).
/// The message of any exception, without LibTorch's C++ backtrace.
GANTRY_CORE_EXPORT std::string error_text(const std::exception& e);

GANTRY_CORE_EXPORT BlasInfo detect_blas();

/// One line to warn with when the reference BLAS is in use, else "".
GANTRY_CORE_EXPORT std::string blas_warning(const BlasInfo& blas);

/// Cores this process may run on (sched_getaffinity; SLURM and taskset limit it).
GANTRY_CORE_EXPORT int available_cores();

/// Sets LibTorch's intra-op threads: `requested`, or when 0 the available
/// cores shared among `local_ranks` processes. Returns the count set.
GANTRY_CORE_EXPORT int configure_threads(int64_t requested, int local_ranks = 1);

/// Keeps glibc from returning and re-mapping the training step's large
/// buffers every step (mmap threshold 256 MiB, trim threshold 1 GiB, top pad
/// 64 MiB): +20% steps/s on the GAN here. Skipped when GLIBC_TUNABLES sets
/// malloc options, so a user's own tuning wins. Returns whether it applied.
GANTRY_CORE_EXPORT bool configure_allocator();

/// Grows the heap's top by ~480 MiB of untouched virtual memory and asks the
/// kernel for transparent huge pages there (madvise), as glibc's
/// glibc.malloc.hugetlb=1 tunable does; needs THP in [always] or [madvise]
/// mode and configure_allocator() to have applied (so the top is not
/// trimmed). Returns the bytes advised (0: nothing done; a second call does
/// nothing). Call it before the model and data are allocated
/// (trainer.huge_pages).
GANTRY_CORE_EXPORT size_t advise_huge_heap();

/// Raises the soft limit on open files to the hard one (capped at 2^20): a
/// rank holds a socket to every other rank, rank 0 several. Returns the soft
/// limit now in force.
GANTRY_CORE_EXPORT uint64_t raise_file_limit();
/// The soft and hard limits on open files (RLIMIT_NOFILE).
GANTRY_CORE_EXPORT std::pair<uint64_t, uint64_t> file_limits();

/// SIGINT / SIGTERM / SIGUSR1 / SIGUSR2 / SIGHUP ask the trainer to stop at
/// the next step boundary and save (the handler only sets a flag); a second
/// SIGINT exits at once with 130, removing the temp file of a write in
/// progress first (files/files.hpp, remove_noted_temp_file). SIGPIPE is ignored: a rank whose stdout reader
/// died (its launcher, killed) must still save its checkpoint, and a failed
/// write of a progress line is not fatal.
GANTRY_CORE_EXPORT void install_stop_signals();
/// Whether a stop by `sig` is a preemption that a requeue follows: SIGUSR1 or
/// SIGUSR2 (SLURM's --signal) inside a SLURM job (SLURM_JOB_ID set), where
/// rank 0 calls `scontrol requeue`. Anywhere else nothing requeues the run:
/// it is stopped (exit 128 + sig), resumable with trainer.resume=auto.
GANTRY_CORE_EXPORT bool requeue_follows(int sig);
/// The signal that asked to stop, or 0.
GANTRY_CORE_EXPORT int stop_requested();
/// Clears the flag (tests).
GANTRY_CORE_EXPORT void clear_stop_request();

}  // namespace gantry
