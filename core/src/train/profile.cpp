#include "train/profile.hpp"

#include <torch/torch.h>
#include <torch/version.h>

#include <ATen/record_function.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <fstream>

#include <torch/csrc/autograd/profiler_legacy.h>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/autograd/profiler_kineto.h>
#endif

#if GANTRY_WITH_CUDA && __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define GANTRY_NVTX 1
#else
#define GANTRY_NVTX 0
#endif

#include "gantry/errors.hpp"
#include "train/accelerator.hpp"
#include "train/callback_slot.hpp"

namespace gantry {

namespace {

std::atomic<bool> g_tracing{false};

constexpr std::array kPartNames{
    "waiting for data",           "training_step",    "  waiting for data (ctx.next_batch)", "  backward",
    "  gradient all-reduce wait", "  optimizer step", "metrics read + stop agreement",
};
static_assert(kPartNames.size() == Profile::kParts);

constexpr const auto& kSlotNames = kCallbackSlotNames;  // train/callback_slot.hpp

// The plugin's hooks outside training_step (they run inside the callbacks above).
constexpr std::array kHookNames{
    "validation_step", "on_validation_start", "on_validation_end", "log_samples", "sample_input",     "forward",
    "features",        "conditional_input",   "render_samples",    "extra_state", "load_extra_state",
};

constexpr int kSlots = int(kSlotNames.size());
constexpr int kHooks = int(kHookNames.size());

}  // namespace

void Profile::set_tracing(bool on) { g_tracing.store(on, std::memory_order_relaxed); }
bool Profile::tracing() { return g_tracing.load(std::memory_order_relaxed); }

int Profile::rows() { return kParts + kSlots; }

const char* Profile::row_name(int row) {
  if (row < kParts) return kPartNames[row];
  return kSlotNames[row - kParts];
}

Profile::Scope::Scope(Profile* p, int row) : p_(p), row_(row) {
  if (!p_) return;
  start_ = std::chrono::steady_clock::now();
  if (tracing()) {
    std::string name = std::string("gantry: ") + row_name(row);
    range_ = std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE);
    if (range_->isActive()) range_->before(name);
#if GANTRY_NVTX
    nvtxRangePushA(name.c_str());
#endif
  }
}

Profile::Scope::~Scope() {
  if (!p_) return;
  if (range_) {
    range_->end();
#if GANTRY_NVTX
    nvtxRangePop();
#endif
  }
  p_->add(row_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
}

std::string Profile::report(Accelerator& accel, const std::map<std::string, HookTime>& hooks,
                            double fit_seconds) const {
  // Every rank's rows in one [W, R, 2] tensor (calls, seconds), its own slice
  // filled: one all-reduce gathers them all.
  const int world = accel.dist().world_size, rank = accel.dist().rank;
  const int R = rows() + kHooks + 1;  // + the fit's wall time
  torch::Tensor all = torch::zeros({world, R, 2}, torch::kFloat64);
  auto mine = all[rank];
  for (int r = 0; r < rows(); ++r) {
    mine[r][0] = double(calls_[r]);
    mine[r][1] = seconds_[r];
  }
  for (int h = 0; h < kHooks; ++h)
    if (auto it = hooks.find(kHookNames[h]); it != hooks.end()) {
      mine[rows() + h][0] = double(it->second.calls);
      mine[rows() + h][1] = it->second.seconds;
    }
  mine[R - 1][0] = 1;
  mine[R - 1][1] = fit_seconds;
  if (world > 1) accel.allreduce_sum(all);
  if (rank != 0) return "";

  const auto a = all.accessor<double, 3>();
  auto mean = [&](int r) {
    double s = 0;
    for (int w = 0; w < world; ++w) s += a[w][r][1];
    return s / world;
  };
  const double fit = mean(R - 1);
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line,
                "profile (trainer.profiler: simple): %d rank%s, fit %.2f s; calls are rank 0's, times the mean over "
                "the ranks\n",
                world, world == 1 ? "" : "s", fit);
  out += line;
  std::snprintf(line, sizeof line, "  %-38s %8s %10s %10s %7s  %s\n", "part", "calls", "mean ms", "total s", "share",
                world > 1 ? "slowest rank" : "");
  out += line;
  auto row = [&](const std::string& name, double calls, double total, int r) {
    std::string slowest;
    if (world > 1 && r >= 0) {
      int worst = 0;
      for (int w = 1; w < world; ++w)
        if (a[w][r][1] > a[worst][r][1]) worst = w;
      char buf[64];
      std::snprintf(buf, sizeof buf, "rank %d: %.3f s", worst, a[worst][r][1]);
      slowest = buf;
    }
    char mean_ms[32] = "";
    if (calls > 0) std::snprintf(mean_ms, sizeof mean_ms, "%.3f", 1000 * total / calls);
    char calls_text[32] = "";
    if (calls > 0) std::snprintf(calls_text, sizeof calls_text, "%.0f", calls);
    std::snprintf(line, sizeof line, "  %-38s %8s %10s %10.3f %6.1f%%  %s\n", name.c_str(), calls_text, mean_ms, total,
                  fit > 0 ? 100 * total / fit : 0.0, slowest.c_str());
    out += line;
  };
  auto used = [&](int r) {
    for (int w = 0; w < world; ++w)
      if (a[w][r][0] > 0) return true;
    return false;
  };
  double accounted = 0;
  for (int r = 0; r < rows(); ++r) {
    if (r == kSync && used(kTrainingStep)) {  // after the parts inside training_step
      const double inside = mean(kNextBatch) + mean(kBackward) + mean(kAllReduce) + mean(kOptimizer);
      row("  the plugin's own work (the rest)", 0, mean(kTrainingStep) - inside, -1);
    }
    if (!used(r)) continue;
    row(row_name(r), a[0][r][0], mean(r), r);
    if (r != kNextBatch && r != kBackward && r != kAllReduce && r != kOptimizer) accounted += mean(r);
  }
  row("the loop's own work (the rest)", 0, fit - accounted, -1);
  bool any_hook = false;
  for (int h = 0; h < kHooks; ++h) {
    if (!used(rows() + h)) continue;
    if (!any_hook) out += "  plugin hooks, within the callbacks above:\n";
    any_hook = true;
    row(std::string("  ") + kHookNames[h], a[0][rows() + h][0], mean(rows() + h), rows() + h);
  }
  return out;
}

// ---- LibTorch's profiler ----
//
// The legacy profiler (both versions) counts FLOPs and writes 1.13's traces;
// on 2.x a trace is Kineto's. Kineto is not used for the FLOP count: in a
// CUDA build on a machine without a GPU its start-up failed to query the
// devices and, about one run in four, corrupted the heap (SIGABRT in
// Throughput.RowsHoldSamplesFlopsAndMfuOnTwoRanks).

namespace tp = torch::profiler::impl;
namespace ap = torch::autograd::profiler;

struct OpProfiler::Impl {
  bool on = false;
  bool kineto = false;
};

OpProfiler::OpProfiler(bool flops, bool cuda) : impl_(std::make_unique<Impl>()) {
#if TORCH_VERSION_MAJOR >= 2
  if (!flops) {
    const tp::ProfilerConfig config(tp::ProfilerState::KINETO);
    std::set<tp::ActivityType> activities{tp::ActivityType::CPU};
    if (cuda) activities.insert(tp::ActivityType::CUDA);
    ap::prepareProfiler(config, activities);
    ap::enableProfiler(config, activities);
    impl_->kineto = impl_->on = true;
    return;
  }
#endif
  ap::enableProfilerLegacy(tp::ProfilerConfig(tp::ProfilerState::CPU, /*report_input_shapes=*/flops,
                                              /*profile_memory=*/false, /*with_stack=*/false, /*with_flops=*/flops));
  impl_->on = true;
}

OpProfiler::Result OpProfiler::stop(const std::string& path) {
  Result r;
  if (!impl_->on) return r;
  impl_->on = false;
#if TORCH_VERSION_MAJOR >= 2
  if (impl_->kineto) {
    const std::unique_ptr<ap::ProfilerResult> result = ap::disableProfiler();
    for (const auto& e : result->events()) {
      r.flops += double(e.flops());
      ++r.events;
    }
    if (!path.empty()) result->save(path);
    return r;
  }
#endif
  ap::thread_event_lists lists = ap::disableProfilerLegacy();
  std::vector<ap::LegacyEvent*> events;
  for (auto& list : lists)
    for (auto& e : list) {
      events.push_back(&e);
      if (e.kind() == ap::EventKind::PushRange) {
        r.flops += double(e.flops());
        ++r.events;
      }
    }
  if (!path.empty()) {
    std::ofstream f(path);
    ap::writeProfilerEventsToStream(f, events);
    if (!f.flush()) throw Error("cannot write the trace " + path);
  }
  return r;
}

OpProfiler::~OpProfiler() {
  try {
    stop("");
  } catch (...) {  // the fit's own error is the one to see
  }
}

}  // namespace gantry
