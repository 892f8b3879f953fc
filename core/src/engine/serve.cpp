// `gantry serve`: a trained system behind HTTP (Boost.Beast), noise in,
// images out. The system comes from a checkpoint through the one door
// (Experiment::load_trained, EMA weights when the run kept them, eval mode,
// no autograd), as `gantry sample` builds it.
//
// Threads: one I/O thread runs every connection (Beast, asynchronous: a slow
// or silent client holds only its own socket, and a timeout closes it); one
// inference thread (--workers more) takes requests from a bounded queue and
// gathers them into one forward of up to --max-batch rows, waiting at most
// --max-wait-ms for more after the first (LitServe's max_batch_size and
// batch_timeout), then splits the output back per request. A full queue is
// 503 with Retry-After. SIGTERM/SIGINT: stop accepting, answer what is queued
// and in flight, exit 0.
//
// Routes (docs/serve.md): GET /healthz, /readyz, /v1/info, /v1/sample,
// /metrics; POST /v1/forward. Errors are JSON {"error": "..."}: 4xx for the
// client's mistakes, naming what was wrong.
#include <torch/torch.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "data/image_grid.hpp"
#include "gantry/engine.hpp"
#include "gantry/errors.hpp"
#include "io/png.hpp"
#include "runtime/runtime.hpp"
#include "train/checkpoint.hpp"
#include "train/experiment.hpp"

namespace gantry::engine {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
namespace fs = std::filesystem;

namespace {

// ---- .npy (NumPy's format 1.0: little-endian float32, C order) ----

std::string npy_encode(const torch::Tensor& t) {
  const torch::Tensor c = t.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  std::string shape;
  for (int64_t d : c.sizes()) shape += std::to_string(d) + ", ";
  if (c.dim() == 1)
    shape.pop_back();  // "(N,)"
  else if (c.dim() > 1)
    shape.resize(shape.size() - 2);
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + shape + "), }";
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += char(header.size() & 0xff);
  out += char(header.size() >> 8);
  out += header;
  out.append(static_cast<const char*>(c.data_ptr()), size_t(c.numel()) * sizeof(float));
  return out;
}

// Throws std::invalid_argument naming what is wrong with the body.
torch::Tensor npy_decode(const std::string& b) {
  if (b.size() < 10 || b.compare(0, 6, "\x93NUMPY") != 0)
    throw std::invalid_argument("the body is not a .npy file (no \\x93NUMPY magic)");
  const int major = static_cast<unsigned char>(b[6]);
  size_t header_len = 0, at = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(b[8]) | size_t(static_cast<unsigned char>(b[9])) << 8;
    at = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12) throw std::invalid_argument(".npy header truncated");
    header_len = 0;
    for (int i = 0; i < 4; ++i) header_len |= size_t(static_cast<unsigned char>(b[8 + i])) << (8 * i);
    at = 12;
  } else {
    throw std::invalid_argument(".npy version " + std::to_string(major) + " is not supported");
  }
  if (b.size() < at + header_len) throw std::invalid_argument(".npy header truncated");
  const std::string h = b.substr(at, header_len);
  auto field = [&](const std::string& key) {
    const size_t k = h.find("'" + key + "'");
    if (k == std::string::npos) throw std::invalid_argument(".npy header has no '" + key + "'");
    size_t v = h.find(':', k);
    if (v == std::string::npos) throw std::invalid_argument(".npy header: '" + key + "' has no value");
    return h.substr(v + 1);
  };
  std::string descr = field("descr");
  descr = descr.substr(descr.find_first_not_of(' '));
  const bool f4 = descr.rfind("'<f4'", 0) == 0 || descr.rfind("'float32'", 0) == 0;
  if (!f4)
    throw std::invalid_argument(".npy dtype " + descr.substr(0, descr.find(',')) +
                                ": send little-endian float32 ('<f4')");
  if (field("fortran_order").find("True") < field("fortran_order").find(','))
    throw std::invalid_argument(".npy in Fortran order: send C order");
  const std::string shape_text = field("shape");
  const size_t open = shape_text.find('('), close = shape_text.find(')');
  if (open == std::string::npos || close == std::string::npos || close < open)
    throw std::invalid_argument(".npy header: a malformed shape");
  std::vector<int64_t> shape;
  std::stringstream ss(shape_text.substr(open + 1, close - open - 1));
  for (std::string part; std::getline(ss, part, ',');) {
    if (part.find_first_not_of(' ') == std::string::npos) continue;
    try {
      size_t used = 0;
      const long long d = std::stoll(part, &used);
      if (d < 0 || d > (1ll << 31)) throw std::out_of_range("");
      shape.push_back(d);
    } catch (const std::exception&) {
      throw std::invalid_argument(".npy header: a malformed shape (" + shape_text.substr(open, close - open + 1) + ")");
    }
  }
  int64_t count = 1;
  for (int64_t d : shape) {
    if (d > 0 && count > (int64_t(1) << 40) / d) throw std::invalid_argument(".npy shape too large");
    count *= d;
  }
  const size_t data_at = at + header_len;
  if (b.size() - data_at != size_t(count) * sizeof(float))
    throw std::invalid_argument(".npy data is " + std::to_string(b.size() - data_at) + " bytes; its shape needs " +
                                std::to_string(size_t(count) * sizeof(float)));
  torch::Tensor t = torch::empty(shape, torch::kFloat32);
  if (count > 0) std::memcpy(t.data_ptr(), b.data() + data_at, size_t(count) * sizeof(float));
  return t;
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out;
}

std::string shape_json(c10::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// A client's mistake: its status and message.
struct HttpError : std::runtime_error {
  HttpError(http::status s, const std::string& what) : std::runtime_error(what), status(s) {}
  http::status status;
};

// ---- Metrics (Prometheus text format) ----

struct Histogram {
  std::vector<double> bounds;
  std::vector<uint64_t> counts;  // per bound, cumulative at render time
  uint64_t count = 0;
  double sum = 0;
  explicit Histogram(std::vector<double> b) : bounds(std::move(b)), counts(bounds.size(), 0) {}
  void add(double x) {
    for (size_t i = 0; i < bounds.size(); ++i)
      if (x <= bounds[i]) ++counts[i];
    ++count;
    sum += x;
  }
  std::string render(const std::string& name, const std::string& help) const {
    std::string out = "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
    char buf[160];
    for (size_t i = 0; i < bounds.size(); ++i) {
      std::snprintf(buf, sizeof buf, "%s_bucket{le=\"%g\"} %llu\n", name.c_str(), bounds[i],
                    static_cast<unsigned long long>(counts[i]));
      out += buf;
    }
    std::snprintf(buf, sizeof buf, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %g\n%s_count %llu\n", name.c_str(),
                  static_cast<unsigned long long>(count), name.c_str(), sum, name.c_str(),
                  static_cast<unsigned long long>(count));
    return out + buf;
  }
};

struct Metrics {
  std::mutex m;
  std::map<std::pair<std::string, int>, uint64_t> requests;  // (route, status)
  Histogram latency{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}};
  Histogram batch_rows{{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096}};
};

// ---- The model and its batcher ----

struct Job {
  torch::Tensor input;  // [n, ...] rows of the system's input
  std::promise<torch::Tensor> result;
};

class Batcher {
 public:
  Batcher(PluginSystem& system, const ServeOptions& o, Metrics& metrics) : system_(system), o_(o), metrics_(metrics) {
    for (int i = 0; i < std::max(1, o.workers); ++i) threads_.emplace_back([this] { run(); });
  }
  ~Batcher() { stop(); }

  // Queued, or HttpError 503 when the queue is full.
  std::future<torch::Tensor> submit(torch::Tensor input) {
    std::unique_lock lock(m_);
    if (stopping_) throw HttpError(http::status::service_unavailable, "the server is stopping");
    if (int64_t(queue_.size()) >= o_.max_queue)
      throw HttpError(http::status::service_unavailable,
                      "the queue is full (" + std::to_string(o_.max_queue) + " requests): retry later");
    auto job = std::make_unique<Job>();
    job->input = std::move(input);
    auto f = job->result.get_future();
    queue_.push_back(std::move(job));
    cv_.notify_one();
    return f;
  }
  int64_t depth() {
    std::lock_guard lock(m_);
    return int64_t(queue_.size());
  }
  // Answers what is queued, then the threads end.
  void stop() {
    {
      std::lock_guard lock(m_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
    threads_.clear();
  }

 private:
  void run() {
    torch::NoGradGuard no_grad;
    for (;;) {
      std::vector<std::unique_ptr<Job>> jobs;
      {
        std::unique_lock lock(m_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, nothing left
        int64_t rows = 0;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(o_.max_wait_ms);
        for (;;) {
          while (!queue_.empty() && (jobs.empty() || rows + queue_.front()->input.size(0) <= o_.max_batch)) {
            rows += queue_.front()->input.size(0);
            jobs.push_back(std::move(queue_.front()));
            queue_.pop_front();
          }
          if (rows >= o_.max_batch || stopping_ || !queue_.empty()) break;  // full, or the next does not fit
          if (cv_.wait_until(lock, deadline, [&] { return stopping_ || !queue_.empty(); })) continue;
          break;  // the wait is over
        }
      }
      std::vector<torch::Tensor> inputs;
      for (auto& j : jobs) inputs.push_back(j->input);
      try {
        const torch::Tensor batch = inputs.size() == 1 ? inputs[0] : torch::cat(inputs);
        torch::Tensor out;
        {
          std::lock_guard model(model_m_);  // --workers share one system: its forward is not assumed reentrant
          out = system_.forward(batch, -1);
        }
        if (!out.defined() || out.dim() == 0 || out.size(0) != batch.size(0))
          throw Error("plugin " + system_.name() + ": forward gave " +
                      (out.defined() ? shape_json(out.sizes()) : std::string("nothing")) + " for " +
                      std::to_string(batch.size(0)) + " rows");
        {
          std::lock_guard lock(metrics_.m);
          metrics_.batch_rows.add(double(batch.size(0)));
        }
        int64_t at = 0;
        for (auto& j : jobs) {
          const int64_t n = j->input.size(0);
          j->result.set_value(out.slice(0, at, at + n).clone());
          at += n;
        }
      } catch (...) {
        for (auto& j : jobs) j->result.set_exception(std::current_exception());
      }
    }
  }

  PluginSystem& system_;
  const ServeOptions& o_;
  Metrics& metrics_;
  std::mutex m_, model_m_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Job>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

struct Server {
  Server(const ServeOptions& options, std::string served) : o(options), checkpoint(std::move(served)) {}
  const ServeOptions& o;
  TrainedSystem trained;
  std::string checkpoint;
  std::vector<int64_t> input_shape;   // of one row
  std::vector<int64_t> output_shape;  // of one row
  DataSpec spec;
  Metrics metrics;
  std::unique_ptr<Batcher> batcher;
  std::mutex rng_m;  // sample inputs come from the global generator
  std::atomic<bool> ready{false};
  std::atomic<int> in_flight{0};  // requests read and not yet answered (written)

  PluginSystem& system() { return *trained.experiment.system; }

  // Every handler runs on the I/O thread except the wait for the batcher,
  // which a std::async-free design would block: /v1/forward and /v1/sample
  // wait on a helper thread (see Connection), so the I/O thread never waits.
  http::response<http::string_body> handle(const http::request<http::string_body>& req, std::string& route) {
    const std::string target(req.target());
    const size_t q = target.find('?');
    const std::string path = target.substr(0, q);
    const std::string query = q == std::string::npos ? "" : target.substr(q + 1);
    route = path;
    if (!o.token.empty() && path != "/healthz" && path != "/readyz") {
      const auto auth = req.find(http::field::authorization);
      if (auth == req.end() || std::string(auth->value()) != "Bearer " + o.token)
        throw HttpError(http::status::unauthorized, "a bearer token is needed (Authorization: Bearer TOKEN)");
    }
    auto need = [&](http::verb v) {
      if (req.method() != v)
        throw HttpError(http::status::method_not_allowed, path + " takes " + std::string(http::to_string(v)) +
                                                              ", not " + std::string(req.method_string()));
    };
    if (path == "/healthz") {
      need(http::verb::get);
      return json(http::status::ok, "{\"status\": \"ok\"}");
    }
    if (path == "/readyz") {
      need(http::verb::get);
      if (!ready) return json(http::status::service_unavailable, "{\"status\": \"loading\"}");
      return json(http::status::ok, "{\"status\": \"ready\"}");
    }
    if (path == "/v1/info") {
      need(http::verb::get);
      const auto& man = system().manifest();
      return json(http::status::ok, "{\"plugin\": \"" + json_escape(man.name) + "\", \"version\": \"" +
                                        json_escape(man.version) + "\", \"checkpoint\": \"" + json_escape(checkpoint) +
                                        "\", \"step\": " + std::to_string(trained.saved.global_step) +
                                        ", \"ema\": " + (trained.ema_tensors > 0 ? "true" : "false") +
                                        ", \"input_shape\": " + shape_json(input_shape) + ", \"output_shape\": " +
                                        shape_json(output_shape) + ", \"max_batch\": " + std::to_string(o.max_batch) +
                                        ", \"max_n\": " + std::to_string(o.max_n) + "}");
    }
    if (path == "/metrics") {
      need(http::verb::get);
      return text(http::status::ok, render_metrics(), "text/plain; version=0.0.4");
    }
    if (path == "/v1/sample") {
      need(http::verb::get);
      std::map<std::string, std::string> args;
      std::stringstream ss(query);
      for (std::string kv; std::getline(ss, kv, '&');) {
        const size_t eq = kv.find('=');
        args[kv.substr(0, eq)] = eq == std::string::npos ? "" : kv.substr(eq + 1);
      }
      for (const auto& [k, v] : args)
        if (k != "n" && k != "seed" && k != "format" && k != "rows")
          throw HttpError(http::status::bad_request, "unknown parameter '" + k + "' (n, seed, format, rows)");
      auto integer = [&](const std::string& k, int64_t def, int64_t lo, int64_t hi) {
        if (!args.count(k)) return def;
        try {
          size_t used = 0;
          const long long v = std::stoll(args[k], &used);
          if (used != args[k].size() || v < lo || v > hi) throw std::out_of_range("");
          return int64_t(v);
        } catch (const std::exception&) {
          throw HttpError(http::status::bad_request, k + "=" + args[k].substr(0, 40) + ": an integer in [" +
                                                         std::to_string(lo) + ", " + std::to_string(hi) + "]");
        }
      };
      const int64_t n = integer("n", 64, 1, o.max_n);
      const int64_t seed = integer("seed", 0, INT64_MIN / 2, INT64_MAX / 2);
      const int64_t rows = integer("rows", 0, 0, 4096);
      const std::string format = args.count("format") ? args["format"] : "png";
      if (format != "png" && format != "npy")
        throw HttpError(http::status::bad_request, "format=" + format.substr(0, 40) + ": png or npy");
      torch::Tensor input;
      {
        // The inputs `gantry sample --seed S -n N` draws (the global
        // generator, seeded), then the batcher's forward.
        std::lock_guard lock(rng_m);
        torch::manual_seed(static_cast<uint64_t>(seed));
        torch::NoGradGuard no_grad;
        input = system().sample_input(n, -1);
      }
      const torch::Tensor out = batcher->submit(input).get();
      if (format == "npy") return text(http::status::ok, npy_encode(out), "application/octet-stream");
      torch::Tensor shown = out;
      double low = spec.low, high = spec.high;
      if (const torch::Tensor r = system().render_samples(out); r.defined()) {
        shown = r;
        low = 0;
        high = 1;
      }
      if (shown.dim() != 4)
        throw HttpError(http::status::bad_request,
                        "the samples are " + shape_json(out.sizes()) + ", not images [N, C, H, W]: ask format=npy");
      const int cols = grid_columns(shown.size(0), rows > 0 ? rows : trained.experiment.config.trainer.grid_rows);
      return text(http::status::ok, encode_png(make_grid(shown, cols, 2, low, high)), "image/png");
    }
    if (path == "/v1/forward") {
      need(http::verb::post);
      torch::Tensor input;
      try {
        input = npy_decode(req.body());
      } catch (const std::invalid_argument& e) {
        throw HttpError(http::status::bad_request, e.what());
      }
      if (input.dim() != int64_t(input_shape.size()) + 1 ||
          !std::equal(input_shape.begin(), input_shape.end(), input.sizes().begin() + 1))
        throw HttpError(http::status::bad_request, "the input is " + shape_json(input.sizes()) + "; " +
                                                       system().name() + " takes [N, " +
                                                       shape_json(input_shape).substr(1));
      if (input.size(0) < 1 || input.size(0) > o.max_n)
        throw HttpError(http::status::bad_request, "N = " + std::to_string(input.size(0)) + ": 1 to " +
                                                       std::to_string(o.max_n) + " rows a request");
      return text(http::status::ok, npy_encode(batcher->submit(input).get()), "application/octet-stream");
    }
    throw HttpError(http::status::not_found,
                    "no route " + path.substr(0, 200) +
                        " (GET /healthz, /readyz, /v1/info, /v1/sample, /metrics; POST /v1/forward)");
  }

  static http::response<http::string_body> json(http::status s, const std::string& body) {
    return text(s, body, "application/json");
  }
  static http::response<http::string_body> text(http::status s, std::string body, const std::string& type) {
    http::response<http::string_body> res{s, 11};
    res.set(http::field::server, "gantry-serve");
    res.set(http::field::content_type, type);
    res.body() = std::move(body);
    res.prepare_payload();
    return res;
  }

  std::string render_metrics() {
    std::string out;
    std::lock_guard lock(metrics.m);
    out += "# HELP gantry_serve_requests_total Requests answered, by route and status.\n";
    out += "# TYPE gantry_serve_requests_total counter\n";
    for (const auto& [key, n] : metrics.requests)
      out += "gantry_serve_requests_total{route=\"" + json_escape(key.first) + "\",status=\"" +
             std::to_string(key.second) + "\"} " + std::to_string(n) + "\n";
    out += metrics.latency.render("gantry_serve_request_seconds", "Time from a request's arrival to its answer.");
    out += metrics.batch_rows.render("gantry_serve_batch_rows", "Rows of each forward (dynamic batching).");
    out += "# HELP gantry_serve_queue_depth Requests waiting for the model.\n# TYPE gantry_serve_queue_depth gauge\n";
    out += "gantry_serve_queue_depth " + std::to_string(batcher ? batcher->depth() : 0) + "\n";
    out +=
        "# HELP gantry_serve_model_step The served checkpoint's global step.\n# TYPE gantry_serve_model_step gauge\n";
    out += "gantry_serve_model_step " + std::to_string(trained.saved.global_step) + "\n";
    return out;
  }

  void count(const std::string& route, int status, double seconds) {
    static const std::set<std::string> known{"/healthz",   "/readyz",     "/v1/info",
                                             "/v1/sample", "/v1/forward", "/metrics"};
    std::lock_guard lock(metrics.m);
    ++metrics.requests[{known.count(route) ? route : "other", status}];
    metrics.latency.add(seconds);
  }
};

// One connection: reads requests one after another (keep-alive; pipelined
// requests are answered in order), each answered by a helper thread so that
// the I/O thread never waits for the model.
struct Connection : std::enable_shared_from_this<Connection> {
  Connection(tcp::socket s, Server& srv) : stream(std::move(s)), server(srv) {}

  beast::tcp_stream stream;
  beast::flat_buffer buffer;
  std::optional<http::request_parser<http::string_body>> parser;
  Server& server;

  void read() {
    parser.emplace();
    parser->body_limit(server.o.max_body);
    parser->header_limit(16 * 1024);
    stream.expires_after(std::chrono::seconds(server.o.timeout_s));
    http::async_read(stream, buffer, *parser, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == beast::error::timeout ||
          ec == asio::error::connection_reset || ec == asio::error::operation_aborted)
        return self->close();
      if (ec) {  // malformed: a 400 naming it, then the connection closes (its framing is lost)
        auto res =
            Server::json(ec == http::error::body_limit ? http::status::payload_too_large : http::status::bad_request,
                         "{\"error\": \"" + json_escape("malformed request: " + ec.message()) + "\"}");
        res.keep_alive(false);
        self->server.count("other", int(res.result_int()), 0);
        return self->write(std::move(res), true, false);
      }
      self->answer();
    });
  }

  void answer() {
    ++server.in_flight;
    auto req = std::make_shared<http::request<http::string_body>>(parser->release());
    const auto start = std::chrono::steady_clock::now();
    // The model's answer is waited for off the I/O thread.
    std::thread([self = shared_from_this(), req, start] {
      std::string route = "other";
      http::response<http::string_body> res;
      try {
        res = self->server.handle(*req, route);
      } catch (const HttpError& e) {
        res = Server::json(e.status, "{\"error\": \"" + json_escape(e.what()) + "\"}");
        if (e.status == http::status::service_unavailable) res.set(http::field::retry_after, "1");
      } catch (const std::exception& e) {
        res = Server::json(http::status::internal_server_error, "{\"error\": \"" + json_escape(error_text(e)) + "\"}");
        std::fprintf(stderr, "serve: %s %s: %s\n", std::string(req->method_string()).c_str(),
                     std::string(req->target()).c_str(), error_text(e).c_str());
      }
      const bool keep = req->keep_alive() && !stop_requested();
      res.keep_alive(keep);
      self->server.count(route, int(res.result_int()),
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      asio::post(self->stream.get_executor(),
                 [self, res = std::move(res), keep]() mutable { self->write(std::move(res), !keep, true); });
    }).detach();
  }

  // `counted`: the answer of a request answer() took (Server::in_flight).
  void write(http::response<http::string_body> res, bool close_after, bool counted) {
    auto sp = std::make_shared<http::response<http::string_body>>(std::move(res));
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

std::string resolve_served_checkpoint(const std::string& given) {
  std::error_code ec;
  if (fs::is_directory(given, ec)) {
    for (const fs::path& best : {fs::path(given) / "checkpoints" / "best.ckpt",              // a run directory
                                 fs::path(given) / "latest" / "checkpoints" / "best.ckpt"})  // an experiment's
      if (fs::exists(best, ec)) return fs::canonical(best, ec).string();
    const std::string newest = find_latest_checkpoint(given, nullptr);
    if (newest.empty()) throw Error(given + ": no valid checkpoint in it (a run or experiment directory, or a .ckpt)");
    return newest;
  }
  if (!fs::exists(given, ec)) throw Error(given + ": no such checkpoint, run or experiment directory");
  return given;
}

}  // namespace

int serve(const ServeOptions& o) {
  if (o.max_batch < 1 || o.max_n < 1 || o.max_queue < 1 || o.max_wait_ms < 0 || o.workers < 1 || o.timeout_s < 1)
    throw Error("serve: --max-batch, --max-n, --max-queue, --workers and --timeout must be >= 1, --max-wait-ms >= 0");
  install_stop_signals();
  if (o.threads > 0) torch::set_num_threads(o.threads);
  Server server(o, resolve_served_checkpoint(o.checkpoint));
  server.trained = Experiment::load_trained(server.checkpoint, torch::kCPU, o.plugin);
  if (!server.trained.plugin_note.empty()) std::printf("%s\n", server.trained.plugin_note.c_str());
  PluginSystem& system = server.system();
  server.spec = system.data_spec();
  {
    std::lock_guard lock(server.rng_m);
    torch::NoGradGuard no_grad;
    GlobalRngGuard rng(torch::kCPU);
    const torch::Tensor one = system.sample_input(1, -1);
    server.input_shape.assign(one.sizes().begin() + 1, one.sizes().end());
    const torch::Tensor out = system.forward(one, -1);
    server.output_shape.assign(out.sizes().begin() + 1, out.sizes().end());
  }
  server.batcher = std::make_unique<Batcher>(system, o, server.metrics);

  asio::io_context ioc;
  tcp::acceptor acceptor(ioc);
  beast::error_code ec;
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
    acceptor.async_accept([&](beast::error_code e, tcp::socket s) {
      if (e) return;
      std::make_shared<Connection>(std::move(s), server)->read();
      accept();
    });
  };
  accept();
  server.ready = true;
  std::printf("serving %s (plugin %s, step %ld%s) on http://%s:%d (max batch %ld, max wait %ld ms%s)\n",
              server.checkpoint.c_str(), system.name().c_str(), long(server.trained.saved.global_step),
              server.trained.ema_tensors > 0 ? ", EMA weights" : "", o.host.c_str(), port, long(o.max_batch),
              long(o.max_wait_ms), o.token.empty() ? "" : ", bearer token required");
  std::fflush(stdout);
  // The I/O thread; the main thread watches for SIGTERM/SIGINT. The guard
  // keeps run() going while a request is answered off the I/O thread (its
  // write is posted back later) after the acceptor closed.
  auto work = asio::make_work_guard(ioc);
  std::thread io([&] { ioc.run(); });
  while (!stop_requested()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // Stop accepting; answer every request already read (the batcher runs
  // until they are), then stop the batcher and the I/O thread. Keep-alive
  // connections are closed after their next answer.
  asio::post(ioc, [&] {
    beast::error_code ignored;
    acceptor.close(ignored);
  });
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(o.timeout_s);
  while (server.in_flight.load() > 0 && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  server.batcher->stop();
  work.reset();
  ioc.stop();
  io.join();
  std::printf("serve: stopped by signal %d; %s\n", stop_requested(),
              server.in_flight.load() == 0 ? "every request answered" : "some requests were not answered in time");
  std::fflush(stdout);
  return 0;
}

}  // namespace gantry::engine
