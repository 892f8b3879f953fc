// The live stream with a real training run and a test client (not the GUI):
// a late client gets RunInfo first and the full history, then live data, with
// increasing seq and no gap; a client resuming from a seq gets what follows it;
// a wrong token is rejected.
#include <sys/socket.h>
#include <sys/wait.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <regex>
#include <thread>

#include "io/stream_server.hpp"
#include "strict_wire_1_0.hpp"
#include "support.hpp"
#include "wire/message.hpp"
#include "wire/record_log.hpp"

using namespace gantry;
using gantry::test::TempDir;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;

namespace {

// A minimal synchronous client of the protocol.
class Client {
 public:
  explicit Client(int port) {
    ws_.next_layer().connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
    timeval tv{20, 0};  // a read that waits longer fails the test instead of hanging it
    ::setsockopt(ws_.next_layer().native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ws_.handshake("127.0.0.1", "/");
    ws_.binary(true);
  }
  // `minor`: the layout of the Hello (0: the first text's, which has no minor).
  void hello(const std::string& token, uint64_t last_seq, uint32_t minor = wire::kProtocolMinor) {
    const std::string f = wire::encode({0, wire::Hello{wire::kProtocolVersion, token, last_seq, minor}}, minor);
    ws_.write(asio::buffer(f));
  }
  wire::Message next() { return wire::decode(next_frame()); }
  std::string next_frame() {
    beast::flat_buffer b;
    ws_.read(b);
    return beast::buffers_to_string(b.data());
  }
  websocket::stream<asio::ip::tcp::socket>& ws() { return ws_; }

 private:
  asio::io_context ioc_;
  websocket::stream<asio::ip::tcp::socket> ws_{ioc_};
};

// The demo GAN trained for `steps` steps (a row every 10, a grid every 100)
// with its server's token t0ken, in `dir` (its output in dir/log).
pid_t spawn_served_gan(const TempDir& dir, int steps) {
  return gantry::test::spawn_gantry("train '" + gantry::test::source_path("configs/gan_fashion_mnist.yaml") +
                                        "' trainer.max_steps=" + std::to_string(steps) +
                                        " trainer.log_every_n_steps=10 trainer.image_every_n_steps=100 "
                                        "trainer.threads=1 monitor.token=t0ken",
                                    dir.path(), dir / "log");
}

// The port of a run's server (token t0ken) from its monitor.txt, once its
// metrics.csv has `rows` rows; 0 after 30 s.
int monitor_port(const std::filesystem::path& run, size_t rows) {
  for (int i = 0; i < 600; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const auto csv = gantry::test::read_text((run / "metrics.csv").string());
    if (rows > 0 && gantry::test::lines_of(csv).size() < rows + 1) continue;
    std::smatch m;
    const std::string line = gantry::test::read_text((run / "monitor.txt").string());
    if (std::regex_search(line, m, std::regex(":([0-9]+) --token t0ken"))) return std::stoi(m[1]);
  }
  return 0;
}

}  // namespace

TEST(StreamServer, LateClientGetsFullHistoryThenLiveWithoutGapAndWrongTokenIsRejected) {
  TempDir dir;
  const pid_t pid = spawn_served_gan(dir, 400);
  const auto run = dir.path() / "runs/gan_fashion_mnist/latest";
  const int port = monitor_port(run, 5);  // connect late: after the run has logged 5 rows
  ASSERT_GT(port, 0) << gantry::test::read_text(dir / "log");

  {  // wrong token: closed with a reason
    Client bad(port);
    bad.hello("wrong", 0);
    beast::flat_buffer b;
    beast::error_code ec;
    bad.ws().read(b, ec);
    EXPECT_EQ(ec, websocket::error::closed);
    EXPECT_NE(std::string(bad.ws().reason().reason.c_str()).find("wrong token"), std::string::npos);
  }

  Client late(port);
  late.hello("t0ken", 0);
  const auto welcome = late.next();
  ASSERT_TRUE(std::holds_alternative<wire::Welcome>(welcome.payload));
  EXPECT_EQ(std::get<wire::Welcome>(welcome.payload).next_seq, 1u);
  // A second client resumes after seq 3 while the first reads.
  Client resumer(port);
  resumer.hello("t0ken", 3);
  resumer.next();  // Welcome
  EXPECT_EQ(resumer.next().seq, 4u);

  uint64_t expect = 1;
  int rows = 0, images = 0;
  std::string last_kind;
  while (last_kind != "finished") {
    const auto m = late.next();
    if (m.seq == 0) continue;                        // per-connection notices
    ASSERT_EQ(m.seq, expect) << "gap or duplicate";  // NOLINT
    ++expect;
    if (m.seq == 1) {
      EXPECT_TRUE(std::holds_alternative<wire::RunInfo>(m.payload));
    }
    rows += std::holds_alternative<wire::Scalars>(m.payload);
    images += std::holds_alternative<wire::Image>(m.payload);
    if (auto* e = std::get_if<wire::Event>(&m.payload)) last_kind = e->kind;
  }
  EXPECT_EQ(rows, 40);
  EXPECT_EQ(images, 5);  // steps 0, 100, 200, 300, 400
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << gantry::test::read_text(dir / "log");
}

TEST(StreamServer, MalformedOversizedOrUnexpectedClientMessagesCloseThatClientOnly) {
  TempDir dir;
  StreamServer server("127.0.0.1", 0, "tok", dir / "none.gantrylog", "t");
  auto closed_after = [&](const std::string& first, const std::string& second) {
    Client c(server.port());
    beast::error_code ec;
    c.ws().write(asio::buffer(first), ec);  // the server may close while a big frame is still going
    if (!ec && !second.empty()) {
      c.next();  // Welcome
      c.ws().write(asio::buffer(second), ec);
    }
    beast::flat_buffer b;
    if (!ec) c.ws().read(b, ec);
    return bool(ec);  // closed, reset or broken: anything but a message
  };
  const std::string hello = wire::encode({0, wire::Hello{wire::kProtocolVersion, "tok", 0}});
  EXPECT_TRUE(closed_after("garbage", ""));                                         // malformed
  EXPECT_TRUE(closed_after(std::string(2 << 20, 'x'), ""));                         // oversized
  EXPECT_TRUE(closed_after(hello, wire::encode({0, wire::Event{"x", 0, 0, ""}})));  // unexpected
  // The server still serves a well-behaved client, and publishes to it.
  Client good(server.port());
  good.hello("tok", 0);
  EXPECT_TRUE(std::holds_alternative<wire::Welcome>(good.next().payload));
  for (int i = 0; i < 50 && server.clients() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  server.publish(wire::encode({1, wire::Event{"finished", 1, 0, ""}}), 1, false, "");
  const auto m = good.next();
  EXPECT_EQ(m.seq, 1u);
}

namespace {

// A server over a log of `n` published Events (seq 1..n).
struct LoggedServer {
  explicit LoggedServer(const TempDir& dir, uint64_t n) : log(dir / "s.gantrylog") {
    {
      wire::RecordWriter w(log);
      for (uint64_t s = 1; s <= n; ++s) w.append(wire::encode({s, wire::Event{"warning", int64_t(s), 0, "m"}}));
    }
    server = std::make_unique<StreamServer>("127.0.0.1", 0, "tok", log, "t");
    for (uint64_t s = 1; s <= n; ++s)
      server->publish(wire::encode({s, wire::Event{"warning", int64_t(s), 0, "m"}}), s, false, "");
  }
  std::string log;
  std::unique_ptr<StreamServer> server;
};

}  // namespace

TEST(StreamServer, AHelloAheadOfTheRunGetsTheRealNextSeq) {
  // The Welcome promises what is sent next: a client that claims seq 154 (or
  // 1000149) of a run at 149 gets next_seq 150, then 150.
  TempDir dir;
  LoggedServer s(dir, 149);
  for (uint64_t claimed : {154ull, 1000149ull, 149ull}) {
    Client c(s.server->port());
    c.hello("tok", claimed);
    const auto w = c.next();
    ASSERT_TRUE(std::holds_alternative<wire::Welcome>(w.payload));
    EXPECT_EQ(std::get<wire::Welcome>(w.payload).next_seq, 150u) << claimed;
    for (int i = 0; i < 100 && s.server->clients() == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // A client behind the run still gets its backfill from last_seq + 1.
  Client behind(s.server->port());
  behind.hello("tok", 100);
  EXPECT_EQ(std::get<wire::Welcome>(behind.next().payload).next_seq, 101u);
  EXPECT_EQ(behind.next().seq, 101u);
  Client ahead(s.server->port());
  ahead.hello("tok", 500);
  EXPECT_EQ(std::get<wire::Welcome>(ahead.next().payload).next_seq, 150u);
  for (int i = 0; i < 100 && s.server->clients() < 5; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  s.server->publish(wire::encode({150, wire::Event{"finished", 150, 0, ""}}), 150, false, "");
  EXPECT_EQ(ahead.next().seq, 150u);
}

TEST(StreamServer, AConnectionThatSendsNoHelloIsClosedAfter10s) {
  TempDir dir;
  LoggedServer s(dir, 3);
  Client silent(s.server->port());  // WebSocket handshake done, no Hello
  const auto start = std::chrono::steady_clock::now();
  beast::flat_buffer b;
  beast::error_code ec;
  silent.ws().read(b, ec);  // SO_RCVTIMEO is 20 s: a server that never closes fails here
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(ec) << "the server sent a message to a client that said nothing";
  EXPECT_GT(waited, 9.0);
  EXPECT_LT(waited, 12.0);
}

TEST(StreamServer, AHandshakeFloodFromOneSourceIsRefusedBeyondTheRate) {
  // 60 connections at once from 127.0.0.1: the bucket admits ~20, the rest
  // are closed before the WebSocket handshake; a second later a well-behaved
  // client gets in again.
  TempDir dir;
  LoggedServer s(dir, 3);
  int ok = 0, refused = 0;
  const auto start = std::chrono::steady_clock::now();
  double took = 0;
  {
    std::vector<std::unique_ptr<Client>> clients;
    for (int i = 0; i < 60; ++i) {
      try {
        clients.push_back(std::make_unique<Client>(s.server->port()));
        ++ok;
      } catch (const std::exception&) {
        ++refused;
      }
    }
    took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  // The burst of 20, plus 5 a second for as long as the 60 attempts took (a
  // loaded machine makes them slower, and the bucket refills meanwhile).
  EXPECT_GE(ok, 15);
  EXPECT_LE(ok, 21 + static_cast<int>(5 * took)) << "in " << took << " s";
  EXPECT_LT(ok, 60);
  EXPECT_EQ(ok + refused, 60);
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  Client again(s.server->port());
  again.hello("tok", 0);
  EXPECT_TRUE(std::holds_alternative<wire::Welcome>(again.next().payload));
  EXPECT_EQ(again.next().seq, 1u);
}

// Issue 44.5: a client written to the first protocol text (a Hello without a
// minor, a strict reader that refuses left-over bytes) decodes a live run's
// whole stream, RankStatus included; a current client gets the current
// layout and the minor in Welcome; the run log's RunInfo names its writer's minor.
TEST(StreamServer, EachClientGetsTheLayoutOfTheMinorItsHelloNames) {
  TempDir dir;
  const pid_t pid = spawn_served_gan(dir, 200);
  const auto run = dir.path() / "runs/gan_fashion_mnist/latest";
  const int port = monitor_port(run, 0);
  ASSERT_GT(port, 0) << gantry::test::read_text(dir / "log");
  Client old(port), now(port);
  old.hello("t0ken", 0, 0);
  now.hello("t0ken", 0);
  // The 1.0 client: every frame decodes whole with the strict reader.
  const auto welcome = gantry::test::strict_1_0::decode(old.next_frame());
  EXPECT_EQ(welcome.type, 2);
  EXPECT_EQ(welcome.next_seq, 1u);
  int statuses = 0, frames = 0;
  std::string last_kind;
  for (;;) {
    const std::string f = old.next_frame();
    ASSERT_NO_THROW(gantry::test::strict_1_0::decode(f)) << "frame " << frames;
    ++frames;
    statuses += gantry::test::strict_1_0::decode(f).type == 6;
    const wire::Message m = wire::decode(f);
    if (const auto* e = std::get_if<wire::Event>(&m.payload)) last_kind = e->kind;
    if (last_kind == "finished") break;
  }
  EXPECT_GT(statuses, 0);
  // The current client: the minor in Welcome and RunInfo, the status's parts.
  const wire::Message w = now.next();
  ASSERT_TRUE(std::holds_alternative<wire::Welcome>(w.payload));
  EXPECT_EQ(std::get<wire::Welcome>(w.payload).minor, wire::kProtocolMinor);
  int parts = 0, statuses_now = 0;
  for (last_kind.clear(); last_kind != "finished";) {
    const wire::Message m = now.next();
    if (const auto* i = std::get_if<wire::RunInfo>(&m.payload)) {
      EXPECT_EQ(i->protocol_minor, wire::kProtocolMinor);
    }
    if (const auto* r = std::get_if<wire::RankStatus>(&m.payload)) {
      ++statuses_now;
      parts += r->step_ms > 0;  // the parts since the previous status (the end's may have no step in it)
    }
    if (const auto* e = std::get_if<wire::Event>(&m.payload)) last_kind = e->kind;
  }
  EXPECT_EQ(statuses_now, statuses) << "the same statuses";
  EXPECT_GE(parts, statuses - 1) << "with their parts";
  const auto frames_on_disk = wire::replay((run / "stream.gantrylog").string()).frames;
  ASSERT_FALSE(frames_on_disk.empty());
  EXPECT_EQ(std::get<wire::RunInfo>(wire::decode(frames_on_disk.front()).payload).protocol_minor, wire::kProtocolMinor);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << gantry::test::read_text(dir / "log");
  const std::string log = gantry::test::read_text(dir / "log");
  EXPECT_NE(log.find("(protocol 1.0) connected from seq 1"), std::string::npos) << log;
  EXPECT_NE(log.find("(protocol 1." + std::to_string(wire::kProtocolMinor) + ") connected"), std::string::npos);
}
