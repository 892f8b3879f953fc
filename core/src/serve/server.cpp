// gantry serve's routes (docs/serve.md): GET /healthz, /readyz, /v1/info,
// /v1/sample, /metrics; POST /v1/forward. Errors are JSON {"error": "..."}:
// 4xx for the client's mistakes, naming what was wrong. Every computed
// answer names its checkpoint and step (X-Gantry-Checkpoint, X-Gantry-Step).
#include "serve/server.hpp"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>

#include "gantry/errors.hpp"
#include "runtime/runtime.hpp"
#include "serve/batcher.hpp"
#include "serve/http_error.hpp"
#include "serve/model.hpp"
#include "serve/parse.hpp"
#include "serve/swap.hpp"

namespace gantry::serve {

namespace asio = boost::asio;
namespace http = boost::beast::http;

namespace {

std::vector<int64_t> dims(c10::IntArrayRef s) { return {s.begin(), s.end()}; }

Response json(int status, const std::string& body) { return text_response(status, body, "application/json"); }

// The served model's identity on every answer it computed.
void stamp(Response& res, const ServedModel& m) {
  res.set("X-Gantry-Checkpoint", m.checkpoint);
  res.set("X-Gantry-Step", std::to_string(m.step()));
}

int pool_threads() { return int(std::clamp(std::thread::hardware_concurrency(), 2u, 8u)); }

// A request's query: its parameters, each checked against what the route takes.
class Query {
 public:
  explicit Query(const std::string& query) {
    try {
      args_ = parse_query(query);
    } catch (const std::invalid_argument& e) {
      throw HttpError(400, e.what());
    }
  }
  void only(std::initializer_list<const char*> known) const {
    for (const auto& [k, v] : args_) {
      bool ok = false;
      std::string list;
      for (const char* name : known) {
        ok |= k == name;
        list += (list.empty() ? "" : ", ") + std::string(name);
      }
      if (!ok)
        throw HttpError(400, "unknown parameter '" + json_escape(k.substr(0, 40)) + "' (" +
                                 (list.empty() ? "none taken" : list) + ")");
    }
  }
  int64_t integer(const std::string& k, int64_t def, int64_t lo, int64_t hi) const {
    const auto it = args_.find(k);
    if (it == args_.end()) return def;
    try {
      size_t used = 0;
      const long long v = std::stoll(it->second, &used);
      if (used != it->second.size() || v < lo || v > hi) throw std::out_of_range("");
      return int64_t(v);
    } catch (const std::exception&) {
      throw HttpError(400, k + "=" + it->second.substr(0, 40) + ": an integer in [" + std::to_string(lo) + ", " +
                               std::to_string(hi) + "]");
    }
  }
  std::string choice(const std::string& k, const std::string& def, std::initializer_list<const char*> ok) const {
    const auto it = args_.find(k);
    const std::string v = it == args_.end() ? def : it->second;
    std::string list;
    for (const char* c : ok) {
      if (v == c) return v;
      list += (list.empty() ? "" : " or ") + std::string(c);
    }
    throw HttpError(400, k + "=" + v.substr(0, 40) + ": " + list);
  }

 private:
  std::map<std::string, std::string> args_;
};

}  // namespace

Response text_response(int status, std::string body, const std::string& type) {
  Response res{http::status(status), 11};
  res.set(http::field::server, "gantry-serve");
  res.set(http::field::content_type, type);
  res.body() = std::move(body);
  res.prepare_payload();
  return res;
}

Response error_response(int status, const std::string& what) {
  Response res = json(status, "{\"error\": \"" + json_escape(what) + "\"}");
  if (status == 503) res.set(http::field::retry_after, "1");
  return res;
}

struct Server::Model {
  ModelSlot slot;
  std::unique_ptr<Batcher> batcher;
};

Server::Server(const engine::ServeOptions& options)
    : o(options), pool(pool_threads()), model_(std::make_unique<Model>()) {}

Server::~Server() = default;

void Server::load() {
  if (o.threads > 0) torch::set_num_threads(int(o.threads));
  std::lock_guard lock(model_->slot.rng);
  const ResolvedCheckpoint resolved = require_checkpoint(o.checkpoint, CheckpointUse::kInference);
  std::printf("checkpoint: %s\n", resolved.why.c_str());
  model_->slot.set(std::make_shared<ServedModel>(resolved, o.plugin));
  const std::shared_ptr<ServedModel> first = model_->slot.current();
  if (!first->trained.plugin_note.empty()) std::printf("%s\n", first->trained.plugin_note.c_str());
  model_->batcher = std::make_unique<Batcher>([this] { return model_->slot.current(); },
                                              BatchLimits{o.max_batch, o.max_wait_ms, o.max_queue, o.workers}, metrics);
}

std::string Server::describe() {
  const std::shared_ptr<ServedModel> m = model_->slot.current();
  return m->checkpoint + " (plugin " + m->name() + ", step " + std::to_string(m->step()) +
         (m->trained.ema_tensors > 0 ? ", EMA weights" : "") + ")";
}

void Server::watch() { watch_for_checkpoints(model_->slot, metrics, o.checkpoint, o.plugin, o.watch_interval_ms); }

void Server::drain() {
  if (model_->batcher) model_->batcher->stop();
  pool.join();
}

int64_t Server::queue_depth() { return model_->batcher ? model_->batcher->depth() : 0; }

void Server::handle(const Request& req, const std::string& path, const std::string& query, const Reply& reply,
                    const std::shared_ptr<std::atomic<bool>>& answered) {
  if (!o.token.empty() && path != "/healthz" && path != "/readyz") {
    const auto auth = req.find(http::field::authorization);
    if (auth == req.end() || std::string(auth->value()) != "Bearer " + o.token)
      throw HttpError(401, "a bearer token is needed (Authorization: Bearer TOKEN)");
  }
  auto need = [&](http::verb v) {
    if (req.method() != v)
      throw HttpError(405,
                      path + " takes " + std::string(http::to_string(v)) + ", not " + std::string(req.method_string()));
  };
  const Query args(query);
  if (path == "/healthz") {
    need(http::verb::get);
    args.only({});
    return reply(json(200, "{\"status\": \"ok\"}"));
  }
  if (path == "/readyz") {
    need(http::verb::get);
    args.only({});
    if (!ready) return reply(json(503, "{\"status\": \"loading\"}"));
    return reply(json(200, "{\"status\": \"ready\"}"));
  }
  const std::shared_ptr<ServedModel> model = model_->slot.current();
  if (path == "/v1/info") {
    need(http::verb::get);
    args.only({});
    const auto& man = model->system().manifest();
    Response res =
        json(200, "{\"plugin\": \"" + json_escape(man.name) + "\", \"version\": \"" + json_escape(man.version) +
                      "\", \"checkpoint\": \"" + json_escape(model->checkpoint) +
                      "\", \"step\": " + std::to_string(model->step()) +
                      ", \"ema\": " + (model->trained.ema_tensors > 0 ? "true" : "false") + ", \"input_shape\": " +
                      shape_json(model->input_shape) + ", \"output_shape\": " + shape_json(model->output_shape) +
                      ", \"max_batch\": " + std::to_string(o.max_batch) + ", \"max_n\": " + std::to_string(o.max_n) +
                      ", \"watch\": " + (o.watch ? "true" : "false") +
                      ", \"swaps\": " + std::to_string(metrics.swaps.load()) + "}");
    stamp(res, *model);
    return reply(std::move(res));
  }
  if (path == "/metrics") {
    need(http::verb::get);
    args.only({});
    return reply(
        text_response(200, metrics.render(queue_depth(), model ? model->step() : 0), "text/plain; version=0.0.4"));
  }
  torch::Tensor input;
  std::string format;
  int64_t rows = 0;
  if (path == "/v1/sample") {
    need(http::verb::get);
    args.only({"n", "seed", "format", "rows"});
    const int64_t n = args.integer("n", 64, 1, o.max_n);
    const int64_t seed = args.integer("seed", 0, INT64_MIN / 2, INT64_MAX / 2);
    rows = args.integer("rows", 0, 0, 4096);
    format = args.choice("format", "png", {"png", "npy", "json"});
    // The inputs `gantry sample --seed S -n N` draws (the global generator,
    // seeded), then the batcher's forward.
    std::lock_guard lock(model_->slot.rng);
    torch::manual_seed(static_cast<uint64_t>(seed));
    torch::NoGradGuard no_grad;
    input = model->system().sample_input(n, -1);
  } else if (path == "/v1/forward") {
    need(http::verb::post);
    args.only({"format", "rows"});
    const auto type = req.find(http::field::content_type);
    const bool json_body = type != req.end() && type->value().starts_with("application/json");
    format = args.choice("format", json_body ? "json" : "npy", {"npy", "json", "png"});
    rows = args.integer("rows", 0, 0, 4096);
    int64_t row_size = 1;
    for (int64_t d : model->input_shape) row_size *= d;
    try {
      if (json_body) {
        JsonRows parsed = parse_json_rows(req.body(), size_t(o.max_n * std::max<int64_t>(1, row_size)));
        input = torch::from_blob(parsed.values.data(), parsed.shape, torch::kFloat32).clone();
      } else {
        const Npy npy = parse_npy(req.body());
        input = torch::empty(npy.shape, torch::kFloat32);
        if (npy.count > 0) std::memcpy(input.data_ptr(), req.body().data() + npy.data_at, npy.count * sizeof(float));
      }
    } catch (const std::invalid_argument& e) {
      throw HttpError(400, e.what());
    }
    if (input.dim() != int64_t(model->input_shape.size()) + 1 ||
        !std::equal(model->input_shape.begin(), model->input_shape.end(), input.sizes().begin() + 1))
      throw HttpError(400, "the input is " + shape_json(dims(input.sizes())) + "; " + model->name() + " takes [N, " +
                               shape_json(model->input_shape).substr(1));
    if (input.size(0) < 1 || input.size(0) > o.max_n)
      throw HttpError(400,
                      "N = " + std::to_string(input.size(0)) + ": 1 to " + std::to_string(o.max_n) + " rows a request");
  } else {
    throw HttpError(404, "no route " + json_escape(path.substr(0, 200)) +
                             " (GET /healthz, /readyz, /v1/info, /v1/sample, /metrics; POST /v1/forward)");
  }
  // Queued for the model (a full queue throws 503); its output is encoded on
  // the pool as `format` and answered.
  auto job = std::make_unique<Job>();
  job->input = std::move(input);
  job->answered = answered;
  job->done = [this, format, rows, reply](std::shared_ptr<BatchModel> m, torch::Tensor out, std::exception_ptr failed) {
    asio::post(pool, [format, rows, reply, m = std::move(m), out = std::move(out), failed] {
      reply_with(reply, [&] {
        if (failed) std::rethrow_exception(failed);
        auto& served = static_cast<ServedModel&>(*m);  // the slot holds ServedModels only
        ServedModel::Encoded e = served.encode(out, format, rows);
        Response res = text_response(200, std::move(e.body), e.type);
        stamp(res, served);
        return res;
      });
    });
  };
  model_->batcher->submit(std::move(job));
}

void Server::reply_with(const Reply& reply, const std::function<Response()>& make) {
  Response res;
  try {
    res = make();
  } catch (const HttpError& e) {
    res = error_response(e.status, e.what());
  } catch (const std::exception& e) {
    res = error_response(500, error_text(e));
    std::fprintf(stderr, "serve: %s\n", error_text(e).c_str());
  }
  reply(std::move(res));
}

}  // namespace gantry::serve
