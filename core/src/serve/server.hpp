// gantry serve's HTTP side (Boost.Beast), without LibTorch: the routes'
// server (server.cpp: the model behind them), one connection's reading and
// writing (connection.cpp).
//
// Threads: one I/O thread runs every connection (asynchronous: a slow or
// silent client holds only its own socket, and a timeout closes it); a pool
// parses bodies and encodes answers; the batcher's inference threads run
// the model and call back into the pool. No thread waits for another
// request's answer. A request not answered within --request-timeout-ms is
// 504 (and skipped by the batcher if not yet computed).
#pragma once

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/http.hpp>
#include <functional>
#include <memory>
#include <string>

#include "gantry/engine.hpp"
#include "serve/metrics.hpp"

namespace gantry::serve {

using Request = boost::beast::http::request<boost::beast::http::string_body>;
using Response = boost::beast::http::response<boost::beast::http::string_body>;
/// How a request is answered: once, from any thread (the pool's, an
/// inference thread's, or the timeout's).
using Reply = std::function<void(Response)>;

Response text_response(int status, std::string body, const std::string& type);
/// {"error": "..."}; a 503 says Retry-After.
Response error_response(int status, const std::string& what);

class Server {
 public:
  explicit Server(const engine::ServeOptions& options);
  ~Server();

  /// Loads the checkpoint options.checkpoint means (printing which and why)
  /// and starts the batcher.
  void load();
  /// Runs on the pool. Answers through `reply`, now or when the model has;
  /// throws what it refuses (serve::HttpError: its status).
  void handle(const Request& req, const std::string& path, const std::string& query, const Reply& reply,
              const std::shared_ptr<std::atomic<bool>>& answered);
  /// Calls make() and replies with its answer, or with the error it threw:
  /// a client's mistake is its 4xx, anything else a 500 (and a line on stderr).
  static void reply_with(const Reply& reply, const std::function<Response()>& make);
  /// --watch, until a stop is requested.
  void watch();
  /// Answers what is queued, then the inference threads and the pool end.
  void drain();
  int64_t queue_depth();
  /// The served model's line for the startup message.
  std::string describe();

  const engine::ServeOptions& o;
  Metrics metrics;
  boost::asio::thread_pool pool;
  std::atomic<bool> ready{false};
  std::atomic<int> in_flight{0};  ///< requests read and not yet answered (written)

 private:
  struct Model;  // the model slot and the batcher (server.cpp: LibTorch's side)
  std::unique_ptr<Model> model_;
};

/// Reads requests from `socket` one after another (keep-alive; pipelined
/// requests are answered in order) and hands each to the server's pool.
void start_connection(boost::asio::ip::tcp::socket socket, Server& server);

}  // namespace gantry::serve
