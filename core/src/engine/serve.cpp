// `gantry serve`: a trained system behind HTTP (Boost.Beast), noise in,
// images out. The system comes from a checkpoint through the one door
// (Experiment::load_trained, EMA weights when the run kept them, eval mode,
// no autograd), as `gantry sample` builds it.
//
// Threads: one I/O thread runs every connection (Beast, asynchronous: a slow
// or silent client holds only its own socket, and a timeout closes it); a
// small pool parses bodies and encodes answers; one inference thread
// (--workers more) takes requests from a bounded queue and gathers them into
// one forward of up to --max-batch rows, waiting at most --max-wait-ms for
// more after the first (LitServe's max_batch_size and batch_timeout), then
// hands each request its rows back to the pool. No thread waits for another
// request's answer. A full queue is 503 with Retry-After; a request not
// answered within --request-timeout-ms is 504 (and skipped if not yet
// computed). SIGTERM/SIGINT: stop accepting, answer what is queued and in
// flight, exit 0. --watch: a newer checkpoint of the run or experiment is
// loaded beside the served one and swapped in whole between batches; every
// computed answer names its checkpoint and step (X-Gantry-Checkpoint,
// X-Gantry-Step).
//
// Routes (docs/serve.md): GET /healthz, /readyz, /v1/info, /v1/sample,
// /metrics; POST /v1/forward. Errors are JSON {"error": "..."}: 4xx for the
// client's mistakes, naming what was wrong.
#include <torch/torch.h>

#include <algorithm>
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
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "data/image_grid.hpp"
#include "engine/serve_parse.hpp"
#include "gantry/engine.hpp"
#include "gantry/errors.hpp"
#include "io/png.hpp"
#include "runtime/runtime.hpp"
#include "checkpoint/resolve.hpp"
#include "train/experiment.hpp"

namespace gantry::engine {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
namespace fs = std::filesystem;

namespace {

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

std::vector<int64_t> dims(c10::IntArrayRef s) { return {s.begin(), s.end()}; }

std::string npy_encode(const torch::Tensor& t) {
  const torch::Tensor c = t.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  return serve::npy_bytes(dims(c.sizes()), c.data_ptr<float>(), size_t(c.numel()));
}

// ---- The model ----

// One loaded checkpoint. The server holds the current one; a batch holds the
// one it ran on (so a --watch swap never changes a model under a forward, and
// the old one is freed when its last batch is answered).
struct Model {
  TrainedSystem trained;
  std::string checkpoint;
  std::vector<int64_t> input_shape, output_shape;  // of one row
  DataSpec spec;
  std::mutex forward_m;  // --workers share one system: its forward is not assumed reentrant
  PluginSystem& system() { return *trained.experiment.system; }
  int64_t step() const { return trained.saved.global_step; }
};

// The caller holds the server's RNG lock: building a system draws its initial
// weights from the global generator, which /v1/sample seeds.
std::shared_ptr<Model> load_model(const ResolvedCheckpoint& checkpoint, const std::string& plugin) {
  auto m = std::make_shared<Model>();
  m->checkpoint = checkpoint.path;
  m->trained = Experiment::load_trained(*checkpoint.file, torch::kCPU, plugin);
  m->spec = m->system().data_spec();
  torch::NoGradGuard no_grad;
  GlobalRngGuard rng(torch::kCPU);
  const torch::Tensor one = m->system().sample_input(1, -1);
  m->input_shape = dims(one.sizes().slice(1));
  const torch::Tensor out = m->system().forward(one, -1);
  m->output_shape = dims(out.sizes().slice(1));
  return m;
}

// ---- The batcher ----

struct Job {
  torch::Tensor input;  // [n, ...] rows of the system's input
  // Called once on an inference thread with the model the batch ran on and
  // its rows of the output, or with the exception the forward threw.
  std::function<void(std::shared_ptr<Model>, torch::Tensor, std::exception_ptr)> done;
  std::shared_ptr<std::atomic<bool>> answered;  // already answered (timed out): skipped
};

class Batcher {
 public:
  Batcher(std::function<std::shared_ptr<Model>()> current, const ServeOptions& o, Metrics& metrics)
      : current_(std::move(current)), o_(o), metrics_(metrics) {
    for (int i = 0; i < std::max(1, o.workers); ++i) threads_.emplace_back([this] { run(); });
  }
  ~Batcher() { stop(); }

  // Queued, or HttpError 503 when the queue is full.
  void submit(std::unique_ptr<Job> job) {
    std::unique_lock lock(m_);
    if (stopping_) throw HttpError(http::status::service_unavailable, "the server is stopping");
    if (int64_t(queue_.size()) >= o_.max_queue)
      throw HttpError(http::status::service_unavailable,
                      "the queue is full (" + std::to_string(o_.max_queue) + " requests): retry later");
    queue_.push_back(std::move(job));
    cv_.notify_one();
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
            if (!queue_.front()->answered->load()) {  // a timed-out request is not computed
              rows += queue_.front()->input.size(0);
              jobs.push_back(std::move(queue_.front()));
            }
            queue_.pop_front();
          }
          if (rows >= o_.max_batch || stopping_ || !queue_.empty()) break;  // full, or the next does not fit
          if (cv_.wait_until(lock, deadline, [&] { return stopping_ || !queue_.empty(); })) continue;
          break;  // the wait is over
        }
      }
      if (jobs.empty()) continue;
      std::vector<torch::Tensor> inputs;
      for (auto& j : jobs) inputs.push_back(j->input);
      const std::shared_ptr<Model> model = current_();
      torch::Tensor out;
      std::exception_ptr failed;
      try {
        const torch::Tensor batch = inputs.size() == 1 ? inputs[0] : torch::cat(inputs);
        {
          std::lock_guard lock(model->forward_m);
          out = model->system().forward(batch, -1);
        }
        if (!out.defined() || out.dim() == 0 || out.size(0) != batch.size(0))
          throw Error("plugin " + model->system().name() + ": forward gave " +
                      (out.defined() ? serve::shape_json(dims(out.sizes())) : std::string("nothing")) + " for " +
                      std::to_string(batch.size(0)) + " rows");
        std::lock_guard lock(metrics_.m);
        metrics_.batch_rows.add(double(batch.size(0)));
      } catch (...) {
        failed = std::current_exception();
      }
      int64_t at = 0;
      for (auto& j : jobs) {
        const int64_t n = j->input.size(0);
        j->done(model, failed ? torch::Tensor() : out.slice(0, at, at + n), failed);
        at += n;
      }
    }
  }

  std::function<std::shared_ptr<Model>()> current_;
  const ServeOptions& o_;
  Metrics& metrics_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Job>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

using Response = http::response<http::string_body>;

Response text(http::status s, std::string body, const std::string& type) {
  Response res{s, 11};
  res.set(http::field::server, "gantry-serve");
  res.set(http::field::content_type, type);
  res.body() = std::move(body);
  res.prepare_payload();
  return res;
}
Response json(http::status s, const std::string& body) { return text(s, body, "application/json"); }
Response error_response(http::status s, const std::string& what) {
  Response res = json(s, "{\"error\": \"" + serve::json_escape(what) + "\"}");
  if (s == http::status::service_unavailable) res.set(http::field::retry_after, "1");
  return res;
}
// The served model's identity on every answer it computed.
void stamp(Response& res, const Model& m) {
  res.set("X-Gantry-Checkpoint", m.checkpoint);
  res.set("X-Gantry-Step", std::to_string(m.step()));
}

// How a request is answered: once, from any thread (the handler's, an
// inference thread's, or the timeout's).
using Reply = std::function<void(Response)>;

struct Server {
  explicit Server(const ServeOptions& options) : o(options), pool(pool_threads()) {}
  const ServeOptions& o;
  Metrics metrics;
  std::unique_ptr<Batcher> batcher;
  // Parsing bodies and encoding answers: off the I/O thread, and never
  // waiting for the model (the batcher calls back).
  asio::thread_pool pool;
  std::mutex rng_m;  // sample inputs come from the global generator
  std::atomic<bool> ready{false};
  std::atomic<int> in_flight{0};  // requests read and not yet answered (written)
  std::atomic<uint64_t> swaps{0}, timeouts{0};

  std::shared_ptr<Model> current() {
    std::lock_guard lock(model_m_);
    return model_;
  }
  void set_model(std::shared_ptr<Model> m) {
    std::lock_guard lock(model_m_);
    model_ = std::move(m);
  }

  static int pool_threads() { return int(std::clamp(std::thread::hardware_concurrency(), 2u, 8u)); }

  // Runs on the pool. Answers through `reply`, now or when the model has.
  // `answered`: set once the request is answered (a timeout may come first).
  void handle(const http::request<http::string_body>& req, const std::string& path, const std::string& query,
              const Reply& reply, const std::shared_ptr<std::atomic<bool>>& answered) {
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
    std::map<std::string, std::string> args;
    try {
      args = serve::parse_query(query);
    } catch (const std::invalid_argument& e) {
      throw HttpError(http::status::bad_request, e.what());
    }
    auto only = [&](std::initializer_list<const char*> known) {
      for (const auto& [k, v] : args) {
        bool ok = false;
        std::string list;
        for (const char* name : known) {
          ok |= k == name;
          list += (list.empty() ? "" : ", ") + std::string(name);
        }
        if (!ok)
          throw HttpError(http::status::bad_request, "unknown parameter '" + serve::json_escape(k.substr(0, 40)) +
                                                         "' (" + (list.empty() ? "none taken" : list) + ")");
      }
    };
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
    auto choice = [&](const std::string& k, const std::string& def, std::initializer_list<const char*> ok) {
      const std::string v = args.count(k) ? args[k] : def;
      std::string list;
      for (const char* c : ok) {
        if (v == c) return v;
        list += (list.empty() ? "" : " or ") + std::string(c);
      }
      throw HttpError(http::status::bad_request, k + "=" + v.substr(0, 40) + ": " + list);
    };
    if (path == "/healthz") {
      need(http::verb::get);
      only({});
      return reply(json(http::status::ok, "{\"status\": \"ok\"}"));
    }
    if (path == "/readyz") {
      need(http::verb::get);
      only({});
      if (!ready) return reply(json(http::status::service_unavailable, "{\"status\": \"loading\"}"));
      return reply(json(http::status::ok, "{\"status\": \"ready\"}"));
    }
    const std::shared_ptr<Model> model = current();
    if (path == "/v1/info") {
      need(http::verb::get);
      only({});
      const auto& man = model->system().manifest();
      Response res = json(
          http::status::ok,
          "{\"plugin\": \"" + serve::json_escape(man.name) + "\", \"version\": \"" + serve::json_escape(man.version) +
              "\", \"checkpoint\": \"" + serve::json_escape(model->checkpoint) + "\", \"step\": " +
              std::to_string(model->step()) + ", \"ema\": " + (model->trained.ema_tensors > 0 ? "true" : "false") +
              ", \"input_shape\": " + serve::shape_json(model->input_shape) +
              ", \"output_shape\": " + serve::shape_json(model->output_shape) +
              ", \"max_batch\": " + std::to_string(o.max_batch) + ", \"max_n\": " + std::to_string(o.max_n) +
              ", \"watch\": " + (o.watch ? "true" : "false") + ", \"swaps\": " + std::to_string(swaps.load()) + "}");
      stamp(res, *model);
      return reply(std::move(res));
    }
    if (path == "/metrics") {
      need(http::verb::get);
      only({});
      return reply(text(http::status::ok, render_metrics(), "text/plain; version=0.0.4"));
    }
    if (path == "/v1/sample") {
      need(http::verb::get);
      only({"n", "seed", "format", "rows"});
      const int64_t n = integer("n", 64, 1, o.max_n);
      const int64_t seed = integer("seed", 0, INT64_MIN / 2, INT64_MAX / 2);
      const int64_t rows = integer("rows", 0, 0, 4096);
      const std::string format = choice("format", "png", {"png", "npy", "json"});
      torch::Tensor input;
      {
        // The inputs `gantry sample --seed S -n N` draws (the global
        // generator, seeded), then the batcher's forward.
        std::lock_guard lock(rng_m);
        torch::manual_seed(static_cast<uint64_t>(seed));
        torch::NoGradGuard no_grad;
        input = model->system().sample_input(n, -1);
      }
      return submit(std::move(input), format, rows, reply, answered);
    }
    if (path == "/v1/forward") {
      need(http::verb::post);
      only({"format", "rows"});
      const auto type = req.find(http::field::content_type);
      const bool json_body = type != req.end() && type->value().starts_with("application/json");
      const std::string format = choice("format", json_body ? "json" : "npy", {"npy", "json", "png"});
      const int64_t rows = integer("rows", 0, 0, 4096);
      int64_t row_size = 1;
      for (int64_t d : model->input_shape) row_size *= d;
      torch::Tensor input;
      try {
        if (json_body) {
          serve::JsonRows parsed = serve::parse_json_rows(req.body(), size_t(o.max_n * std::max<int64_t>(1, row_size)));
          input = torch::from_blob(parsed.values.data(), parsed.shape, torch::kFloat32).clone();
        } else {
          const serve::Npy npy = serve::parse_npy(req.body());
          input = torch::empty(npy.shape, torch::kFloat32);
          if (npy.count > 0) std::memcpy(input.data_ptr(), req.body().data() + npy.data_at, npy.count * sizeof(float));
        }
      } catch (const std::invalid_argument& e) {
        throw HttpError(http::status::bad_request, e.what());
      }
      if (input.dim() != int64_t(model->input_shape.size()) + 1 ||
          !std::equal(model->input_shape.begin(), model->input_shape.end(), input.sizes().begin() + 1))
        throw HttpError(http::status::bad_request, "the input is " + serve::shape_json(dims(input.sizes())) + "; " +
                                                       model->system().name() + " takes [N, " +
                                                       serve::shape_json(model->input_shape).substr(1));
      if (input.size(0) < 1 || input.size(0) > o.max_n)
        throw HttpError(http::status::bad_request, "N = " + std::to_string(input.size(0)) + ": 1 to " +
                                                       std::to_string(o.max_n) + " rows a request");
      return submit(std::move(input), format, rows, reply, answered);
    }
    throw HttpError(http::status::not_found,
                    "no route " + serve::json_escape(path.substr(0, 200)) +
                        " (GET /healthz, /readyz, /v1/info, /v1/sample, /metrics; POST /v1/forward)");
  }

  // Queues `input` for the model; its output is encoded on the pool as
  // `format` and answered. A full queue throws 503.
  void submit(torch::Tensor input, const std::string& format, int64_t rows, const Reply& reply,
              const std::shared_ptr<std::atomic<bool>>& answered) {
    auto job = std::make_unique<Job>();
    job->input = std::move(input);
    job->answered = answered;
    job->done = [this, format, rows, reply](std::shared_ptr<Model> m, torch::Tensor out, std::exception_ptr failed) {
      asio::post(pool, [this, format, rows, reply, m = std::move(m), out = std::move(out), failed] {
        reply_with(reply, [&] {
          if (failed) std::rethrow_exception(failed);
          Response res = encode(*m, out, format, rows);
          stamp(res, *m);
          return res;
        });
      });
    };
    batcher->submit(std::move(job));
  }

  Response encode(Model& m, const torch::Tensor& out, const std::string& format, int64_t rows) {
    if (format == "npy") return text(http::status::ok, npy_encode(out), "application/octet-stream");
    if (format == "json") {
      const torch::Tensor c = out.to(torch::kFloat32).contiguous();
      return json(http::status::ok, serve::json_rows(dims(c.sizes()), c.data_ptr<float>(), size_t(c.numel())));
    }
    torch::Tensor shown = out;
    double low = m.spec.low, high = m.spec.high;
    if (const torch::Tensor r = m.system().render_samples(out); r.defined()) {
      shown = r;
      low = 0;
      high = 1;
    }
    if (shown.dim() != 4)
      throw HttpError(http::status::bad_request, "the output is " + serve::shape_json(dims(out.sizes())) +
                                                     ", not images [N, C, H, W]: ask format=npy");
    const int cols = grid_columns(shown.size(0), rows > 0 ? rows : m.trained.experiment.config.trainer.grid_rows);
    return text(http::status::ok, encode_png(make_grid(shown, cols, 2, low, high)), "image/png");
  }

  // Calls make() and replies with its answer, or with the error it threw:
  // a client's mistake is its 4xx, anything else a 500 (and a line on stderr).
  static void reply_with(const Reply& reply, const std::function<Response()>& make) {
    Response res;
    try {
      res = make();
    } catch (const HttpError& e) {
      res = error_response(e.status, e.what());
    } catch (const std::exception& e) {
      res = error_response(http::status::internal_server_error, error_text(e));
      std::fprintf(stderr, "serve: %s\n", error_text(e).c_str());
    }
    reply(std::move(res));
  }

  std::string render_metrics() {
    const std::shared_ptr<Model> model = current();
    std::string out;
    std::lock_guard lock(metrics.m);
    out += "# HELP gantry_serve_requests_total Requests answered, by route and status.\n";
    out += "# TYPE gantry_serve_requests_total counter\n";
    for (const auto& [key, n] : metrics.requests)
      out += "gantry_serve_requests_total{route=\"" + serve::json_escape(key.first) + "\",status=\"" +
             std::to_string(key.second) + "\"} " + std::to_string(n) + "\n";
    out += metrics.latency.render("gantry_serve_request_seconds", "Time from a request's arrival to its answer.");
    out += metrics.batch_rows.render("gantry_serve_batch_rows", "Rows of each forward (dynamic batching).");
    out += "# HELP gantry_serve_queue_depth Requests waiting for the model.\n# TYPE gantry_serve_queue_depth gauge\n";
    out += "gantry_serve_queue_depth " + std::to_string(batcher ? batcher->depth() : 0) + "\n";
    out +=
        "# HELP gantry_serve_model_step The served checkpoint's global step.\n# TYPE gantry_serve_model_step gauge\n";
    out += "gantry_serve_model_step " + std::to_string(model ? model->step() : 0) + "\n";
    out += "# HELP gantry_serve_model_swaps_total Newer checkpoints swapped in (--watch).\n";
    out += "# TYPE gantry_serve_model_swaps_total counter\ngantry_serve_model_swaps_total " +
           std::to_string(swaps.load()) + "\n";
    out += "# HELP gantry_serve_timeouts_total Requests answered 504 (--request-timeout-ms).\n";
    out += "# TYPE gantry_serve_timeouts_total counter\ngantry_serve_timeouts_total " +
           std::to_string(timeouts.load()) + "\n";
    return out;
  }

  void count(const std::string& route, int status, double seconds) {
    static const std::set<std::string> known{"/healthz",   "/readyz",     "/v1/info",
                                             "/v1/sample", "/v1/forward", "/metrics"};
    std::lock_guard lock(metrics.m);
    ++metrics.requests[{known.count(route) ? route : "other", status}];
    metrics.latency.add(seconds);
  }

 private:
  std::mutex model_m_;
  std::shared_ptr<Model> model_;
};

// One connection: reads requests one after another (keep-alive; pipelined
// requests are answered in order: the next is read after the answer is
// written). A request is handled on the server's pool; the I/O thread never
// waits for the model or a body's parsing.
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
        auto res =
            error_response(ec == http::error::body_limit ? http::status::payload_too_large : http::status::bad_request,
                           "malformed request: " + ec.message());
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
    const std::string target(req->target());
    const size_t q = target.find('?');
    auto path = std::make_shared<std::string>(target.substr(0, q));
    const std::string query = q == std::string::npos ? "" : target.substr(q + 1);
    const auto start = std::chrono::steady_clock::now();
    auto answered = std::make_shared<std::atomic<bool>>(false);
    // Whoever answers first (the handler, the model, the timeout) writes.
    Reply reply = [self = shared_from_this(), req, path, start, answered](Response res) {
      if (answered->exchange(true)) return;
      const bool keep = req->keep_alive() && !stop_requested();
      res.keep_alive(keep);
      self->server.count(*path, int(res.result_int()),
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
        ++self->server.timeouts;
        reply(error_response(http::status::gateway_timeout,
                             "no answer within " + std::to_string(self->server.o.request_timeout_ms) +
                                 " ms (--request-timeout-ms; " + std::to_string(self->server.batcher->depth()) +
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

// What --watch compares: the checkpoint a directory resolves to, and its file's time and size.
struct Seen {
  std::string path;
  fs::file_time_type time{};
  uintmax_t size = 0;
  bool operator==(const Seen& o) const { return path == o.path && time == o.time && size == o.size; }
};
Seen seen(const std::string& path) {
  std::error_code ec;
  Seen s{path, fs::last_write_time(path, ec), 0};
  s.size = fs::file_size(path, ec);
  return s;
}

// --watch: every interval, the directory's checkpoint; a new one is loaded
// beside the served model (off the request path) and swapped in whole, or
// refused in one line (another input or output shape, a file that does not
// load) while the old one serves on.
void watch(Server& server, const std::string& dir) {
  Seen current = seen(server.current()->checkpoint);
  Seen refused;
  while (!stop_requested()) {
    for (int64_t waited = 0; waited < server.o.watch_interval_ms && !stop_requested(); waited += 20)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (stop_requested()) return;
    // The file the directory means now, compared by name, time and size
    // before anything is read.
    const std::vector<std::string> candidates = checkpoint_candidates(dir, CheckpointUse::kInference);
    if (candidates.empty()) continue;  // between a run's start and its first checkpoint
    Seen now = seen(candidates.front());
    if (now == current || now == refused) continue;
    ResolvedCheckpoint resolved;
    try {
      resolved = resolve_checkpoint(dir, CheckpointUse::kInference);
    } catch (const std::exception&) {
      continue;
    }
    if (!resolved.found()) continue;
    if (resolved.path !=
        now.path) {  // the first does not read (a file renamed in whole never will): the next that does
      refused = now;
      now = seen(resolved.path);
    }
    if (now == current || now == refused) continue;
    const std::shared_ptr<Model> old = server.current();
    try {
      std::shared_ptr<Model> fresh;
      {
        std::lock_guard lock(server.rng_m);
        fresh = load_model(resolved, server.o.plugin);
      }
      if (fresh->input_shape != old->input_shape || fresh->output_shape != old->output_shape)
        throw Error("it maps " + serve::shape_json(fresh->input_shape) + " -> " +
                    serve::shape_json(fresh->output_shape) + ", the served one " + serve::shape_json(old->input_shape) +
                    " -> " + serve::shape_json(old->output_shape));
      server.set_model(fresh);
      ++server.swaps;
      current = now;
      std::printf("serve: --watch: now serving %s (step %ld; was %s, step %ld)\n", now.path.c_str(),
                  long(fresh->step()), old->checkpoint.c_str(), long(old->step()));
    } catch (const std::exception& e) {
      refused = now;
      std::printf("serve: --watch: not swapping in %s: %s; still serving %s\n", now.path.c_str(), error_text(e).c_str(),
                  old->checkpoint.c_str());
    }
    std::fflush(stdout);
  }
}

}  // namespace

int serve(const ServeOptions& o) {
  if (o.max_batch < 1 || o.max_n < 1 || o.max_queue < 1 || o.max_wait_ms < 0 || o.workers < 1 || o.timeout_s < 1 ||
      o.request_timeout_ms < 0 || o.watch_interval_ms < 1)
    throw Error(
        "serve: --max-batch, --max-n, --max-queue, --workers, --timeout and --watch-interval-ms must be >= 1, "
        "--max-wait-ms and --request-timeout-ms >= 0");
  std::error_code fec;
  if (o.watch && !fs::is_directory(o.checkpoint, fec))
    throw Error("serve: --watch needs a run or experiment directory, not the checkpoint " + o.checkpoint);
  install_stop_signals();
  if (o.threads > 0) torch::set_num_threads(o.threads);
  Server server(o);
  {
    std::lock_guard lock(server.rng_m);
    const ResolvedCheckpoint resolved = require_checkpoint(o.checkpoint, CheckpointUse::kInference);
    std::printf("checkpoint: %s\n", resolved.why.c_str());
    server.set_model(load_model(resolved, o.plugin));
  }
  const std::shared_ptr<Model> first = server.current();
  if (!first->trained.plugin_note.empty()) std::printf("%s\n", first->trained.plugin_note.c_str());
  server.batcher = std::make_unique<Batcher>([&server] { return server.current(); }, o, server.metrics);

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
      s.set_option(tcp::no_delay(true), e);
      std::make_shared<Connection>(std::move(s), server)->read();
      accept();
    });
  };
  accept();
  server.ready = true;
  std::printf("serving %s (plugin %s, step %ld%s) on http://%s:%d (max batch %ld, max wait %ld ms%s%s)\n",
              first->checkpoint.c_str(), first->system().name().c_str(), long(first->step()),
              first->trained.ema_tensors > 0 ? ", EMA weights" : "", o.host.c_str(), port, long(o.max_batch),
              long(o.max_wait_ms), o.token.empty() ? "" : ", bearer token required",
              o.watch ? ", watching for newer checkpoints" : "");
  std::fflush(stdout);
  // The I/O thread; the main thread watches for SIGTERM/SIGINT. The guard
  // keeps run() going while a request is answered off the I/O thread (its
  // write is posted back later) after the acceptor closed.
  auto work = asio::make_work_guard(ioc);
  std::thread io([&] { ioc.run(); });
  std::thread watcher;
  if (o.watch) watcher = std::thread([&] { watch(server, o.checkpoint); });
  while (!stop_requested()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // Stop accepting; answer every request already read (the batcher runs
  // until they are), then stop the batcher, the pool and the I/O thread.
  // Keep-alive connections are closed after their next answer.
  asio::post(ioc, [&] {
    beast::error_code ignored;
    acceptor.close(ignored);
  });
  if (watcher.joinable()) watcher.join();
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(o.timeout_s);
  while (server.in_flight.load() > 0 && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  server.batcher->stop();
  server.pool.join();
  work.reset();
  ioc.stop();
  io.join();
  std::printf("serve: stopped by signal %d; %s\n", stop_requested(),
              server.in_flight.load() == 0 ? "every request answered" : "some requests were not answered in time");
  std::fflush(stdout);
  return 0;
}

}  // namespace gantry::engine
