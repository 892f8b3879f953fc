#include "train/run_outputs.hpp"

#include "runtime/crash.hpp"

#include <torch/torch.h>

#include <cstdio>
#include <filesystem>

#include "io/files.hpp"
#include "data/image_grid.hpp"
#include "io/clock.hpp"

namespace fs = std::filesystem;

namespace gantry {

RunOutputs::RunOutputs(const FitState& fit, int64_t batch_size_all_ranks)
    : model_(fit.model),
      run_dir_(fit.run_dir),
      metrics_((fs::path(fit.run_dir) / "metrics.csv").string()),
      stream_(fit.run_dir),
      progress_(Progress::parse_mode(fit.cfg().trainer.progress, stdout), fit.total_steps, fit.per_epoch,
                batch_size_all_ranks) {
  const ExperimentConfig& cfg = fit.cfg();
  crash_log_to(stream_.log_fd(), stream_.seq_address());  // a crash's `failed` record goes to this log
  if (fit.state.global_step > 0) metrics_.truncate_after(fit.state.global_step);  // resumed
  if (cfg.monitor.enabled) {
    const std::string line =
        stream_.serve(cfg.monitor.host, static_cast<int>(cfg.monitor.port), cfg.monitor.token, cfg.name);
    write_file_atomic((fs::path(run_dir_) / "monitor.txt").string(), line + "\n");
    std::printf("monitor: %s\n", line.c_str());
    std::fflush(stdout);
  }
  const auto& manifest = model_.system().manifest();
  wire::RunInfo info;
  info.name = cfg.name;
  info.plugin = manifest.name;
  info.plugin_version = manifest.version;
  info.manifest = manifest.summary();
  info.config_yaml = cfg.to_yaml();
  info.world_size = static_cast<uint32_t>(fit.accel.dist().world_size);
  info.num_nodes = static_cast<uint32_t>(fit.accel.dist().num_nodes);
  info.start_time = unix_time();
  info.total_steps = fit.total_steps;
  stream_.run_info(std::move(info));
  if (fit.state.global_step > 0)  // clients drop points after this step that came before it
    stream_.event("resumed", fit.state.global_step, unix_time(), "resumed from " + cfg.trainer.resume);
}

RunOutputs::~RunOutputs() { crash_log_to(-1, nullptr); }

void RunOutputs::scalars(int64_t step, int64_t epoch, const Values& values) {
  metrics_.write(step, epoch, unix_time(), values);
  stream_.scalars(step, unix_time(), values);
}

void RunOutputs::image(const std::string& tag, int64_t step, const torch::Tensor& images, double low, double high) {
  if (low > high) {
    low = model_.spec().low;
    high = model_.spec().high;
  }
  const Image8 grid = make_grid(images, 8, 2, low, high);
  char name[64];
  std::snprintf(name, sizeof name, "_%07ld.png", long(step));
  const std::string png = encode_png(grid);
  write_file_atomic((fs::path(run_dir_) / "images" / (tag + name)).string(), png);
  stream_.image(tag, step, unix_time(), png, grid.width, grid.height, grid.channels);
}

void RunOutputs::event(const std::string& kind, int64_t step, const std::string& text) {
  stream_.event(kind, step, unix_time(), text);
}

void RunOutputs::flush() {
  metrics_.flush();
  stream_.flush();
}

}  // namespace gantry
