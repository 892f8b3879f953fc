// Stand-in for a header Debian's libtorch-dev does not ship.
//
// c10d/reducer.hpp (PyTorch DDP's gradient engine, exported by Debian's
// libtorch_cpu) includes this header for two names only. gantry never uses
// distributed autograd; this declares just what reducer.hpp needs so that it
// compiles. CMake adds this folder to the include path only when the LibTorch
// in use lacks the real header (CUDA wheels ship it).
#pragma once

#include <functional>
#include <memory>

#include <ATen/core/Tensor.h>

namespace torch::distributed::autograd {

class DistAutogradContext {
 public:
  using GradCallback = std::function<bool(at::Tensor&)>;
};

using ContextPtr = std::shared_ptr<DistAutogradContext>;

}  // namespace torch::distributed::autograd
