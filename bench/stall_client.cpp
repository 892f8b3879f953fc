// Misbehaving monitor clients, for bench/run_stalled_client.sh:
//   stall_client PORT TOKEN SECONDS           says Hello, then never reads (the worst reader)
//   stall_client PORT TOKEN SECONDS churn N   N handshakes a second: connect, Hello, read
//                                             the Welcome, close; again (a reconnect storm)
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <thread>

#include "wire/message.hpp"

namespace asio = boost::asio;
using Ws = boost::beast::websocket::stream<asio::ip::tcp::socket>;

void connect_and_hello(Ws& ws, int port, const std::string& token) {
  ws.next_layer().connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
  ws.handshake("127.0.0.1", "/");
  ws.binary(true);
  const std::string hello = gantry::wire::encode({0, gantry::wire::Hello{gantry::wire::kProtocolVersion, token, 0}});
  ws.write(asio::buffer(hello));
}

std::atomic<bool> g_stop{false};
extern "C" void on_term(int) { g_stop = true; }

int main(int argc, char** argv) {
  if (argc != 4 && !(argc == 6 && std::strcmp(argv[4], "churn") == 0)) {
    std::cerr << "usage: stall_client PORT TOKEN SECONDS [churn N]\n";
    return 2;
  }
  const int port = std::atoi(argv[1]);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(std::atoi(argv[3]));
  asio::io_context ioc;
  if (argc == 4) {
    Ws ws(ioc);
    connect_and_hello(ws, port, argv[2]);
    std::this_thread::sleep_for(end - std::chrono::steady_clock::now());  // never read
    return 0;
  }
  const auto period = std::chrono::duration<double>(1.0 / std::atof(argv[5]));
  long ok = 0, refused = 0;
  std::signal(SIGTERM, on_term);  // the bench stops it when the run ends: then say how many went through
  const auto start = std::chrono::steady_clock::now();
  for (auto next = start; next < end && !g_stop;
       next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(period)) {
    std::this_thread::sleep_until(next);
    try {
      Ws ws(ioc);
      connect_and_hello(ws, port, argv[2]);
      boost::beast::flat_buffer b;
      ws.read(b);  // Welcome
      ws.close(boost::beast::websocket::close_code::normal);
      ++ok;
    } catch (const std::exception&) {
      ++refused;  // refused by the server's handshake limit, or the run ended
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cerr << "churn: " << ok << " handshakes completed, " << refused << " refused in " << secs << " s\n";
  return 0;
}
