// A monitor client that says Hello and then never reads: the worst client a
// run can have. bench/run_stalled_client.sh measures that training does not
// slow down because of it.
//   stall_client PORT TOKEN SECONDS
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "wire/message.hpp"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: stall_client PORT TOKEN SECONDS\n";
    return 2;
  }
  namespace asio = boost::asio;
  asio::io_context ioc;
  boost::beast::websocket::stream<asio::ip::tcp::socket> ws(ioc);
  ws.next_layer().connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(std::atoi(argv[1]))});
  ws.handshake("127.0.0.1", "/");
  ws.binary(true);
  const std::string hello = gantry::wire::encode({0, gantry::wire::Hello{gantry::wire::kProtocolVersion, argv[2], 0}});
  ws.write(asio::buffer(hello));
  std::this_thread::sleep_for(std::chrono::seconds(std::atoi(argv[3])));  // never read
  return 0;
}
