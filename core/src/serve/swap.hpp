// gantry serve --watch: a newer checkpoint of a run or experiment directory
// is loaded beside the served model (off the request path) and swapped in
// whole between batches, or refused in one line (another input or output
// shape, a file that does not load) while the old one serves on.
#pragma once

#include <cstdint>
#include <string>

#include "serve/metrics.hpp"
#include "serve/model.hpp"

namespace gantry::serve {

/// Looks every `interval_ms` until a stop is requested (runtime's signals).
void watch_for_checkpoints(ModelSlot& slot, Metrics& metrics, const std::string& dir, const std::string& plugin,
                           int64_t interval_ms);

}  // namespace gantry::serve
