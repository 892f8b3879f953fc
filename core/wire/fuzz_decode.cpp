// libFuzzer target: wire::decode must reject any input with WireError, never
// crash, hang or over-allocate; what it accepts must re-encode to the same bytes.
#include <cstdint>
#include <cstdlib>

#include "message.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const gantry::wire::Message m = gantry::wire::decode(data, size);
    const std::string again = gantry::wire::encode(m);
    if (again.size() != size || again.compare(0, size, reinterpret_cast<const char*>(data), size) != 0) std::abort();
  } catch (const gantry::wire::WireError&) {
  }
  return 0;
}
