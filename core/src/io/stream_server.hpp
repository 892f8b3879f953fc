// The live stream server in rank 0: WebSocket (Boost.Beast) on its own
// thread. A client sends Hello (protocol version, token, last seq); the server
// answers Welcome, sends everything after that seq from the run log
// (backfill), then live messages, with no gap and no duplicate. Each client
// has a bounded queue: scalars and events are kept, image grids are coalesced
// to the newest per tag (counted, reported with an Event "dropped"), and a
// client too far behind is disconnected (it can reconnect and backfill). The
// training thread only posts; a slow or dead client never blocks it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "gantry/core_export.hpp"

namespace gantry {

class GANTRY_CORE_EXPORT StreamServer {
 public:
  /// Listens on host:port (0: a free port) and serves frames of `log_path`,
  /// whose frames up to seq `published` are already written (a resumed run's
  /// log). Throws gantry::Error when it cannot listen.
  StreamServer(const std::string& host, int port, std::string token, std::string log_path, std::string run_name,
               uint64_t published = 0);
  ~StreamServer();
  StreamServer(const StreamServer&) = delete;
  StreamServer& operator=(const StreamServer&) = delete;

  /// The bound port.
  int port() const;
  /// Hands a frame (already appended to the log) to every live client.
  void publish(std::string frame, uint64_t seq, bool coalescable, const std::string& tag);
  /// Clients connected now (tests).
  int clients() const;

  struct Impl;  ///< internal (stream_server.cpp); public so its sessions can name it

 private:
  std::shared_ptr<Impl> impl_;
};

/// A random 128-bit token, hex.
GANTRY_CORE_EXPORT std::string random_token();

}  // namespace gantry
