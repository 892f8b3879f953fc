#include "train/run_outputs.hpp"

#include "runtime/crash.hpp"

#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "files/files.hpp"
#include "data/image_grid.hpp"
#include "io/clock.hpp"

namespace fs = std::filesystem;

namespace gantry {

namespace {

// The trainer_state key of metrics.csv's column order: the names, comma-joined, as bytes.
constexpr const char* kMetricColumnsKey = "metrics.columns";

std::vector<std::string> resumed_columns(const TrainState& state) {
  const auto it = state.extra.find(kMetricColumnsKey);
  if (it == state.extra.end() || it->second.scalar_type() != torch::kUInt8) return {};
  const torch::Tensor bytes = it->second.contiguous();
  const std::string joined(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()), size_t(bytes.numel()));
  return joined.empty() ? std::vector<std::string>{} : split_csv_line(joined);
}

// TensorBoard's HParams of a run: every key the config sets (a sweep's axes,
// even at a point that equals the default) or whose value differs from the
// default (the plugin's system.* keys), but those that say where or how the
// run is shown rather than what it trains; each a number, true/false or text.
std::vector<TfEventsWriter::HParam> hparams_of(const ExperimentConfig& cfg) {
  std::map<std::string, std::string> values;
  for (const ConfigChange& c : config_changes(ExperimentConfig{}, cfg))
    if (c.after != "(unset)") values[c.key] = c.after;
  for (const auto& [key, where] : cfg.origins) {
    if (values.count(key)) continue;
    try {
      values[key] = cfg.value_text(key);
    } catch (const std::exception&) {  // not a single value (a whole section): its keys are listed one by one
    }
  }
  std::vector<TfEventsWriter::HParam> out;
  for (const auto& [k, text] : values) {
    if (k == "name" || k == "trainer.out_dir" || k == "trainer.resume" || k == "trainer.progress" ||
        k.rfind("monitor.", 0) == 0 || k.rfind("slurm.", 0) == 0 || text.empty())
      continue;
    TfEventsWriter::HParam p;
    p.name = k;
    char* end = nullptr;
    const double number = std::strtod(text.c_str(), &end);
    if (text == "true" || text == "false") {
      p.kind = TfEventsWriter::HParam::Kind::kBool;
      p.flag = text == "true";
    } else if (end && *end == '\0') {
      p.kind = TfEventsWriter::HParam::Kind::kNumber;
      p.number = number;
    } else {
      p.text = text;
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

RunOutputs::RunOutputs(const FitState& fit, int64_t batch_size_all_ranks)
    : model_(fit.model),
      run_dir_(fit.run_dir),
      grid_rows_(fit.cfg().trainer.grid_rows),
      metrics_((fs::path(fit.run_dir) / "metrics.csv").string(), resumed_columns(fit.state),
               fit.state.global_step > 0 ? fit.state.global_step : INT64_MAX,  // resumed: its rows after the step go
               fit.state.global_step > 0 && MetricInterval::in_state(fit.state.extra)),  // and a partial row at it
      stream_(fit.run_dir),
      progress_(Progress::parse_mode(fit.cfg().trainer.progress, stdout), fit.total_steps, fit.per_epoch,
                batch_size_all_ranks) {
  const ExperimentConfig& cfg = fit.cfg();
  crash_log_to(stream_.log_fd(), stream_.seq_address());  // a crash's `failed` record goes to this log
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
  // The run in TensorBoard's HParams tab, its scalars the metrics (a sweep's
  // points side by side); a resumed run starts a session of its own there.
  stream_.tensorboard().hparams_start(hparams_of(cfg), "", unix_time());
  if (fit.state.global_step > 0)  // clients drop points after this step that came before it
    stream_.event("resumed", fit.state.global_step, unix_time(), "resumed from " + cfg.trainer.resume);
  if (metrics_.dropped_rows() > 0) {  // resumed from a checkpoint before the run's end: said, not silent
    std::printf(
        "resume: metrics.csv: %ld rows after step %ld (to step %ld) dropped: they were trained from a state this "
        "run no longer continues; it writes its own\n",
        long(metrics_.dropped_rows()), long(fit.state.global_step), long(metrics_.dropped_to_step()));
    std::fflush(stdout);
  }
}

RunOutputs::~RunOutputs() { crash_log_to(-1, nullptr); }

void RunOutputs::scalars(int64_t step, int64_t epoch, const std::string& kind, const Values& values) {
  metrics_.write(step, epoch, unix_time(), kind, values);
  ++rows_;
  for (const auto& [name, v] : values) latest_[name] = {rows_, step, v};
  stream_.scalars(step, unix_time(), values);
}

void RunOutputs::image(const std::string& tag, int64_t step, const torch::Tensor& images, double low, double high) {
  if (low > high) {
    low = model_.spec().low;
    high = model_.spec().high;
  }
  const Image8 grid = make_grid(images, grid_columns(images.size(0), grid_rows_), 2, low, high);
  char name[64];
  std::snprintf(name, sizeof name, "_%07ld.png", long(step));
  const std::string png = encode_png(grid);
  write_file_atomic((fs::path(run_dir_) / "images" / (tag + name)).string(), png);
  stream_.image(tag, step, unix_time(), png, grid.width, grid.height, grid.channels);
}

void RunOutputs::event(const std::string& kind, int64_t step, const std::string& text) {
  stream_.event(kind, step, unix_time(), text);
  // The HParams session's end: a stopped or requeued run goes on later.
  if (kind == "finished" || kind == "failed") stream_.tensorboard().hparams_end(kind == "finished", unix_time());
}

void RunOutputs::flush_metrics(TrainState& state) {
  metrics_.flush();
  std::string joined;
  for (const auto& c : metrics_.columns()) joined += (joined.empty() ? "" : ",") + c;
  if (joined.empty()) return;  // no row yet
  state.extra[kMetricColumnsKey] = torch::from_blob(joined.data(), {int64_t(joined.size())}, torch::kUInt8).clone();
}

void RunOutputs::flush() {
  metrics_.flush();
  stream_.flush();
}

}  // namespace gantry
