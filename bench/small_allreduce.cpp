// The latency of a small all-reduce (the stop agreement's 3 ints, a metrics
// row's few doubles) at N ranks on this host, two ways in the same run:
// gantry's (recursive doubling over Gloo send/recv: log2(N) rounds) and
// Gloo's own all-reduce (a ring: 2(N-1) steps one after another), with no
// training beside it. Each rank is a forked process with its own
// ProcessGroup. Every rank sleeps 2 ms before each all-reduce, so that all
// are idle when it starts (with more ranks than cores, ranks that never block
// measure the scheduler's time slices, not the exchange); an all-reduce's
// latency is the time of the rank that arrived last, the least any rank
// waited in it. Prints the median and 90th percentile over K all-reduces.
//   small_allreduce N... [--iters K]
#include <torch/torch.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "distributed/distributed.hpp"
#include "run_forked.hpp"

namespace {

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * double(v.size())))];
}

// One rank: K of each, after a few to warm up; writes its times
// (microseconds, "tree ring" a line) to `path`.
int rank_main(int rank, int world, int port, int iters, const std::string& path) {
  gantry::DistEnv env;
  env.rank = rank;
  env.world_size = world;
  env.master_port = port;
  gantry::ProcessGroup pg(env, std::chrono::seconds(120));
  auto gloo = pg.group();
  torch::Tensor t = torch::zeros({3}, torch::kFloat64);
  std::ofstream out(path);
  for (int i = 0; i < iters + 5; ++i) {
    t.fill_(rank);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    auto a = std::chrono::steady_clock::now();
    pg.allreduce_sum(t);
    auto b = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::vector<torch::Tensor> v{t};
    auto c = std::chrono::steady_clock::now();
    gloo->allreduce(v)->wait();
    auto d = std::chrono::steady_clock::now();
    if (i < 5) continue;
    out << std::chrono::duration<double, std::micro>(b - a).count() << ' '
        << std::chrono::duration<double, std::micro>(d - c).count() << '\n';
  }
  out.close();
  pg.barrier();
  return out ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes;
  int iters = 200;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--iters") == 0 && i + 1 < argc)
      iters = std::atoi(argv[++i]);
    else
      sizes.push_back(std::atoi(argv[i]));
  }
  if (sizes.empty()) sizes = {2, 8, 32};
  std::printf(
      "| ranks | gantry (recursive doubling) median us | p90 us | Gloo ring median us | p90 us | ring / tree |\n"
      "|---|---|---|---|---|---|\n");
  char dir_template[] = "/tmp/gantry-small-allreduce-XXXXXX";
  const std::string dir = ::mkdtemp(dir_template);
  for (const int world : sizes) {
    const int port = gantry::free_local_port();
    bool ok = gantry::test::run_forked(
        world,
        [&](int r) {
          if (rank_main(r, world, port, iters, dir + "/" + std::to_string(r)) != 0)
            throw std::runtime_error("its all-reduces failed");
        },
        "rank");
    // Per all-reduce, the least any rank waited in it: the last to arrive's time.
    std::vector<double> tree(size_t(iters), 1e300), ring(size_t(iters), 1e300);
    for (int r = 0; r < world && ok; ++r) {
      std::ifstream in(dir + "/" + std::to_string(r));
      for (int i = 0; i < iters; ++i) {
        double a = 0, b = 0;
        ok = ok && static_cast<bool>(in >> a >> b);
        tree[size_t(i)] = std::min(tree[size_t(i)], a);
        ring[size_t(i)] = std::min(ring[size_t(i)], b);
      }
      std::remove((dir + "/" + std::to_string(r)).c_str());
    }
    if (!ok) {
      std::printf("| %d | failed (see the ranks' lines above) |\n", world);
      continue;
    }
    const double tm = percentile(tree, 0.5), rm = percentile(ring, 0.5);
    std::printf("| %d | %.0f | %.0f | %.0f | %.0f | %.1fx |\n", world, tm, percentile(tree, 0.9), rm,
                percentile(ring, 0.9), rm / std::max(1.0, tm));
    std::fflush(stdout);
  }
  ::rmdir(dir.c_str());
  return 0;
}
