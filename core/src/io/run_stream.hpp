// The run's stream (docs/protocol.md), as rank 0 produces it: every message
// gets the next sequence number and is appended to the run log
// (<run_dir>/stream.gantrylog, replayable after a crash); scalars and images
// also go to TensorBoard event files. The live WebSocket server will serve
// the same messages. No LibTorch.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gantry/core_export.hpp"
#include "io/stream_server.hpp"
#include "io/tfevents.hpp"
#include "wire/message.hpp"
#include "wire/record_log.hpp"

namespace gantry {

class GANTRY_CORE_EXPORT RunStream {
 public:
  /// Opens (or, on resume, continues) the run log and a new TensorBoard file in `run_dir`.
  explicit RunStream(const std::string& run_dir);
  ~RunStream();

  /// Starts the live WebSocket server for this stream; returns the line a
  /// user pastes into the monitor ("gantry-monitor HOST:PORT --token T").
  std::string serve(const std::string& host, int port, const std::string& token, const std::string& run_name);

  void run_info(wire::RunInfo info);
  void scalars(int64_t step, double wall_time, const std::vector<std::pair<std::string, double>>& values);
  void image(const std::string& tag, int64_t step, double wall_time, const std::string& png, int width, int height,
             int channels);
  void rank_status(wire::RankStatus status);
  void event(const std::string& kind, int64_t step, double wall_time, const std::string& text);
  void flush();
  /// The TensorBoard file, for what goes there only (histograms, HParams).
  TfEventsWriter& tensorboard() { return *tb_; }

  /// Sequence number of the last message written (0: none).
  uint64_t last_seq() const { return seq_; }
  /// Where a crash handler appends the run's last record (crash_log_to): the
  /// log's descriptor and the address of the sequence number.
  int log_fd() const { return log_->fd(); }
  const uint64_t* seq_address() const { return &seq_; }
  static constexpr const char* kLogName = "stream.gantrylog";

 private:
  void send(wire::Payload payload);

  std::unique_ptr<wire::RecordWriter> log_;
  std::unique_ptr<TfEventsWriter> tb_;
  std::unique_ptr<StreamServer> server_;
  std::string log_path_;
  uint64_t seq_ = 0;
};

}  // namespace gantry
