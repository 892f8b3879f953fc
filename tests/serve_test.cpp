// gantry serve's room in C++ (tests/serve_test.sh drives the whole server
// over HTTP): the batcher with a real model of its own (rows doubled) whose
// forward can be held, so what is queued meanwhile is known; the metrics
// page; the options declared once (serve() and the command line refuse the
// same values).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <condition_variable>
#include <future>
#include <mutex>

#include "gantry/engine.hpp"
#include "serve/batcher.hpp"
#include "serve/http_error.hpp"
#include "serve/metrics.hpp"
#include "support.hpp"

using namespace gantry;
using namespace gantry::serve;

namespace {

// Doubles its rows; remembers each forward's rows; holds a forward while
// `hold` is set; throws when asked to.
class Doubler : public BatchModel {
 public:
  torch::Tensor forward(const torch::Tensor& batch) override {
    std::unique_lock lock(m);
    batches.push_back(batch.size(0));
    entered.notify_all();
    released.wait(lock, [&] { return !hold; });
    if (fail) throw std::runtime_error("the model failed");
    if (short_rows) return batch.slice(0, 0, batch.size(0) - 1);
    return batch * 2;
  }
  std::string name() const override { return "doubler"; }
  // Waits until `n` forwards have started.
  void wait_for(size_t n) {
    std::unique_lock lock(m);
    ASSERT_TRUE(entered.wait_for(lock, std::chrono::seconds(20), [&] { return batches.size() >= n; }));
  }
  void release() {
    std::lock_guard lock(m);
    hold = false;
    released.notify_all();
  }
  std::mutex m;
  std::condition_variable entered, released;
  std::vector<int64_t> batches;
  bool hold = false, fail = false, short_rows = false;
};

struct Answer {
  torch::Tensor out;
  std::string error;
};

// A job of `rows` rows valued `value`; its answer arrives in the future.
std::unique_ptr<Job> job(int64_t rows, float value, std::promise<Answer>& answer,
                         std::shared_ptr<std::atomic<bool>> answered = std::make_shared<std::atomic<bool>>(false)) {
  auto j = std::make_unique<Job>();
  j->input = torch::full({rows, 3}, value);
  j->answered = std::move(answered);
  j->done = [&answer](std::shared_ptr<BatchModel>, torch::Tensor out, std::exception_ptr failed) {
    Answer a;
    if (failed) {
      try {
        std::rethrow_exception(failed);
      } catch (const std::exception& e) {
        a.error = e.what();
      }
    }
    a.out = out;
    answer.set_value(a);
  };
  return j;
}

}  // namespace

// Held in the first forward, three requests queue; the next forward takes
// as many as fit in max_batch (2 + 2 rows), the last runs alone; each gets
// its own rows back, doubled.
TEST(ServeBatcher, GathersWhatIsQueuedUpToMaxBatchAndAnswersEachItsRows) {
  auto model = std::make_shared<Doubler>();
  model->hold = true;
  Metrics metrics;
  Batcher batcher([model] { return model; }, BatchLimits{4, 0, 16, 1}, metrics);
  std::promise<Answer> a, b, c, d;
  batcher.submit(job(1, 1, a));
  model->wait_for(1);
  batcher.submit(job(2, 2, b));
  batcher.submit(job(2, 3, c));
  batcher.submit(job(1, 4, d));
  EXPECT_EQ(batcher.depth(), 3);
  model->release();
  const Answer ra = a.get_future().get(), rb = b.get_future().get(), rc = c.get_future().get(),
               rd = d.get_future().get();
  batcher.stop();
  EXPECT_EQ(model->batches, (std::vector<int64_t>{1, 4, 1}));
  EXPECT_TRUE(torch::equal(ra.out, torch::full({1, 3}, 2.0f)));
  EXPECT_TRUE(torch::equal(rb.out, torch::full({2, 3}, 4.0f)));
  EXPECT_TRUE(torch::equal(rc.out, torch::full({2, 3}, 6.0f)));
  EXPECT_TRUE(torch::equal(rd.out, torch::full({1, 3}, 8.0f)));
  const std::string page = metrics.render(0, 0);
  EXPECT_NE(page.find("gantry_serve_batch_rows_count 3\n"), std::string::npos) << page;
  EXPECT_NE(page.find("gantry_serve_batch_rows_bucket{le=\"1\"} 2\n"), std::string::npos) << page;
  EXPECT_NE(page.find("gantry_serve_batch_rows_bucket{le=\"4\"} 3\n"), std::string::npos) << page;
}

// A request larger than max_batch still runs (alone); one already answered
// (its timeout came first) is not computed; a full queue is 503.
TEST(ServeBatcher, OversizedRunsAloneAnsweredIsSkippedFullQueueIs503) {
  auto model = std::make_shared<Doubler>();
  model->hold = true;
  Metrics metrics;
  Batcher batcher([model] { return model; }, BatchLimits{4, 0, 2, 1}, metrics);
  std::promise<Answer> a, b, c, skipped;
  batcher.submit(job(1, 1, a));
  model->wait_for(1);
  auto timed_out = std::make_shared<std::atomic<bool>>(false);
  batcher.submit(job(3, 5, skipped, timed_out));
  batcher.submit(job(9, 2, b));
  try {
    batcher.submit(job(1, 3, c));
    ADD_FAILURE() << "a third queued request was taken with max_queue 2";
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status, 503);
    EXPECT_NE(std::string(e.what()).find("the queue is full (2 requests)"), std::string::npos) << e.what();
  }
  timed_out->store(true);
  model->release();
  a.get_future().get();
  EXPECT_TRUE(torch::equal(b.get_future().get().out, torch::full({9, 3}, 4.0f)));
  batcher.stop();
  EXPECT_EQ(model->batches, (std::vector<int64_t>{1, 9}));
  EXPECT_EQ(skipped.get_future().wait_for(std::chrono::seconds(0)), std::future_status::timeout);
}

// max_wait_ms: the first request waits for a second to join its forward.
TEST(ServeBatcher, MaxWaitGathersALaterRequest) {
  auto model = std::make_shared<Doubler>();
  Metrics metrics;
  Batcher batcher([model] { return model; }, BatchLimits{8, 1000, 16, 1}, metrics);
  std::promise<Answer> a, b;
  batcher.submit(job(2, 1, a));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  batcher.submit(job(2, 2, b));
  a.get_future().get();
  b.get_future().get();
  batcher.stop();
  EXPECT_EQ(model->batches, (std::vector<int64_t>{4}));
}

// A forward that throws, or gives other rows than it was given, reaches
// every request of its batch as an error naming the model; the batcher goes on.
TEST(ServeBatcher, AFailedForwardAnswersEachOfItsRequests) {
  auto model = std::make_shared<Doubler>();
  model->hold = true;
  model->fail = true;
  Metrics metrics;
  Batcher batcher([model] { return model; }, BatchLimits{8, 0, 16, 1}, metrics);
  std::promise<Answer> a, b, c, d;
  batcher.submit(job(1, 1, a));
  model->wait_for(1);
  batcher.submit(job(1, 1, b));
  batcher.submit(job(1, 1, c));
  model->release();
  EXPECT_EQ(a.get_future().get().error, "the model failed");
  EXPECT_EQ(b.get_future().get().error, "the model failed");
  EXPECT_EQ(c.get_future().get().error, "the model failed");
  {
    std::lock_guard lock(model->m);
    model->fail = false;
    model->short_rows = true;
  }
  batcher.submit(job(2, 1, d));
  EXPECT_EQ(d.get_future().get().error, "plugin doubler: forward gave [1, 3] for 2 rows");
  batcher.stop();
  // stop() answers what is queued; after it, a request is refused.
  std::promise<Answer> e;
  EXPECT_THROW(batcher.submit(job(1, 1, e)), HttpError);
}

TEST(ServeMetrics, RoutesAndLatencyBuckets) {
  Metrics m;
  m.request("/v1/sample", 200, 0.004);
  m.request("/v1/sample", 200, 0.2);
  m.request("/nope", 404, 0.0001);
  ++m.timeouts;
  const std::string page = m.render(7, 1200);
  EXPECT_NE(page.find("gantry_serve_requests_total{route=\"/v1/sample\",status=\"200\"} 2\n"), std::string::npos);
  EXPECT_NE(page.find("gantry_serve_requests_total{route=\"other\",status=\"404\"} 1\n"), std::string::npos);
  EXPECT_NE(page.find("gantry_serve_request_seconds_bucket{le=\"0.005\"} 2\n"), std::string::npos) << page;
  EXPECT_NE(page.find("gantry_serve_request_seconds_bucket{le=\"0.25\"} 3\n"), std::string::npos) << page;
  EXPECT_NE(page.find("gantry_serve_request_seconds_count 3\n"), std::string::npos);
  EXPECT_NE(page.find("gantry_serve_queue_depth 7\n"), std::string::npos);
  EXPECT_NE(page.find("gantry_serve_model_step 1200\n"), std::string::npos);
  EXPECT_NE(page.find("gantry_serve_timeouts_total 1\n"), std::string::npos);
}

// Each number is declared once: serve() refuses a value out of its bounds
// naming the flag, and the command line refuses the same value and takes
// the bound.
TEST(ServeOptions, DeclaredOnceServeAndTheCommandLineAgree) {
  ASSERT_GE(engine::serve_options().size(), 10u);
  gantry::test::TempDir dir;
  const std::string help = gantry::test::run_gantry("serve --help", dir.path()).out;
  for (const engine::ServeOption& o : engine::serve_options()) {
    SCOPED_TRACE(o.flag);
    EXPECT_NE(help.find(o.flag), std::string::npos) << help;
    engine::ServeOptions bad;
    bad.*o.field = o.min - 1;
    try {
      engine::check_serve_options(bad);
      ADD_FAILURE() << "accepted " << o.min - 1;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), std::string("serve: ") + o.flag + " " + std::to_string(o.min - 1) +
                                           " is not in [" + std::to_string(o.min) + ", " + std::to_string(o.max) + "]");
    }
    engine::ServeOptions edge;
    edge.*o.field = o.max;
    EXPECT_NO_THROW(engine::check_serve_options(edge));
    const auto r = gantry::test::run_gantry(
        std::string("serve /nonexistent ") + o.flag + " " + std::to_string(o.max + 1), dir.path());
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find(o.flag), std::string::npos) << r.err;
  }
  EXPECT_NO_THROW(engine::check_serve_options(engine::ServeOptions{}));  // the defaults are in bounds
}
