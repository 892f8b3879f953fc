#include "optim/ema.hpp"

#include <torch/torch.h>

#include <algorithm>

#include <sstream>

#include "gantry/errors.hpp"

namespace gantry {

EmaWeights::EmaWeights(const EmaOptions& options, const std::vector<NamedModule>& modules,
                       const std::map<std::string, torch::Tensor>& saved, const std::string& where)
    : decay_(options.decay), warmup_(options.warmup) {
  std::vector<std::string> wanted;
  std::stringstream ss(options.modules);
  for (std::string name; std::getline(ss, name, ',');) {
    name.erase(0, name.find_first_not_of(' '));
    name.erase(name.find_last_not_of(' ') + 1);
    if (!name.empty()) wanted.push_back(name);
  }
  std::string names;
  for (const auto& m : modules) names += (names.empty() ? "" : ", ") + m.name;
  for (const auto& w : wanted)
    if (std::none_of(modules.begin(), modules.end(), [&](const NamedModule& m) { return m.name == w; }))
      throw ConfigError(where + ": ema.modules names '" + w +
                        "', which modules() does not return (it returns: " + names + ")");
  torch::NoGradGuard no_grad;
  for (const auto& m : modules) {
    if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), m.name) == wanted.end()) continue;
    auto add = [&](const std::string& key, const torch::Tensor& live, std::vector<torch::Tensor>& lives,
                   std::vector<torch::Tensor>& shadows) {
      torch::Tensor shadow = live.detach().clone();  // the live tensor's layout (trainer.weight_layout)
      const auto it = saved.find(key);
      if (it != saved.end()) shadow.copy_(it->second);
      lives.push_back(live.detach());
      shadows.push_back(shadow);
      by_key_[key] = shadow;
    };
    for (const auto& p : m.module->named_parameters())
      add(kPrefix + m.name + "." + p.key(), p.value(), params_, param_shadows_);
    for (const auto& b : m.module->named_buffers())
      add(kPrefix + m.name + "." + b.key(), b.value(), buffers_, buffer_shadows_);
  }
}

double EmaWeights::decay_at(int64_t step) const {
  if (!warmup_) return decay_;
  const double t = static_cast<double>(std::max<int64_t>(step - 1, 0));
  return std::min(decay_, (1.0 + t) / (10.0 + t));
}

void EmaWeights::update(int64_t step) {
  torch::NoGradGuard no_grad;
  const double d = decay_at(step);
  for (size_t i = 0; i < params_.size(); ++i) param_shadows_[i].lerp_(params_[i], 1.0 - d);
  for (size_t i = 0; i < buffers_.size(); ++i) buffer_shadows_[i].copy_(buffers_[i]);
}

void EmaWeights::swap() {
  torch::NoGradGuard no_grad;
  auto exchange = [](std::vector<torch::Tensor>& a, std::vector<torch::Tensor>& b) {
    for (size_t i = 0; i < a.size(); ++i) {
      const torch::Tensor tmp = a[i].clone();
      a[i].copy_(b[i]);
      b[i].copy_(tmp);
    }
  };
  exchange(params_, param_shadows_);
  exchange(buffers_, buffer_shadows_);
}

size_t load_ema_into(const std::map<std::string, torch::Tensor>& saved, const std::vector<NamedModule>& modules) {
  torch::NoGradGuard no_grad;
  size_t n = 0;
  for (const auto& m : modules) {
    auto copy = [&](const std::string& name, const torch::Tensor& live) {
      const auto it = saved.find(EmaWeights::kPrefix + m.name + "." + name);
      if (it == saved.end()) return;
      live.detach().copy_(it->second);
      ++n;
    };
    for (const auto& p : m.module->named_parameters()) copy(p.key(), p.value());
    for (const auto& b : m.module->named_buffers()) copy(b.key(), b.value());
  }
  return n;
}

}  // namespace gantry
