// An exponential moving average of module weights (ema.decay, ema.modules):
// a shadow copy of each chosen module's parameters and buffers, updated on
// every rank after every batch (replicas are identical, so no communication),
// kept in the checkpoint's trainer_state as "ema.<module>.<name>", and swapped
// into the modules while samples are drawn (the grids, `gantry sample`).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "gantry/core_export.hpp"
#include "gantry/system.hpp"

namespace gantry {

class GANTRY_CORE_EXPORT EmaWeights {
 public:
  /// The shadows start as copies of the modules' weights, or from `saved`
  /// (a checkpoint's trainer_state) where it holds them. Throws ConfigError
  /// for a name in ema.modules that modules() lacks (`where`: its origin).
  EmaWeights(const EmaOptions& options, const std::vector<NamedModule>& modules,
             const std::map<std::string, torch::Tensor>& saved, const std::string& where);

  /// shadow = d * shadow + (1 - d) * weight, buffers copied, after the
  /// batch that made `step` (1 for the first): d = ema.decay, or with
  /// ema.warmup the usual min(decay, (1 + t) / (10 + t)) for the t = step - 1
  /// earlier updates (a function of the step: a resume continues it exactly).
  void update(int64_t step);
  /// The d of the update after `step`'s batch.
  double decay_at(int64_t step) const;
  double decay() const { return decay_; }
  bool warmup() const { return warmup_; }
  /// Exchanges the weights and the shadows (call twice to undo).
  void swap();
  /// The shadows in the modules while it lives (null: nothing swapped).
  class Swapped {
   public:
    explicit Swapped(EmaWeights* ema) : ema_(ema) {
      if (ema_) ema_->swap();
    }
    ~Swapped() {
      if (ema_) ema_->swap();
    }
    Swapped(const Swapped&) = delete;
    Swapped& operator=(const Swapped&) = delete;

   private:
    EmaWeights* ema_;
  };
  /// The shadows by trainer_state key (sharing their storage).
  const std::map<std::string, torch::Tensor>& state() const { return by_key_; }

  static constexpr const char* kPrefix = "ema.";

 private:
  double decay_;
  bool warmup_;
  std::vector<torch::Tensor> params_, param_shadows_, buffers_, buffer_shadows_;
  std::map<std::string, torch::Tensor> by_key_;
};

/// Copies the EMA shadows in a checkpoint's trainer_state into `modules`
/// (for `gantry sample`). Returns how many tensors it copied (0: none saved).
GANTRY_CORE_EXPORT size_t load_ema_into(const std::map<std::string, torch::Tensor>& saved,
                                        const std::vector<NamedModule>& modules);

}  // namespace gantry
