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

  /// shadow = decay * shadow + (1 - decay) * weight; buffers copied.
  void update();
  /// Exchanges the weights and the shadows (call twice to undo).
  void swap();
  /// The shadows by trainer_state key (sharing their storage).
  const std::map<std::string, torch::Tensor>& state() const { return by_key_; }

  static constexpr const char* kPrefix = "ema.";

 private:
  double decay_;
  std::vector<torch::Tensor> params_, param_shadows_, buffers_, buffer_shadows_;
  std::map<std::string, torch::Tensor> by_key_;
};

/// Copies the EMA shadows in a checkpoint's trainer_state into `modules`
/// (for `gantry sample`). Returns how many tensors it copied (0: none saved).
GANTRY_CORE_EXPORT size_t load_ema_into(const std::map<std::string, torch::Tensor>& saved,
                                        const std::vector<NamedModule>& modules);

}  // namespace gantry
