// A WebSocket client of a run's stream server (docs/protocol.md), on its own
// I/O thread: Hello with the token and the last seq it has, then every frame
// decoded into the inbox. A dropped connection is retried with backoff (0.25 s
// doubling to 5 s) from the last seq received, so nothing is lost or repeated.
// A refusal (close 1008: wrong token, another protocol) is final, and so is
// the server going away after the run's final event.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "source.hpp"

namespace gantry::client {

class StreamClient : public Source {
 public:
  StreamClient(std::string host, uint16_t port, std::string token, uint64_t last_seq = 0);
  ~StreamClient() override;
  StreamClient(const StreamClient&) = delete;
  StreamClient& operator=(const StreamClient&) = delete;

  /// Closes the socket at once, as a network failure would (the client then
  /// reconnects): for tests and for a "reconnect" button.
  void drop_connection();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

/// Follows <dir>/stream.gantrylog, polling every 200 ms on its own thread.
class LogSource : public Source {
 public:
  explicit LogSource(std::string dir, uint64_t last_seq = 0);
  ~LogSource() override;
  LogSource(const LogSource&) = delete;
  LogSource& operator=(const LogSource&) = delete;
  std::string run_dir() const override { return dir_; }

 private:
  std::string dir_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gantry::client
