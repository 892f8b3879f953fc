// libFuzzer target: wire::decode must reject any input with WireError, never
// crash, hang or over-allocate. What it accepts is, byte for byte, the layout
// of one minor of protocol 1 (docs/protocol.md#minors: a payload that ends
// where an older minor ended decodes with the later fields' defaults, and
// encode(m, that minor) writes it again), or a payload with bytes after the
// fields this reader knows (a newer writer's appended fields), which
// re-encodes to the known prefix. That re-encoding must then be a fixed point
// (decode(encode(m)) encodes to the same bytes again).
#include <cstdint>
#include <cstdlib>
#include <variant>

#include "message.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace wire = gantry::wire;
  try {
    const wire::Message m = wire::decode(data, size);
    const auto* in = reinterpret_cast<const char*>(data);
    bool a_minors_layout = false;
    for (uint32_t minor = 0; minor <= wire::kProtocolMinor && !a_minors_layout; ++minor) {
      const std::string e = wire::encode(m, minor);
      a_minors_layout = e.size() == size && e.compare(0, size, in, size) == 0;
    }
    const std::string again = wire::encode(m);
    const bool appended_skipped = again.size() < size && again.compare(0, 12, in, 12) == 0 &&
                                  again.compare(16, again.size() - 16, in + 16, again.size() - 16) == 0;
    if (!a_minors_layout && !appended_skipped) std::abort();
    if (wire::encode(wire::decode(again)) != again) std::abort();
  } catch (const wire::WireError&) {
  }
  return 0;
}
