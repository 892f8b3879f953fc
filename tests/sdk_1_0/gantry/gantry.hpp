// The gantry plugin SDK in one include: System, StepContext, Params and the
// GANTRY_PLUGIN export macro. A plugin includes this and <torch/torch.h>.
#pragma once

#include "gantry/abi.hpp"
#include "gantry/params.hpp"
#include "gantry/system.hpp"
