// `gantry serve`: a trained system behind HTTP, noise in, images out
// (docs/serve.md). The lifecycle: check the options, load the checkpoint,
// listen, run the I/O thread (and --watch's), and at SIGTERM/SIGINT stop
// accepting, answer what is queued and in flight, exit 0.
//
// The room (core/src/serve/): options.cpp (the numbers, declared once),
// parse (what a client sends, without LibTorch; fuzzed), metrics
// (/metrics), batcher (dynamic batching), model (a loaded checkpoint, its
// encodings, the slot --watch swaps), swap (--watch), server (the routes),
// connection (one socket's reads and writes).
#include <boost/asio.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "gantry/engine.hpp"
#include "gantry/errors.hpp"
#include "runtime/runtime.hpp"
#include "serve/server.hpp"

namespace gantry::engine {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

int serve(const ServeOptions& o) {
  check_serve_options(o);
  std::error_code fec;
  if (o.watch && !std::filesystem::is_directory(o.checkpoint, fec))
    throw Error("serve: --watch needs a run or experiment directory, not the checkpoint " + o.checkpoint);
  install_stop_signals();
  serve::Server server(o);
  server.load();

  asio::io_context ioc;
  tcp::acceptor acceptor(ioc);
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(o.host, ec);
  if (ec) throw Error("serve: --host " + o.host + " is not an IP address");
  const tcp::endpoint ep(address, static_cast<unsigned short>(o.port));
  acceptor.open(ep.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(ep, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw Error("serve: cannot listen on " + o.host + ":" + std::to_string(o.port) + ": " + ec.message());
  const int port = acceptor.local_endpoint().port();
  std::function<void()> accept = [&] {
    acceptor.async_accept([&](boost::system::error_code e, tcp::socket s) {
      if (e) return;
      s.set_option(tcp::no_delay(true), e);
      serve::start_connection(std::move(s), server);
      accept();
    });
  };
  accept();
  server.ready = true;
  std::printf("serving %s on http://%s:%d (max batch %ld, max wait %ld ms%s%s)\n", server.describe().c_str(),
              o.host.c_str(), port, long(o.max_batch), long(o.max_wait_ms),
              o.token.empty() ? "" : ", bearer token required", o.watch ? ", watching for newer checkpoints" : "");
  std::fflush(stdout);
  // The I/O thread; the main thread watches for SIGTERM/SIGINT. The guard
  // keeps run() going while a request is answered off the I/O thread (its
  // write is posted back later) after the acceptor closed.
  auto work = asio::make_work_guard(ioc);
  std::thread io([&] { ioc.run(); });
  std::thread watcher;
  if (o.watch) watcher = std::thread([&] { server.watch(); });
  while (!stop_requested()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // Stop accepting; answer every request already read (the batcher runs
  // until they are), then stop the batcher, the pool and the I/O thread.
  // Keep-alive connections are closed after their next answer.
  asio::post(ioc, [&] {
    boost::system::error_code ignored;
    acceptor.close(ignored);
  });
  if (watcher.joinable()) watcher.join();
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(o.timeout_s);
  while (server.in_flight.load() > 0 && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  server.drain();
  work.reset();
  ioc.stop();
  io.join();
  std::printf("serve: stopped by signal %d; %s\n", stop_requested(),
              server.in_flight.load() == 0 ? "every request answered" : "some requests were not answered in time");
  std::fflush(stdout);
  return 0;
}

}  // namespace gantry::engine
