// The monitor stream's messages and their binary codec (docs/protocol.md).
// No LibTorch: the runner, the GUIs and third-party clients share this.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

namespace gantry::wire {

/// Protocol version in every frame header; a peer refuses another major.
constexpr uint8_t kProtocolVersion = 1;
/// The newest minor of protocol 1 this side speaks (docs/protocol.md#minors):
/// each minor only appended fields. 0: the first text (1.0); 1: RunInfo's
/// total_steps; 2: RankStatus's parts and straggler; 3: its last_pct; 4: its
/// link_ms; 5: Hello's and Welcome's minor, Welcome's run_dir, RunInfo's
/// protocol_minor. A
/// server encodes each client's messages in the layout of the minor its
/// Hello names (none: 1.0), so a reader written to an older text never meets
/// a byte it does not know.
constexpr uint32_t kProtocolMinor = 5;
/// Upper bound of one encoded frame (a PNG grid is ~50 KiB; 64 MiB is generous).
constexpr size_t kMaxFrame = 64u << 20;

/// A malformed, truncated or oversized frame: what() says which field.
class WireError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Client -> server, first message: who it is and what it has already seen.
struct Hello {
  uint32_t protocol_version = kProtocolVersion;
  std::string token;                ///< the run's token (printed by the runner)
  uint64_t last_seq = 0;            ///< the last seq it has (0: none): the server sends from last_seq + 1
  uint32_t minor = kProtocolMinor;  ///< appended (1.5): the minor the client reads; absent: 0 (1.0)
};
/// Server -> client, reply to a good Hello.
struct Welcome {
  uint32_t protocol_version = kProtocolVersion;
  std::string run_name;
  uint64_t next_seq = 1;  ///< the seq of the next message the server will send
  /// Appended (1.5): the minor of the layout every message to this client is
  /// in: the lower of the Hello's and the server's. Absent (a 1.0 client): 0.
  uint32_t minor = kProtocolMinor;
  /// Appended (1.5): the run directory, absolute, on the writer's host: a
  /// client that can read it follows the run when a resumed process serves
  /// it on a new port (its monitor.txt). Absent: "".
  std::string run_dir;
};
/// What the run is.
struct RunInfo {
  std::string name;
  std::string plugin;  ///< manifest name
  std::string plugin_version;
  std::string manifest;     ///< the manifest's one-line summary
  std::string config_yaml;  ///< resolved config
  uint32_t world_size = 1;
  uint32_t num_nodes = 1;
  double start_time = 0;     ///< Unix seconds
  int64_t total_steps = -1;  ///< steps the run will take when known (-1: unknown); appended (1.1)
  /// Appended (1.5): the minor of the writer that wrote the run log's
  /// records; absent (a writer before 1.5): 0.
  uint32_t protocol_minor = kProtocolMinor;
};
/// One scalar of one step.
struct Scalar {
  int64_t step = 0;
  double wall_time = 0;  ///< Unix seconds
  std::string name;
  double value = 0;
};
/// A batch of scalars (usually one metrics row).
struct Scalars {
  std::vector<Scalar> points;
};
/// An image grid as PNG.
struct Image {
  std::string tag;
  int64_t step = 0;
  double wall_time = 0;
  uint32_t width = 0;
  uint32_t height = 0;
  std::string png;  ///< PNG bytes
};
/// One rank's status.
struct RankStatus {
  uint32_t rank = 0;
  std::string host;
  int64_t step = 0;
  double samples_per_s = 0;
  double rss_mib = 0;
  double wall_time = 0;
  // Appended (protocol 1 still; an older writer's frames leave them -1, as
  // unknown): where the rank's time went since its previous status, in ms per
  // step, measured with the host's clock. step = data + compute + comm +
  // optimizer + other; comm is what the rank waited in collectives (the
  // gradient all-reduce after its last gradient, the metrics read and stop
  // agreement, the status gather), so step - comm is what the rank itself
  // spent: its busy time.
  double step_ms = -1;
  double data_ms = -1;       ///< waiting for the next batch (the loader, ctx.next_batch)
  double compute_ms = -1;    ///< the plugin's training_step: forward and backward
  double comm_ms = -1;       ///< waiting in collectives
  double optimizer_ms = -1;  ///< the optimizer steps
  double other_ms = -1;      ///< callbacks: logging, grids, checkpoints
  double cpu_pct = -1;       ///< the process's CPU time / wall time (100: one core busy)
  double gpu_util_pct = -1;  ///< NVML, the rank's GPU (-1: none, or no NVML)
  double gpu_mem_mib = -1;   ///< NVML: memory in use on that GPU
  double gpu_power_w = -1;   ///< NVML: the GPU's power draw
  /// Rank 0 found this rank a straggler (trainer.straggler_factor) at this status.
  bool straggler = false;
  /// Appended after those (optional again): the share, in %, of this rank's
  /// shared-memory gradient exchanges since its previous status at which it
  /// came last, after every other rank, to either of the exchange's two
  /// barriers (-1: none, or not measured).
  double last_pct = -1;
  /// Appended after last_pct (optional): the median round trip, in ms, of
  /// this rank's last 8 heartbeat requests to rank 0's store (~4 s): its
  /// link to rank 0's node (-1: not measured).
  double link_ms = -1;
  /// Busy time (step_ms - comm_ms), -1 when unknown.
  double busy_ms() const { return step_ms < 0 || comm_ms < 0 ? -1 : step_ms - comm_ms; }
};
/// Something that happened: kind is one of checkpoint, warning, nan,
/// requeued, finished, failed, dropped (client queue overflow).
struct Event {
  std::string kind;
  int64_t step = 0;
  double wall_time = 0;
  std::string text;
};

using Payload = std::variant<Hello, Welcome, RunInfo, Scalars, Image, RankStatus, Event>;

/// One message: a sequence number (1, 2, ... per run; 0 for Hello/Welcome) and a payload.
struct Message {
  uint64_t seq = 0;
  Payload payload;
};

/// Encodes one frame: "GW", version, type, seq, payload length, payload, in
/// the layout of `minor` (fields a later minor appended are left out).
std::string encode(const Message& m, uint32_t minor = kProtocolMinor);
/// The frame re-encoded for a reader of `minor` (itself when minor is this side's).
std::string for_minor(const std::string& frame, uint32_t minor);
/// Decodes exactly one frame from `size` bytes; throws WireError on anything
/// malformed (never reads past `size`, never allocates more than kMaxFrame).
Message decode(const void* data, size_t size);
inline Message decode(const std::string& frame) { return decode(frame.data(), frame.size()); }

/// The payload's type name ("Scalars", ...), for logs.
const char* type_name(const Payload& p);

}  // namespace gantry::wire
