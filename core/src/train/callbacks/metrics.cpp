// Rank 0: a metrics.csv row (kind train) and stream scalars at every log
// step, holding every value logged since the previous row (by training_step
// in those batches, and by log_samples), reduced (the mean unless logged with
// another Reduce); at the end what was logged after the last row joins the
// last step's row; a failed fit (NaN/Inf) keeps the finite values read before it.
// Also rank 0's TensorBoard histograms (trainer.log_histograms_every_n_steps)
// and throughput (trainer.log_throughput).
#include <torch/torch.h>

#include <chrono>
#include <cstdio>

#include "io/clock.hpp"
#if GANTRY_WITH_CUDA
#include "distributed/cuda.hpp"
#endif
#include "train/callback.hpp"
#include "train/model.hpp"
#include "train/run_outputs.hpp"

namespace gantry {

namespace {

class MetricsCallback final : public Callback {
 public:
  void on_log_step(FitState& fit) override { write(fit); }
  void on_fit_end(FitState& fit) override {
    if (!fit.interval.empty()) write(fit);  // the step's training row, if it has one (merged)
    fit.out->flush();
  }
  // A failed fit (a NaN/Inf metric, a dead rank): what was read before it, finite, is kept.
  void on_exception(FitState& fit, const std::exception&) override {
    if (fit.interval.empty()) return;
    try {
      fit.out->scalars(fit.read_step, fit.state.epoch, "train", fit.interval.reduced());
      fit.interval.clear();
      fit.out->flush();
    } catch (const std::exception&) {  // the failure's own line is the one to see
    }
  }

 private:
  static void write(FitState& fit) {
    if (fit.interval.empty()) return;
    fit.out->scalars(fit.state.global_step, fit.state.epoch, "train", fit.interval.reduced());
    fit.interval.clear();
  }
};

// 30 equal buckets between the values' min and max (one when they are
// equal), as TensorBoard's HistogramProto holds them: right edges and counts.
TfEventsWriter::Histogram histogram_of(const torch::Tensor& t) {
  const torch::Tensor x = t.detach().to(torch::kCPU, torch::kFloat64).flatten();
  TfEventsWriter::Histogram h;
  h.num = double(x.numel());
  if (x.numel() == 0) return h;
  h.min = x.min().item<double>();
  h.max = x.max().item<double>();
  h.sum = x.sum().item<double>();
  h.sum_squares = x.pow(2).sum().item<double>();
  constexpr int kBuckets = 30;
  if (!(h.max > h.min)) {
    h.bucket_limit = {h.max};
    h.bucket = {h.num};
    return h;
  }
  const torch::Tensor counts = torch::histc(x, kBuckets, h.min, h.max).contiguous();
  for (int i = 0; i < kBuckets; ++i) {
    h.bucket_limit.push_back(h.min + (h.max - h.min) * double(i + 1) / kBuckets);
    h.bucket.push_back(counts[i].item<double>());
  }
  return h;
}

// Rank 0, every n batches: `weights/<module>.<parameter>` and
// `grads/<module>.<parameter>` (the averaged gradient of the optimizer's step
// in that batch, before clipping; none for an optimizer that did not step,
// e.g. accumulating).
class HistogramsCallback final : public Callback {
 public:
  explicit HistogramsCallback(int64_t every) : every_(every) {}
  void on_batch_start(FitState& fit) override {
    if ((fit.state.global_step + 1) % every_ == 0) fit.model.keep_gradients(true);
  }
  void on_batch_end(FitState& fit) override {
    if (fit.state.global_step % every_ != 0) return;
    auto& tb = fit.out->stream().tensorboard();
    const double now = unix_time();
    for (const auto& [name, p] : fit.model.named_parameters())
      tb.histogram("weights/" + name, histogram_of(p), fit.state.global_step, now);
    for (const auto& [name, g] : fit.model.kept_gradients())
      tb.histogram("grads/" + name, histogram_of(g), fit.state.global_step, now);
    fit.model.keep_gradients(false);
  }

 private:
  int64_t every_;
};

// The peak FLOP/s MFU is measured against: for a GPU in the table, its dense
// bf16 (bf16-mixed) or fp32 (otherwise; LibTorch leaves TF32 off for
// matmuls) rate from the vendor's data sheet; else the rate of a square
// matmul measured here on the run's device, dtype and threads (best of a few,
// ~0.2 s; values that do not touch the training's random streams).
struct Peak {
  double flops_per_s = 0;
  std::string how;
};

Peak peak_flops(torch::Device device, bool bf16) {
#if GANTRY_WITH_CUDA
  if (device.is_cuda()) {
    const std::string name = cuda::device_name(device.index() < 0 ? 0 : device.index());
    struct Row {
      const char* match;
      double bf16, fp32;
    };
    for (const Row& r : {Row{"H200", 989.4e12, 66.9e12}, Row{"H100", 989.4e12, 66.9e12}, Row{"A100", 312e12, 19.5e12}})
      if (name.find(r.match) != std::string::npos)
        return {bf16 ? r.bf16 : r.fp32, name + "'s data-sheet " + (bf16 ? "bf16" : "fp32") + " peak"};
  }
#endif
  const int64_t n = device.is_cuda() ? 4096 : 512;
  const auto options = torch::TensorOptions().device(device).dtype(bf16 ? torch::kBFloat16 : torch::kFloat32);
  const torch::Tensor a = torch::full({n, n}, 0.5, options), b = torch::full({n, n}, 0.25, options);
  (void)a.mm(b)[0][0].item<double>();  // warm-up (and the device's lazy start)
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    int calls = 0;
    torch::Tensor c;
    do {
      c = a.mm(b);
      ++calls;
    } while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(40));
    (void)c[0][0].item<double>();  // waits for the device
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, 2.0 * double(n) * double(n) * double(n) * calls / s);
  }
  char how[160];
  std::snprintf(how, sizeof how, "measured: %ldx%ld %s matmuls on %s", long(n), long(n), bf16 ? "bf16" : "fp32",
                device.str().c_str());
  return {best, how};
}

// Rank 0, trainer.log_throughput: in each metrics row, the throughput of the
// batches since the previous row: samples_per_sec and batches_per_sec of all
// ranks together, and once one batch's FLOPs are known (trainer.
// flops_per_batch, or the profiler's FLOP counter over this run's second
// batch on rank 0: matmuls and convolutions, forward and backward)
// flops_per_sec (all ranks) and mfu (the FLOP rate of one rank over the
// peak of one device). The counted batch is left out of the rate.
class ThroughputCallback final : public Callback {
 public:
  explicit ThroughputCallback(FitState& fit) : flops_(fit.cfg().trainer.flops_per_batch) {}

  void on_fit_start(FitState& fit) override {
    const bool bf16 = fit.cfg().trainer.precision == PrecisionMode::kBf16Mixed;
    peak_ = peak_flops(fit.accel.device(), bf16);
    std::printf("throughput: peak %.3g TFLOP/s per device (%s)%s\n", peak_.flops_per_s / 1e12, peak_.how.c_str(),
                flops_ > 0 ? "" : "; a batch's FLOPs counted on this run's second batch");
    count_at_ = fit.state.global_step + 1;
    restart(fit);
  }
  void on_batch_start(FitState& fit) override {
    if (flops_ > 0 || counter_ || fit.state.global_step != count_at_ || Profile::tracing()) return;
    counter_ = std::make_unique<OpProfiler>(/*flops=*/true, fit.accel.device().is_cuda());
  }
  void on_batch_end(FitState& fit) override {
    if (!counter_) return;
    flops_ = counter_->stop("").flops;
    counter_.reset();
    std::printf("throughput: one batch of rank 0 is %.4g GFLOP (the profiler's FLOP counter, step %ld)\n", flops_ / 1e9,
                long(fit.state.global_step));
    restart(fit);  // the counted batch was slower: the rate starts after it
  }
  void on_log_step(FitState& fit) override {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - since_).count();
    const int64_t batches = fit.state.global_step - step_;
    if (batches <= 0 || !(seconds > 0)) return;
    const double world = fit.accel.dist().world_size;
    fit.interval.add("samples_per_sec", double(batches) * double(fit.batch_size) * world / seconds, Reduce::kLast);
    fit.interval.add("batches_per_sec", double(batches) / seconds, Reduce::kLast);
    if (flops_ > 0) {
      const double per_rank = flops_ * double(batches) / seconds;
      fit.interval.add("flops_per_sec", per_rank * world, Reduce::kLast);
      if (peak_.flops_per_s > 0) fit.interval.add("mfu", per_rank / peak_.flops_per_s, Reduce::kLast);
    }
    restart(fit);
  }

 private:
  void restart(const FitState& fit) {
    since_ = std::chrono::steady_clock::now();
    step_ = fit.state.global_step;
  }

  double flops_;
  Peak peak_;
  int64_t count_at_ = -1, step_ = 0;
  std::chrono::steady_clock::time_point since_;
  std::unique_ptr<OpProfiler> counter_;
};

}  // namespace

std::unique_ptr<Callback> metrics_callback(CallbackSetup& setup) {
  return setup.rank0 ? std::make_unique<MetricsCallback>() : nullptr;
}
std::unique_ptr<Callback> histograms_callback(CallbackSetup& setup) {
  const int64_t every = setup.fit.cfg().trainer.log_histograms_every_n_steps;
  return setup.rank0 && every > 0 ? std::make_unique<HistogramsCallback>(every) : nullptr;
}
std::unique_ptr<Callback> throughput_callback(CallbackSetup& setup) {
  return setup.rank0 && setup.fit.cfg().trainer.log_throughput ? std::make_unique<ThroughputCallback>(setup.fit)
                                                               : nullptr;
}

}  // namespace gantry
