// Every rank (each rank's RNG state is gathered into the file): a checkpoint
// every checkpoint.every_n_steps and at the end; rank 0 writes it atomically,
// streams a "checkpoint" event (path relative to the run directory) and keeps
// the newest checkpoint.keep_last.
#include <cstdio>
#include <filesystem>

#include "train/callback.hpp"
#include "train/run_outputs.hpp"

namespace fs = std::filesystem;

namespace gantry {

namespace {

class CheckpointCallback final : public Callback {
 public:
  void on_checkpoint_step(FitState& fit) override { save(fit, false); }
  void on_fit_end(FitState& fit) override { save(fit, true); }

 private:
  static void save(FitState& fit, bool final) {
    const std::vector<torch::Tensor> rng = fit.accel.gather_rng_states();
    const std::vector<torch::Tensor> cuda_rng = fit.accel.gather_cuda_rng_states();
    if (!fit.out) return;
    for (auto& [key, t] : fit.model.plugin_state(fit.state.global_step))
      fit.state.extra[key] = t;  // the plugin's extra_state() (ABI 1.1)
    char name[64];
    std::snprintf(name, sizeof name, "step_%07ld.ckpt", long(fit.state.global_step));
    const std::string path = (fs::path(fit.run_dir) / "checkpoints" / name).string();
    if (final && path == fit.last_checkpoint) return;
    const auto& manifest = fit.model.system().manifest();
    save_checkpoint(path, fit.model.modules(), fit.model.optimizers(), fit.state,
                    {manifest.name, manifest.version, fit.cfg().to_yaml(), 0}, rng, cuda_rng);
    fit.last_checkpoint = path;
    fit.out->event("checkpoint", fit.state.global_step, (fs::path("checkpoints") / name).string());
    prune_checkpoints((fs::path(fit.run_dir) / "checkpoints").string(), fit.cfg().checkpoint.keep_last);
  }
};

}  // namespace

std::unique_ptr<Callback> checkpoint_callback() { return std::make_unique<CheckpointCallback>(); }

}  // namespace gantry
