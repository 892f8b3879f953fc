// One GPU's utilisation, memory in use and power draw, read through NVML
// (libnvidia-ml.so.1, the driver's), loaded at run time with dlopen: a CPU
// build, or a machine without the driver, needs nothing and reads nothing.
// No LibTorch, no CUDA headers (NVML's few types are declared here, as the
// NVML API reference gives them).
#pragma once

#include <memory>
#include <string>

namespace gantry {

class GpuProbe {
 public:
  /// The GPU at `pci_bus_id` ("00000000:3B:00.0", as CUDA's device
  /// properties give it: it names the same device whatever
  /// CUDA_VISIBLE_DEVICES renumbered). Null, with `why` set, when NVML is
  /// not there or does not know the device.
  static std::unique_ptr<GpuProbe> open(const std::string& pci_bus_id, std::string& why);
  ~GpuProbe();
  GpuProbe(const GpuProbe&) = delete;
  GpuProbe& operator=(const GpuProbe&) = delete;

  struct Reading {
    double util_pct = -1;  ///< the share of the last sample period a kernel ran (NVML's "gpu" rate)
    double mem_mib = -1;   ///< memory in use on the device (every process's)
    double power_w = -1;   ///< the board's power draw
  };
  /// Now; a field NVML cannot give stays -1.
  Reading read() const;

 private:
  struct Api;
  explicit GpuProbe(std::unique_ptr<Api> api);
  std::unique_ptr<Api> api_;
};

}  // namespace gantry
