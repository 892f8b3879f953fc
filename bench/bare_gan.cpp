// The reference: Lightning's basic GAN as a bare LibTorch loop, no framework,
// written the way the PyTorch examples write it. Same model, data, optimizers
// and batch as `gantry train configs/gan_fashion_mnist.yaml`.
//
//   bare_gan [--steps N] [--warmup W] [--batch B] [--threads T] [--inputs]
// Prints one line: "steps_per_s X" measured over the steps after the warm-up.
// --inputs backpropagates the G loss into G's parameters only (as gantry's
// ctx.optimize does); without it the G step also computes D's weight gradients,
// as the tutorials' loss.backward() does.
#include <torch/torch.h>

#include <chrono>
#include <cstring>
#include <iostream>

#include "data/idx_dataset.hpp"

namespace nn = torch::nn;

int main(int argc, char** argv) {
  int64_t steps = 600, warmup = 100, batch = 64, threads = 1;
  bool inputs = false;
  for (int i = 1; i < argc; ++i) {
    auto next = [&] { return std::atoll(argv[++i]); };
    if (!std::strcmp(argv[i], "--steps"))
      steps = next();
    else if (!std::strcmp(argv[i], "--warmup"))
      warmup = next();
    else if (!std::strcmp(argv[i], "--batch"))
      batch = next();
    else if (!std::strcmp(argv[i], "--threads"))
      threads = next();
    else if (!std::strcmp(argv[i], "--inputs"))
      inputs = true;
  }
  at::set_num_threads(static_cast<int>(threads));
  torch::manual_seed(42);

  const auto raw = gantry::read_idx("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
  const auto data = raw.to(torch::kFloat32).div_(127.5).sub_(1).view({-1, 1, 28, 28});

  nn::Sequential g;
  const int64_t widths[] = {100, 128, 256, 512, 1024};
  for (int i = 0; i < 4; ++i) {
    g->push_back(nn::Linear(widths[i], widths[i + 1]));
    if (i > 0) g->push_back(nn::BatchNorm1d(nn::BatchNorm1dOptions(widths[i + 1]).eps(0.8)));
    g->push_back(nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.2).inplace(true)));
  }
  g->push_back(nn::Linear(1024, 784));
  g->push_back(nn::Tanh());
  nn::Sequential d;
  d->push_back(nn::Linear(784, 512));
  d->push_back(nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.2).inplace(true)));
  d->push_back(nn::Linear(512, 256));
  d->push_back(nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.2).inplace(true)));
  d->push_back(nn::Linear(256, 1));
  auto adam = [](nn::Module& m) {
    return torch::optim::Adam(m.parameters(), torch::optim::AdamOptions(2e-4).betas({0.5, 0.999}));
  };
  auto opt_g = adam(*g), opt_d = adam(*d);
  const auto g_params = g->parameters();

  const int64_t n = data.size(0), per_epoch = (n + batch - 1) / batch;
  torch::Tensor perm;
  std::chrono::steady_clock::time_point t0;
  for (int64_t step = 0; step < steps; ++step) {
    if (step == warmup) t0 = std::chrono::steady_clock::now();
    const int64_t b = step % per_epoch;
    if (b == 0) perm = torch::randperm(n);
    const auto imgs = data.index_select(0, perm.slice(0, b * batch, std::min(n, (b + 1) * batch)));
    const auto z = torch::randn({imgs.size(0), 100});
    const auto valid = torch::ones({imgs.size(0), 1}), fake = torch::zeros({imgs.size(0), 1});

    const auto gen = g->forward(z).view({-1, 1, 28, 28});
    const auto g_loss = torch::binary_cross_entropy_with_logits(d->forward(gen.flatten(1)), valid);
    opt_g.zero_grad();
    if (inputs)
      g_loss.backward({}, c10::nullopt, false, g_params);
    else
      g_loss.backward();
    opt_g.step();

    const auto real_loss = torch::binary_cross_entropy_with_logits(d->forward(imgs.flatten(1)), valid);
    const auto fake_loss = torch::binary_cross_entropy_with_logits(d->forward(gen.detach().flatten(1)), fake);
    const auto d_loss = (real_loss + fake_loss) / 2;
    opt_d.zero_grad();
    d_loss.backward();
    opt_d.step();
    if (step % 50 == 0) (void)(g_loss.item<double>() + d_loss.item<double>());  // as a logger would
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "steps_per_s " << double(steps - warmup) / s << "\n";
}
