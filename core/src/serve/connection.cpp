// One connection of gantry serve: reads requests one after another
// (keep-alive; pipelined requests are answered in order: the next is read
// after the answer is written). A request is handled on the server's pool;
// the I/O thread never waits for the model or a body's parsing. Whoever
// answers first (the handler, the model, the request's timeout) writes.
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <optional>

#include "runtime/runtime.hpp"
#include "serve/server.hpp"

namespace gantry::serve {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct Connection : std::enable_shared_from_this<Connection> {
  Connection(tcp::socket s, Server& srv) : stream(std::move(s)), server(srv), timer(stream.get_executor()) {}

  beast::tcp_stream stream;
  beast::flat_buffer buffer;
  std::optional<http::request_parser<http::string_body>> parser;
  Server& server;
  asio::steady_timer timer;  // the request's timeout (--request-timeout-ms)

  void read() {
    parser.emplace();
    parser->body_limit(server.o.max_body);
    parser->header_limit(16 * 1024);
    stream.expires_after(std::chrono::seconds(server.o.timeout_s));
    http::async_read(stream, buffer, *parser, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == beast::error::timeout ||
          ec == asio::error::connection_reset || ec == asio::error::operation_aborted)
        return self->close();
      if (ec) {  // malformed: a 4xx naming it, then the connection closes (its framing is lost)
        auto res = error_response(ec == http::error::body_limit ? 413 : 400, "malformed request: " + ec.message());
        res.keep_alive(false);
        self->server.metrics.request("other", int(res.result_int()), 0);
        return self->write(std::move(res), true, false);
      }
      self->answer();
    });
  }

  void answer() {
    ++server.in_flight;
    auto req = std::make_shared<Request>(parser->release());
    const std::string target(req->target());
    const size_t q = target.find('?');
    auto path = std::make_shared<std::string>(target.substr(0, q));
    const std::string query = q == std::string::npos ? "" : target.substr(q + 1);
    const auto start = std::chrono::steady_clock::now();
    auto answered = std::make_shared<std::atomic<bool>>(false);
    Reply reply = [self = shared_from_this(), req, path, start, answered](Response res) {
      if (answered->exchange(true)) return;
      const bool keep = req->keep_alive() && !stop_requested();
      res.keep_alive(keep);
      self->server.metrics.request(*path, int(res.result_int()),
                                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      asio::post(self->stream.get_executor(), [self, res = std::move(res), keep]() mutable {
        self->timer.cancel();
        self->write(std::move(res), !keep, true);
      });
    };
    if (server.o.request_timeout_ms > 0) {
      timer.expires_after(std::chrono::milliseconds(server.o.request_timeout_ms));
      timer.async_wait([self = shared_from_this(), reply, answered](beast::error_code ec) {
        if (ec || answered->load()) return;
        ++self->server.metrics.timeouts;
        reply(error_response(504, "no answer within " + std::to_string(self->server.o.request_timeout_ms) +
                                      " ms (--request-timeout-ms; " + std::to_string(self->server.queue_depth()) +
                                      " requests queued)"));
      });
    }
    asio::post(server.pool, [self = shared_from_this(), req, path, query, reply, answered] {
      // handle() replies itself (now, or when the model has); a throw is replied here.
      std::exception_ptr failed;
      try {
        self->server.handle(*req, *path, query, reply, answered);
      } catch (...) {
        failed = std::current_exception();
      }
      if (failed) Server::reply_with(reply, [&]() -> Response { std::rethrow_exception(failed); });
    });
  }

  // `counted`: the answer of a request answer() took (Server::in_flight).
  void write(Response res, bool close_after, bool counted) {
    auto sp = std::make_shared<Response>(std::move(res));
    stream.expires_after(std::chrono::seconds(server.o.timeout_s));
    http::async_write(stream, *sp, [self = shared_from_this(), sp, close_after, counted](beast::error_code ec, size_t) {
      if (counted) --self->server.in_flight;
      if (ec || close_after || stop_requested()) return self->close();
      self->read();
    });
  }

  void close() {
    beast::error_code ec;
    stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  }
};

}  // namespace

void start_connection(tcp::socket socket, Server& server) {
  std::make_shared<Connection>(std::move(socket), server)->read();
}

}  // namespace gantry::serve
