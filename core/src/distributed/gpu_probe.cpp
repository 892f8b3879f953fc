#include "distributed/gpu_probe.hpp"

#include <dlfcn.h>

namespace gantry {

namespace {

// From the NVML API reference (stable C ABI since NVML 5).
using nvmlReturn_t = int;  // NVML_SUCCESS = 0
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

}  // namespace

struct GpuProbe::Api {
  void* lib = nullptr;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*by_bus_id)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned int*) = nullptr;
  nvmlDevice_t device = nullptr;
  bool initialised = false;

  ~Api() {
    if (initialised && shutdown) shutdown();
    if (lib) ::dlclose(lib);
  }
  template <class F>
  bool bind(F& f, const char* name) {
    f = reinterpret_cast<F>(::dlsym(lib, name));
    return f != nullptr;
  }
  std::string error(nvmlReturn_t r) const {
    const char* s = error_string ? error_string(r) : nullptr;
    return s ? s : "NVML error " + std::to_string(r);
  }
};

std::unique_ptr<GpuProbe> GpuProbe::open(const std::string& pci_bus_id, std::string& why) {
  auto api = std::make_unique<Api>();
  api->lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!api->lib) {
    const char* e = ::dlerror();
    why = std::string("no NVML (") + (e ? e : "libnvidia-ml.so.1 not found") + ")";
    return nullptr;
  }
  if (!api->bind(api->init, "nvmlInit_v2") || !api->bind(api->shutdown, "nvmlShutdown") ||
      !api->bind(api->by_bus_id, "nvmlDeviceGetHandleByPciBusId_v2") ||
      !api->bind(api->utilization, "nvmlDeviceGetUtilizationRates") ||
      !api->bind(api->memory, "nvmlDeviceGetMemoryInfo") || !api->bind(api->power, "nvmlDeviceGetPowerUsage")) {
    why = "libnvidia-ml.so.1 lacks an NVML function gantry reads (a driver older than NVML 5?)";
    return nullptr;
  }
  api->bind(api->error_string, "nvmlErrorString");
  if (const nvmlReturn_t r = api->init(); r != 0) {
    why = "NVML did not start: " + api->error(r);
    return nullptr;
  }
  api->initialised = true;
  if (const nvmlReturn_t r = api->by_bus_id(pci_bus_id.c_str(), &api->device); r != 0) {
    why = "NVML does not know the GPU at PCI " + pci_bus_id + ": " + api->error(r);
    return nullptr;
  }
  return std::unique_ptr<GpuProbe>(new GpuProbe(std::move(api)));
}

GpuProbe::GpuProbe(std::unique_ptr<Api> api) : api_(std::move(api)) {}
GpuProbe::~GpuProbe() = default;

GpuProbe::Reading GpuProbe::read() const {
  Reading out;
  nvmlUtilization_t u{};
  if (api_->utilization(api_->device, &u) == 0) out.util_pct = u.gpu;
  nvmlMemory_t m{};
  if (api_->memory(api_->device, &m) == 0) out.mem_mib = double(m.used) / (1 << 20);
  unsigned int mw = 0;
  if (api_->power(api_->device, &mw) == 0) out.power_w = mw / 1000.0;
  return out;
}

}  // namespace gantry
