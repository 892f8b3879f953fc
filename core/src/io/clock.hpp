// The wall clock every record carries (metrics.csv, the stream, TensorBoard).
#pragma once

#include <chrono>

namespace gantry {

/// Wall-clock seconds since the Unix epoch.
inline double unix_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace gantry
