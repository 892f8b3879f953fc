// Forks n processes and waits for them all: the tests' and the benchmarks'
// one way to run ranks (or any children) side by side in one machine.
// Header-only and LibTorch-free, so bench/ includes it too.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <functional>
#include <vector>

namespace gantry::test {

/// Forks `n` processes, the k-th running body(k) (a throw is its failure,
/// printed with `what` and k), and waits for every one: true when none failed.
inline bool run_forked(int n, const std::function<void(int)>& body, const char* what = "child") {
  std::vector<pid_t> kids;
  for (int k = 0; k < n; ++k) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int rc = 1;
      try {
        body(k);
        rc = 0;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s %d of %d: %s\n", what, k, n, e.what());
      }
      ::_exit(rc);
    }
    kids.push_back(pid);
  }
  bool ok = true;
  for (const pid_t pid : kids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  return ok;
}

}  // namespace gantry::test
