// The machine's limit for this GAN: the matrix products of one training step
// (Lightning's basic GAN, D frozen during the G step, gantry's and the bare
// loop's schedule), counted, then timed alone through LibTorch's BLAS at the
// same shapes. Prints FLOPs per step, the GEMM rate and the matmul-only floor
// (the steps/s a loop would reach if everything but the matmuls took no time).
//   gemm_rate [--batch B] [--threads T] [--seconds S]
#include <torch/torch.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "runtime/runtime.hpp"

namespace {

struct Mm {
  int64_t m, k, n;  // (m x k) . (k x n)
};

// One Linear layer in -> out at batch b: its forward, and what backward needs.
void linear(std::vector<Mm>& out, int64_t b, int64_t in, int64_t o, bool fwd, bool input_grad, bool weight_grad) {
  if (fwd) out.push_back({b, in, o});
  if (input_grad) out.push_back({b, o, in});
  if (weight_grad) out.push_back({o, b, in});
}

std::vector<Mm> step_products(int64_t b) {
  const std::vector<int64_t> g = {100, 128, 256, 512, 1024, 784};
  const std::vector<int64_t> d = {784, 512, 256, 1};
  std::vector<Mm> mm;
  // G step: G forward, D forward on the fakes, backward through D into its
  // input only (D is frozen), backward through G (weights, and inputs except z).
  for (size_t i = 0; i + 1 < g.size(); ++i) linear(mm, b, g[i], g[i + 1], true, false, false);
  for (size_t i = 0; i + 1 < d.size(); ++i) linear(mm, b, d[i], d[i + 1], true, true, false);
  for (size_t i = 0; i + 1 < g.size(); ++i) linear(mm, b, g[i], g[i + 1], false, i > 0, true);
  // D step on real and on (detached) fake images: forward, backward into the
  // weights and into the inputs of every layer but the first.
  for (int half = 0; half < 2; ++half)
    for (size_t i = 0; i + 1 < d.size(); ++i) linear(mm, b, d[i], d[i + 1], true, i > 0, true);
  return mm;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t batch = 64, threads = 1;
  double seconds = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--batch"))
      batch = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--threads"))
      threads = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--seconds"))
      seconds = std::atof(argv[i + 1]);
  }
  at::set_num_threads(static_cast<int>(threads));
  torch::NoGradGuard no_grad;
  const auto products = step_products(batch);
  double flop = 0;
  std::vector<std::array<torch::Tensor, 3>> ops;
  for (const auto& p : products) {
    flop += 2.0 * p.m * p.k * p.n;
    ops.push_back({torch::randn({p.m, p.k}), torch::randn({p.k, p.n}), torch::empty({p.m, p.n})});
  }
  auto one_step = [&] {
    for (auto& o : ops) torch::mm_out(o[2], o[0], o[1]);
  };
  for (int i = 0; i < 20; ++i) one_step();  // warm up caches and threads
  int64_t n = 0;
  const auto t0 = std::chrono::steady_clock::now();
  double elapsed = 0;
  while (elapsed < seconds) {
    one_step();
    ++n;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const double rate = flop * n / elapsed;
  std::printf("flop_per_step %.0f gflop_per_s %.2f floor_steps_per_s %.2f blas %s\n", flop, rate / 1e9, rate / flop,
              gantry::detect_blas().name.c_str());
}
