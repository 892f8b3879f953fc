// libFuzzer target: wire::decode must reject any input with WireError, never
// crash, hang or over-allocate. What it accepts re-encodes to the same bytes,
// except (docs/protocol.md, compatibility) a payload without a later-appended
// optional field, which re-encodes with the field's default (RunInfo's
// total_steps: 8 bytes; RankStatus's step parts, CPU, GPU and straggler flag:
// 81 bytes, all or none, then last_pct: 8, then link_ms: 8), and a payload
// with bytes after the fields this reader knows (a newer writer's appended
// fields), which re-encodes to the known prefix. That re-encoding must then be
// a fixed point (decode(encode(m)) encodes to the same bytes again).
#include <cstdint>
#include <cstdlib>
#include <variant>

#include "message.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const gantry::wire::Message m = gantry::wire::decode(data, size);
    const std::string again = gantry::wire::encode(m);
    const bool same = again.size() == size && again.compare(0, size, reinterpret_cast<const char*>(data), size) == 0;
    const bool older_run_info = std::holds_alternative<gantry::wire::RunInfo>(m.payload) && again.size() == size + 8 &&
                                again.compare(16, size - 16, reinterpret_cast<const char*>(data) + 16, size - 16) == 0;
    const bool older_rank_status =
        std::holds_alternative<gantry::wire::RankStatus>(m.payload) &&
        (again.size() == size + 97 || again.size() == size + 16 || again.size() == size + 8) &&
        again.compare(16, size - 16, reinterpret_cast<const char*>(data) + 16, size - 16) == 0;
    const auto* in = reinterpret_cast<const char*>(data);
    const bool appended_skipped = again.size() < size && again.compare(0, 12, in, 12) == 0 &&
                                  again.compare(16, again.size() - 16, in + 16, again.size() - 16) == 0;
    if (!same && !older_run_info && !older_rank_status && !appended_skipped) std::abort();
    if (gantry::wire::encode(gantry::wire::decode(again)) != again) std::abort();
  } catch (const gantry::wire::WireError&) {
  }
  return 0;
}
