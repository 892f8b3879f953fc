// A plugin whose constructor throws.
#include <stdexcept>

#include <gantry/gantry.hpp>

class Throws : public gantry::System {
 public:
  explicit Throws(const gantry::Params&) { throw std::runtime_error("cannot build the model"); }
  std::vector<gantry::NamedModule> modules() override { return {}; }
  torch::Tensor forward(const torch::Tensor& x) override { return x; }
  torch::Tensor sample_input(int64_t) override { return {}; }
  std::vector<gantry::NamedOptimizer> configure_optimizers() override { return {}; }
  void training_step(const gantry::Batch&, gantry::StepContext&) override {}
};

GANTRY_PLUGIN(Throws, "throws", "1.0.0", "test: the constructor throws")
