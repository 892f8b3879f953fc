#include "train/weight_layout.hpp"

namespace gantry {

bool prefers_transposed_weight(int64_t out_features, int64_t in_features) {
  constexpr int64_t kFloatsPer4KiB = 4096 / sizeof(float);
  return in_features % kFloatsPer4KiB == 0 && out_features % kFloatsPer4KiB != 0;
}

std::vector<std::string> transpose_linear_weights(torch::nn::Module& root, const std::string& prefix) {
  std::vector<std::string> done;
  torch::NoGradGuard no_grad;
  for (const auto& item : root.named_modules(prefix)) {
    auto* linear = item.value()->as<torch::nn::Linear>();
    if (!linear) continue;
    torch::Tensor& w = linear->weight;
    if (!w.defined() || w.dim() != 2 || !w.device().is_cpu() || w.scalar_type() != torch::kFloat ||
        !w.is_contiguous() || !prefers_transposed_weight(w.size(0), w.size(1)))
      continue;
    w.set_data(w.t().contiguous().t());
    done.push_back(item.key().empty() ? "weight" : item.key() + ".weight");
  }
  return done;
}

}  // namespace gantry
