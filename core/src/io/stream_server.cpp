#include "io/stream_server.hpp"

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "gantry/errors.hpp"
#include "wire/message.hpp"
#include "wire/record_log.hpp"

namespace gantry {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxQueuedBytes = 256u << 20;            // then the client is dropped (it may reconnect)
constexpr auto kHelloTimeout = std::chrono::seconds(10);  // a connection that says nothing is closed
// Handshakes per source address: a bucket of 20 that refills at 5 per second
// (a monitor reconnects once a second at most). Beyond it a connection is
// closed before the WebSocket handshake: a flood of handshakes costs the
// training thread nothing and holds no backfill in memory.
constexpr double kHandshakeBurst = 20, kHandshakesPerSecond = 5;
constexpr int kMaxSessions = 32;  // open connections at once, all sources together

void log_line(const std::string& text) { std::fprintf(stderr, "monitor: %s\n", text.c_str()); }

}  // namespace

std::string random_token() {
  std::random_device rd;
  char buf[33];
  std::snprintf(buf, sizeof buf, "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return buf;
}

struct Session;

struct StreamServer::Impl : std::enable_shared_from_this<StreamServer::Impl> {
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::thread thread;
  std::string token, log_path, run_name, run_dir;
  uint64_t published = 0;  // io thread only
  std::set<std::shared_ptr<Session>> sessions;
  std::atomic<int> live{0};
  std::atomic<int64_t> pending{0};  // frames queued in all sessions
  std::atomic<int> open{0};         // sessions not finished
  struct Bucket {
    double tokens = kHandshakeBurst;
    std::chrono::steady_clock::time_point at = std::chrono::steady_clock::now();
  };
  std::map<std::string, Bucket> buckets;  // by source address, io thread only
  uint64_t refused = 0;

  void accept();
  bool admit(const std::string& source);
};

struct Session : std::enable_shared_from_this<Session> {
  struct Item {
    std::string frame;
    bool coalescable;
    std::string tag;
  };
  Session(tcp::socket s, std::shared_ptr<StreamServer::Impl> srv) : ws(std::move(s)), server(std::move(srv)) {}

  websocket::stream<tcp::socket> ws;
  std::shared_ptr<StreamServer::Impl> server;
  asio::steady_timer hello_timer{ws.get_executor()};
  beast::flat_buffer buffer;
  std::deque<Item> queue;
  size_t queued_bytes = 0;
  bool writing = false, live = false, closed = false, ending = false;
  uint64_t dropped = 0, dropped_reported = 0;
  uint32_t minor = 0;  // the layout this client reads (its Hello's minor, at most ours)
  std::string peer;

  void start() {
    beast::error_code ec;
    peer = ws.next_layer().remote_endpoint(ec).address().to_string();
    ws.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
    ws.read_message_max(1 << 20);  // a Hello is tiny; anything bigger is an error
    ws.binary(true);
    // From the TCP connection on: the handshake and the Hello within 10 s.
    hello_timer.expires_after(kHelloTimeout);
    hello_timer.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec || self->live || self->closed) return;
      self->drop("sent no Hello within " + std::to_string(kHelloTimeout.count()) + " s");
    });
    ws.async_accept([self = shared_from_this()](beast::error_code ec) {
      if (ec) return self->drop("handshake failed: " + ec.message());
      self->read_hello();
    });
  }

  void read_hello() {
    ws.async_read(buffer, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->drop("closed before Hello: " + ec.message());
      self->hello_timer.cancel();
      self->on_hello();
    });
  }

  void on_hello() {
    wire::Message m;
    try {
      m = wire::decode(beast::buffers_to_string(buffer.data()));
    } catch (const wire::WireError& e) {
      return reject(std::string("malformed Hello: ") + e.what());
    }
    buffer.consume(buffer.size());
    const auto* hello = std::get_if<wire::Hello>(&m.payload);
    if (!hello) return reject(std::string("expected Hello, got ") + wire::type_name(m.payload));
    if (hello->protocol_version != wire::kProtocolVersion)
      return reject("protocol version " + std::to_string(hello->protocol_version) + ", server speaks " +
                    std::to_string(wire::kProtocolVersion));
    if (hello->token != server->token) return reject("wrong token");
    const uint64_t cut = server->published;
    // A client that claims more than was published (it kept a seq from
    // another run, or from before this run resumed) gets what there is: the
    // Welcome says the seq that really comes next.
    const uint64_t from = std::min(hello->last_seq, cut);
    minor = std::min(hello->minor, wire::kProtocolMinor);
    const wire::Welcome welcome{wire::kProtocolVersion, server->run_name, from + 1, minor, server->run_dir};
    enqueue(wire::encode({0, welcome}, minor), false, "");
    // Backfill: everything after the client's last seq up to what is published
    // now; live frames (seq > cut) follow, posted on this same thread.
    for (const auto& f : wire::replay(server->log_path).frames) {
      uint64_t seq = 0;
      try {
        seq = wire::decode(f).seq;
      } catch (const wire::WireError&) {
        continue;
      }
      if (seq > from && seq <= cut) enqueue(wire::for_minor(f, minor), false, "");
    }
    live = true;
    server->live++;
    log_line("client " + peer + " (protocol 1." + std::to_string(minor) + ") connected from seq " +
             std::to_string(from + 1));
    read_more();
  }

  // After Hello a client only closes; any message is unexpected.
  void read_more() {
    ws.async_read(buffer, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->drop(ec == websocket::error::closed ? "closed" : "gone: " + ec.message());
      self->reject("unexpected message after Hello");
    });
  }

  void enqueue(std::string frame, bool coalescable, const std::string& tag) {
    if (closed) return;
    if (coalescable) {  // keep only the newest pending grid of this tag (not the one being written)
      for (size_t i = writing ? 1 : 0; i < queue.size(); ++i)
        if (queue[i].coalescable && queue[i].tag == tag) {
          queued_bytes -= queue[i].frame.size();
          queue.erase(queue.begin() + static_cast<long>(i));
          server->pending--;
          ++dropped;
          break;
        }
    }
    queued_bytes += frame.size();
    queue.push_back({std::move(frame), coalescable, tag});
    server->pending++;
    if (queued_bytes > kMaxQueuedBytes) return drop("too slow: " + std::to_string(queued_bytes >> 20) + " MiB queued");
    write_next();
  }

  void write_next() {
    if (writing || queue.empty() || closed) return;
    if (dropped > dropped_reported) {  // a per-connection notice (seq 0)
      const uint64_t n = dropped - dropped_reported;
      dropped_reported = dropped;
      queue.push_front(
          {wire::encode(
               {0, wire::Event{"dropped", 0, 0, std::to_string(n) + " image(s) replaced by newer ones (slow client)"}}),
           false, ""});
      queued_bytes += queue.front().frame.size();
      server->pending++;
    }
    writing = true;
    ws.async_write(asio::buffer(queue.front().frame), [self = shared_from_this()](beast::error_code ec, size_t) {
      self->writing = false;
      if (ec) return self->drop("write failed: " + ec.message());
      self->queued_bytes -= self->queue.front().frame.size();
      self->queue.pop_front();
      self->server->pending--;
      self->write_next();
      self->close_if_ended();
    });
  }

  // The run is over: send what is queued, then close with a normal WebSocket
  // close, so the client reads every message before the connection ends (an
  // abrupt close can reset the connection and lose the run's last messages).
  void end() {
    if (closed) return;
    if (!live) return drop("disconnected: the run ended");
    ending = true;
    close_if_ended();
  }

  void close_if_ended() {
    if (!ending || writing || !queue.empty() || closed) return;
    closed = true;
    ws.async_close(websocket::close_reason(websocket::close_code::normal, "the run ended"),
                   [self = shared_from_this()](beast::error_code) { self->finish(); });
  }

  void reject(const std::string& why) {
    log_line("closing client " + peer + ": " + why);
    if (closed) return;
    closed = true;
    ws.async_close(websocket::close_reason(websocket::close_code::policy_error, why),
                   [self = shared_from_this()](beast::error_code) { self->finish(); });
  }

  void drop(const std::string& why) {
    hello_timer.cancel();
    if (closed && !live) return finish();
    log_line("client " + peer + " " + why);
    closed = true;
    beast::error_code ec;
    ws.next_layer().close(ec);
    finish();
  }

  void finish() {
    server->pending -= static_cast<int64_t>(queue.size());
    queue.clear();
    if (live) {
      live = false;
      server->live--;
    }
    if (server->sessions.erase(shared_from_this())) server->open--;
  }
};

bool StreamServer::Impl::admit(const std::string& source) {
  const auto now = std::chrono::steady_clock::now();
  if (buckets.size() > 4096) buckets.clear();  // many sources: forget them all rather than grow
  Bucket& b = buckets[source];
  b.tokens =
      std::min(kHandshakeBurst, b.tokens + kHandshakesPerSecond * std::chrono::duration<double>(now - b.at).count());
  b.at = now;
  if (b.tokens < 1 || open.load() >= kMaxSessions) {
    if (refused++ % 100 == 0)  // one line per 100, not one per connection
      log_line("refusing connections from " + source + ": more than " + std::to_string(int(kHandshakesPerSecond)) +
               " handshakes/s (or " + std::to_string(kMaxSessions) + " open); " + std::to_string(refused) +
               " refused so far");
    return false;
  }
  b.tokens -= 1;
  return true;
}

void StreamServer::Impl::accept() {
  acceptor.async_accept([self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    beast::error_code ep_ec;
    const auto source = socket.remote_endpoint(ep_ec).address().to_string();
    if (!ec && !ep_ec && !self->admit(source)) {
      socket.close(ep_ec);
    } else if (!ec) {
      auto s = std::make_shared<Session>(std::move(socket), self);
      self->sessions.insert(s);
      self->open++;
      s->start();
    }
    self->accept();
  });
}

StreamServer::StreamServer(const std::string& host, int port, std::string token, std::string log_path,
                           std::string run_name, uint64_t published)
    : impl_(std::make_shared<Impl>()) {
  impl_->published = published;
  impl_->token = std::move(token);
  impl_->log_path = std::move(log_path);
  impl_->run_name = std::move(run_name);
  std::error_code ec;
  impl_->run_dir = fs::weakly_canonical(fs::absolute(impl_->log_path).parent_path(), ec).string();
  try {
    const tcp::endpoint ep(asio::ip::make_address(host), static_cast<unsigned short>(port));
    impl_->acceptor.open(ep.protocol());
    impl_->acceptor.set_option(asio::socket_base::reuse_address(true));
    impl_->acceptor.bind(ep);
    impl_->acceptor.listen();
  } catch (const std::exception& e) {
    throw Error("monitor: cannot listen on " + host + ":" + std::to_string(port) + ": " + e.what() +
                " (monitor.host, monitor.port; monitor.enabled=false turns it off)");
  }
  impl_->accept();
  impl_->thread = std::thread([impl = impl_] { impl->ioc.run(); });
}

StreamServer::~StreamServer() {
  // Let connected clients receive what is queued (the run's last messages)
  // and close them normally, for at most 3 s; then drop whoever is left.
  asio::post(impl_->ioc, [impl = impl_] {
    beast::error_code ec;
    impl->acceptor.close(ec);
    for (auto& s : std::set<std::shared_ptr<Session>>(impl->sessions)) s->end();
  });
  for (int i = 0; i < 150 && impl_->open.load() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  asio::post(impl_->ioc, [impl = impl_] {
    for (auto& s : std::set<std::shared_ptr<Session>>(impl->sessions)) s->drop("disconnected: the run ended");
    impl->ioc.stop();
  });
  if (impl_->thread.joinable()) impl_->thread.join();
}

int StreamServer::port() const { return impl_->acceptor.local_endpoint().port(); }

int StreamServer::clients() const { return impl_->live.load(); }

void StreamServer::publish(std::string frame, uint64_t seq, bool coalescable, const std::string& tag) {
  asio::post(impl_->ioc, [impl = impl_, frame = std::move(frame), seq, coalescable, tag]() mutable {
    impl->published = seq;
    for (auto& s : std::set<std::shared_ptr<Session>>(impl->sessions))
      if (s->live) s->enqueue(wire::for_minor(frame, s->minor), coalescable, tag);
  });
}

}  // namespace gantry
