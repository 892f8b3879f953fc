#include "stream_client.hpp"

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "wire/record_log.hpp"

namespace gantry::client {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
namespace fs = std::filesystem;

namespace {

bool is_final_event(const wire::Message& m) {
  const auto* e = std::get_if<wire::Event>(&m.payload);
  return e && (e->kind == "finished" || e->kind == "failed" || e->kind == "stopped");
}

// A run directory's monitor.txt (the runner's printed line) and when it was written.
struct Printed {
  std::string text;
  fs::file_time_type written{};
  bool operator==(const Printed& o) const { return text == o.text && written == o.written; }
};
Printed printed_line(const std::string& run_dir) {
  const fs::path path = fs::path(run_dir) / "monitor.txt";
  Printed p;
  std::error_code ec;
  p.written = fs::last_write_time(path, ec);
  std::ifstream in(path);
  std::getline(in, p.text);
  return p;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2g s", s);
  return buf;
}

}  // namespace

struct StreamClient::Impl : std::enable_shared_from_this<StreamClient::Impl> {
  StreamClient* owner;  // outlives the I/O thread (the destructor joins it)
  std::string host, token;
  uint16_t port;
  uint64_t last_seq;
  asio::io_context ioc;
  tcp::resolver resolver{ioc};
  asio::steady_timer retry{ioc};
  std::optional<websocket::stream<beast::tcp_stream>> ws;
  beast::flat_buffer buffer;
  std::thread thread;
  bool ended = false;     // the run's final event arrived: a close is the end
  bool stopping = false;  // I/O thread only
  double backoff = 0.25;
  // Following the run (issue 44.2): its directory, when the Welcome named one
  // this host can read, and the monitor.txt its server wrote. A resumed
  // process serves the run on a new port and rewrites monitor.txt.
  std::string run_dir;
  Printed printed;
  asio::steady_timer watch{ioc};
  uint64_t generation = 0;  // callbacks of a connection that failed are ignored

  Impl(StreamClient* o, std::string h, uint16_t p, std::string t, uint64_t seq)
      : owner(o), host(std::move(h)), token(std::move(t)), port(p), last_seq(seq) {}

  std::string where() const { return host + ":" + std::to_string(port); }

  void connect() {
    if (stopping) return;
    owner->count_attempt();
    ws.emplace(ioc);
    buffer.clear();
    const uint64_t gen = ++generation;
    resolver.async_resolve(
        host, std::to_string(port),
        [self = shared_from_this(), gen](beast::error_code ec, tcp::resolver::results_type r) {
          if (gen != self->generation) return;
          if (ec) return self->failed(gen, "cannot resolve " + self->host + ": " + ec.message());
          beast::get_lowest_layer(*self->ws).expires_after(std::chrono::seconds(5));
          beast::get_lowest_layer(*self->ws).async_connect(r, [self, gen](beast::error_code ec, const tcp::endpoint&) {
            if (gen != self->generation) return;
            if (ec) return self->failed(gen, "cannot connect to " + self->where() + ": " + ec.message());
            self->handshake(gen);
          });
        });
  }

  void handshake(uint64_t gen) {
    beast::get_lowest_layer(*ws).expires_never();
    websocket::stream_base::timeout t = websocket::stream_base::timeout::suggested(beast::role_type::client);
    t.idle_timeout = std::chrono::seconds(20);  // ping a quiet server; a dead one is noticed
    t.keep_alive_pings = true;
    ws->set_option(t);
    ws->read_message_max(wire::kMaxFrame);
    ws->binary(true);
    ws->async_handshake(where(), "/", [self = shared_from_this(), gen](beast::error_code ec) {
      if (gen != self->generation) return;
      if (ec) return self->failed(gen, "WebSocket handshake with " + self->where() + " failed: " + ec.message());
      auto hello = std::make_shared<std::string>(
          wire::encode({0, wire::Hello{wire::kProtocolVersion, self->token, self->last_seq}}));
      self->ws->async_write(asio::buffer(*hello), [self, gen, hello](beast::error_code ec, size_t) {
        if (gen != self->generation) return;
        if (ec) return self->failed(gen, "sending Hello to " + self->where() + " failed: " + ec.message());
        self->read(gen);
      });
    });
  }

  void read(uint64_t gen) {
    ws->async_read(buffer, [self = shared_from_this(), gen](beast::error_code ec, size_t) {
      if (gen != self->generation) return;
      if (ec == websocket::error::closed && self->ws->reason().code == websocket::close_code::policy_error) {
        const std::string why = std::string(self->ws->reason().reason.c_str());
        self->owner->set_status(SourceStatus::State::kRefused, self->where() + " refused the connection: " + why);
        ++self->generation;
        return;
      }
      if (ec == websocket::error::closed && self->ws->reason().code == websocket::close_code::normal)
        self->ended = true;  // the server said the run ended, after sending everything
      if (ec) return self->failed(gen, "connection to " + self->where() + " lost: " + ec.message());
      wire::Message m;
      try {
        m = wire::decode(beast::buffers_to_string(self->buffer.data()));
      } catch (const wire::WireError& e) {
        return self->failed(gen, "bad message from " + self->where() + ": " + e.what());
      }
      self->buffer.consume(self->buffer.size());
      if (const auto* w = std::get_if<wire::Welcome>(&m.payload)) {
        self->backoff = 0.25;
        std::error_code ec;
        self->run_dir = fs::exists(fs::path(w->run_dir) / "monitor.txt", ec) ? w->run_dir : "";
        if (!self->run_dir.empty()) self->printed = printed_line(self->run_dir);
        self->owner->set_status(SourceStatus::State::kConnected,
                                "connected to " + self->where() + " (run " + w->run_name + ")");
      }
      if (m.seq != 0) self->last_seq = std::max(self->last_seq, m.seq);
      if (is_final_event(m)) self->ended = true;
      self->owner->deliver(std::move(m));
      self->read(gen);
    });
  }

  void failed(uint64_t gen, const std::string& why) {
    if (gen != generation || stopping) return;
    ++generation;
    beast::error_code ignored;
    beast::get_lowest_layer(*ws).socket().close(ignored);
    if (ended) {
      if (run_dir.empty()) {
        owner->set_status(SourceStatus::State::kEnded, "the run ended; " + where() + " closed");
        return;
      }
      owner->set_status(SourceStatus::State::kEnded,
                        "the run ended; " + where() + " closed; watching " + run_dir + "/monitor.txt for a resume");
      return watch_for_resume();
    }
    owner->set_status(SourceStatus::State::kReconnecting, why + "; retrying in " + seconds_text(backoff));
    retry.expires_after(std::chrono::milliseconds(static_cast<int>(backoff * 1000)));
    backoff = std::min(backoff * 2, 5.0);
    retry.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec) return;
      if (!self->resumed_elsewhere()) self->connect();
    });
  }

  // Whether the run's monitor.txt now names another server (a resumed or
  // requeued process): if so, connects to it, from the last seq.
  bool resumed_elsewhere() {
    if (run_dir.empty() || stopping) return false;
    const Printed now = printed_line(run_dir);
    if (now.text.empty() || now == printed) return false;
    Target t;
    try {
      t = parse_target(now.text);
    } catch (const std::invalid_argument&) {
      return false;  // half-written or foreign: look again later
    }
    if (t.is_dir) return false;
    printed = now;
    host = t.host;
    port = t.port;
    token = t.token;
    ended = false;
    backoff = 0.25;
    owner->set_status(SourceStatus::State::kConnecting, "the run was resumed: connecting to " + where());
    connect();
    return true;
  }

  void watch_for_resume() {
    watch.expires_after(std::chrono::seconds(1));
    watch.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (!ec && !self->stopping && !self->resumed_elsewhere()) self->watch_for_resume();
    });
  }
};

StreamClient::StreamClient(std::string host, uint16_t port, std::string token, uint64_t last_seq)
    : impl_(std::make_shared<Impl>(this, std::move(host), port, std::move(token), last_seq)) {
  set_status(SourceStatus::State::kConnecting, "connecting to " + impl_->where());
  asio::post(impl_->ioc, [impl = impl_] { impl->connect(); });
  impl_->thread = std::thread([impl = impl_] { impl->ioc.run(); });
}

StreamClient::~StreamClient() {
  asio::post(impl_->ioc, [impl = impl_] {
    impl->stopping = true;
    ++impl->generation;
    impl->retry.cancel();
    impl->watch.cancel();
    beast::error_code ignored;
    if (impl->ws) beast::get_lowest_layer(*impl->ws).socket().close(ignored);
    impl->ioc.stop();
  });
  impl_->thread.join();
}

void StreamClient::drop_connection() {
  asio::post(impl_->ioc, [impl = impl_] {
    if (impl->ws && beast::get_lowest_layer(*impl->ws).socket().is_open())
      impl->failed(impl->generation, "connection dropped");
  });
}

struct LogSource::Impl {
  wire::RecordFollower follower;
  std::thread thread;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  explicit Impl(std::string path) : follower(std::move(path)) {}
};

LogSource::LogSource(std::string dir, uint64_t last_seq)
    : dir_(std::move(dir)), impl_(std::make_unique<Impl>(dir_ + "/stream.gantrylog")) {
  set_status(SourceStatus::State::kFollowing, "reading " + impl_->follower.path());
  impl_->thread = std::thread([this, last_seq] {
    bool ended = false;
    std::unique_lock<std::mutex> lock(impl_->mu);
    while (!impl_->stop) {
      lock.unlock();
      for (const auto& frame : impl_->follower.poll()) {
        try {
          wire::Message m = wire::decode(frame);
          if (m.seq != 0 && m.seq <= last_seq) continue;
          if (m.seq != 0) ended = is_final_event(m);
          deliver(std::move(m));
        } catch (const wire::WireError& e) {
          set_status(SourceStatus::State::kFollowing, impl_->follower.path() + ": bad record skipped: " + e.what());
        }
      }
      const std::string damaged = wire::describe(impl_->follower.corrupt());
      set_status(SourceStatus::State::kFollowing, (ended ? "run ended; watching " : "following ") +
                                                      impl_->follower.path() +
                                                      (damaged.empty() ? "" : " (log damaged: " + damaged + ")"));
      lock.lock();
      impl_->cv.wait_for(lock, std::chrono::milliseconds(200), [this] { return impl_->stop; });
    }
  });
}

LogSource::~LogSource() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  impl_->thread.join();
}

}  // namespace gantry::client
