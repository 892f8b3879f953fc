// The CUDA path, on a GPU: named *_CUDA and skipped where no CUDA device is
// present (CI); a CPU-only LibTorch's build compiles them but does not list
// them. scripts/device_check.sh runs them on a lent GPU.
#include <torch/torch.h>

#include <cmath>
#include <map>

#include "dist/distributed.hpp"
#include "support.hpp"
#include "train/checkpoint.hpp"
#include "train/trainer.hpp"

using namespace gantry;
using gantry::test::TempDir;

namespace {

const std::string kTiny = gantry::test::source_path("tests/sdk_plugin/tiny.yaml");

// Trains the SDK's linear classifier (SGD, no noise: the step is a function
// of the weights and the batch alone) in-process; returns its final checkpoint.
std::string train_tiny(const TempDir& dir, const std::string& accelerator, int steps,
                       std::vector<std::string> more = {}) {
  std::vector<std::string> o = {"system.plugin=" + gantry::test::plugin_path("tiny"),
                                "trainer.max_steps=" + std::to_string(steps), "trainer.accelerator=" + accelerator,
                                "trainer.threads=1"};
  o.insert(o.end(), more.begin(), more.end());
  const auto cfg = ExperimentConfig::load(kTiny, o);
  const auto data = load_idx_images(cfg.data.path, cfg.data.train_prefix);
  return Trainer(Experiment::build(cfg), dir.path().string()).fit(data).last_checkpoint;
}

// Largest |a - b| over the checkpoints' parameters, relative to max |a|.
double max_rel_diff(const std::string& a, const std::string& b) {
  const auto sa = gantry::test::state_dict_of(a), sb = gantry::test::state_dict_of(b);
  double worst = 0;
  for (const auto& e : sa) {
    const auto x = e.value().toTensor().to(torch::kFloat64), y = sb.at(e.key()).toTensor().to(torch::kFloat64);
    worst = std::max(worst, ((x - y).abs().max() / x.abs().max().clamp_min(1e-12)).item<double>());
  }
  return worst;
}

}  // namespace

// The same 20 SGD steps on the GPU and the CPU: the same weights up to float
// rounding. cuBLAS and the CPU's BLAS sum the 784-long dot products in other
// orders (~1e-7 relative each, fp32; matmuls do not use TF32 unless asked);
// 20 steps of SGD on a linear model do not amplify that beyond 1e-4.
TEST(Cuda, TwentyStepsOnTheGpuEqualTheCpuWithinRounding_CUDA) {
  GANTRY_REQUIRE_CUDA();
  TempDir cpu, gpu;
  const std::string a = train_tiny(cpu, "cpu", 20), b = train_tiny(gpu, "cuda", 20);
  const double d = max_rel_diff(a, b);
  EXPECT_LT(d, 1e-4);
  EXPECT_GT(d, 0.0) << "bit-identical: was the GPU used at all?";
  std::cout << "CPU vs CUDA after 20 steps: max relative difference " << d << "\n";
}

// A checkpoint written on the GPU resumes on the CPU, and one written on the
// CPU resumes on the GPU: 10 + 10 steps match 20 straight within rounding.
TEST(Cuda, CheckpointsMoveBetweenGpuAndCpu_CUDA) {
  GANTRY_REQUIRE_CUDA();
  TempDir straight, gpu_first, cpu_then, cpu_first, gpu_then;
  const std::string all = train_tiny(straight, "cpu", 20);
  const std::string g = train_tiny(gpu_first, "cuda", 10);
  const std::string gc = train_tiny(cpu_then, "cpu", 20, {"trainer.resume=" + g});
  EXPECT_LT(max_rel_diff(all, gc), 1e-4);
  const std::string c = train_tiny(cpu_first, "cpu", 10);
  const std::string cg = train_tiny(gpu_then, "cuda", 20, {"trainer.resume=" + c});
  EXPECT_LT(max_rel_diff(all, cg), 1e-4);
  // The GPU's checkpoint carries its CUDA generator's state.
  const auto bytes = gantry::test::read_text(g);
  const auto rng = torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end()))
                       .toGenericDict()
                       .at("rng_states")
                       .toGenericDict();
  EXPECT_TRUE(rng.contains("torch_cuda"));
}

// A process group of one rank with NCCL for CUDA tensors: all-reduce,
// broadcast and DDP's Reducer over CUDA gradients go through it.
TEST(Cuda, OneGpuNcclProcessGroup_CUDA) {
  GANTRY_REQUIRE_CUDA();
  DistEnv env;
  env.master_port = 29000 + static_cast<int>(::getpid() % 900);
  ProcessGroup pg(env, std::chrono::seconds(60), /*nccl=*/true);
  auto t = torch::arange(4, torch::TensorOptions(torch::kFloat).device(torch::kCUDA));
  pg.allreduce_sum(t);
  EXPECT_TRUE(torch::equal(t.cpu(), torch::arange(4, torch::kFloat)));
  pg.broadcast({t});
  auto w = torch::ones({8, 8}, torch::TensorOptions(torch::kFloat).device(torch::kCUDA).requires_grad(true));
  GradSync sync(pg, {w}, GradSync::Transport::kGloo);
  sync.prepare();
  (w * 3).sum().backward({}, c10::nullopt, false, {w});
  sync.finish();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_TRUE(torch::equal(w.grad().cpu(), torch::full({8, 8}, 3.0f)));  // averaged over one rank
}

// bf16-mixed on the GPU: the GAN's losses are finite and move.
TEST(Cuda, Bf16MixedGanLossesMove_CUDA) {
  GANTRY_REQUIRE_CUDA();
  TempDir dir;
  const auto cfg = ExperimentConfig::load(
      gantry::test::kDemo, {"system.plugin=" + gantry::test::gan_plugin_path(), "trainer.max_steps=60",
                            "trainer.log_every_n_steps=10", "trainer.image_every_n_steps=0",
                            "trainer.progress=none", "trainer.accelerator=cuda", "trainer.precision=bf16-mixed"});
  const auto data = load_idx_images(cfg.data.path, cfg.data.train_prefix);
  Trainer(Experiment::build(cfg), dir.path().string()).fit(data);
  const auto lines = gantry::test::lines_of(gantry::test::read_text(dir / "metrics.csv"));
  ASSERT_EQ(lines.size(), 7u);
  double lo = 1e9, hi = -1e9;
  for (size_t i = 1; i < lines.size(); ++i) {
    const double g = std::stod(gantry::test::split(lines[i], ',').at(3));
    ASSERT_TRUE(std::isfinite(g)) << lines[i];
    lo = std::min(lo, g);
    hi = std::max(hi, g);
  }
  EXPECT_GT(hi - lo, 0.05) << "g_loss did not move";
}
