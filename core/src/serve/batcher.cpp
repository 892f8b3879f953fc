#include "serve/batcher.hpp"

#include <algorithm>
#include <chrono>

#include "gantry/errors.hpp"
#include "serve/http_error.hpp"
#include "serve/parse.hpp"

namespace gantry::serve {

namespace {
std::vector<int64_t> dims(c10::IntArrayRef s) { return {s.begin(), s.end()}; }
}  // namespace

Batcher::Batcher(std::function<std::shared_ptr<BatchModel>()> current, BatchLimits limits, Metrics& metrics)
    : current_(std::move(current)), limits_(limits), metrics_(metrics) {
  for (int64_t i = 0; i < std::max<int64_t>(1, limits_.workers); ++i) threads_.emplace_back([this] { run(); });
}

Batcher::~Batcher() { stop(); }

void Batcher::submit(std::unique_ptr<Job> job) {
  std::unique_lock lock(m_);
  if (stopping_) throw HttpError(503, "the server is stopping");
  if (int64_t(queue_.size()) >= limits_.max_queue)
    throw HttpError(503, "the queue is full (" + std::to_string(limits_.max_queue) + " requests): retry later");
  queue_.push_back(std::move(job));
  cv_.notify_one();
}

int64_t Batcher::depth() {
  std::lock_guard lock(m_);
  return int64_t(queue_.size());
}

void Batcher::stop() {
  {
    std::lock_guard lock(m_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

void Batcher::run() {
  torch::NoGradGuard no_grad;
  for (;;) {
    std::vector<std::unique_ptr<Job>> jobs;
    {
      std::unique_lock lock(m_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      int64_t rows = 0;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(limits_.max_wait_ms);
      for (;;) {
        while (!queue_.empty() && (jobs.empty() || rows + queue_.front()->input.size(0) <= limits_.max_batch)) {
          if (!queue_.front()->answered->load()) {  // a timed-out request is not computed
            rows += queue_.front()->input.size(0);
            jobs.push_back(std::move(queue_.front()));
          }
          queue_.pop_front();
        }
        if (rows >= limits_.max_batch || stopping_ || !queue_.empty()) break;  // full, or the next does not fit
        if (cv_.wait_until(lock, deadline, [&] { return stopping_ || !queue_.empty(); })) continue;
        break;  // the wait is over
      }
    }
    if (jobs.empty()) continue;
    std::vector<torch::Tensor> inputs;
    for (auto& j : jobs) inputs.push_back(j->input);
    const std::shared_ptr<BatchModel> model = current_();
    torch::Tensor out;
    std::exception_ptr failed;
    try {
      const torch::Tensor batch = inputs.size() == 1 ? inputs[0] : torch::cat(inputs);
      out = model->forward(batch);
      if (!out.defined() || out.dim() == 0 || out.size(0) != batch.size(0))
        throw Error("plugin " + model->name() + ": forward gave " +
                    (out.defined() ? shape_json(dims(out.sizes())) : std::string("nothing")) + " for " +
                    std::to_string(batch.size(0)) + " rows");
      metrics_.batch(batch.size(0));
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

}  // namespace gantry::serve
