// The process group's parts its files share (distributed/rendezvous.cpp,
// heartbeat.cpp, collectives.cpp; the group's index is distributed.hpp):
// the heartbeat thread's state, the worker of the async small all-reduces,
// and the words their errors share. Internal to distributed/.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distributed/counting_store.hpp"
#include "distributed/distributed.hpp"

namespace gantry {

// Every rank bumps gantry/beat/<rank> twice a second over its own store
// connection, from its own thread: it goes on while the training thread waits
// in a collective, and stops when the process is stopped, hung hard or dead.
// It also adds to gantry/entered/<rank> the collectives the rank entered since
// the last beat: a rank that beats but does not come is hung in its own code.
// A store request over a link that went down (a node cut off) blocks in recv
// until TCP gives up (~15 min): the thread holds no lock while it asks, its
// state is shared with it, and the end waits for it at most 2 s, then leaves
// it to the process's exit (it touches nothing of the group's after a stop).
struct ProcessGroup::Heartbeat {
  struct State {
    c10::intrusive_ptr<c10d::Store> store;
    std::mutex m;
    std::condition_variable cv;
    bool stop = false, done = false;
    /// When the request in flight began (steady clock, ns; 0: none): one
    /// that has waited for seconds means the store does not answer this rank.
    std::atomic<int64_t> asking_since{0};
    static constexpr size_t kKept = 8;  ///< round trips kept: ~4 s of beats
    std::deque<double> round_trips_ms;  ///< the last kKept beats' (under m)
  };
  std::shared_ptr<State> st = std::make_shared<State>();
  std::thread thread;
  Heartbeat(const std::string& host, uint16_t port, int rank, std::chrono::milliseconds timeout,
            const std::atomic<int64_t>* entered, std::shared_ptr<StoreCounts> counts);
  ~Heartbeat();
};

// One thread that runs the async small all-reduces in the order they were
// started (the stop agreement's, beside the next step).
struct ProcessGroup::Worker {
  std::mutex m;
  std::condition_variable cv;
  std::deque<std::function<void()>> jobs;
  bool stop = false;
  std::thread thread{[this] { run(); }};

  ~Worker() {
    {
      std::lock_guard<std::mutex> lock(m);
      stop = true;
    }
    cv.notify_all();
    thread.join();  // after the jobs queued: each ends, at worst, at the group's timeout
  }
  std::shared_future<void> post(std::function<void()> f) {
    auto task = std::make_shared<std::packaged_task<void()>>(std::move(f));
    std::shared_future<void> done = task->get_future().share();
    {
      std::lock_guard<std::mutex> lock(m);
      jobs.emplace_back([task] { (*task)(); });
    }
    cv.notify_one();
    return done;
  }
  void run() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(m);
        cv.wait(lock, [&] { return stop || !jobs.empty(); });
        if (jobs.empty()) return;
        job = std::move(jobs.front());
        jobs.pop_front();
      }
      job();
    }
  }
};

namespace group_detail {

inline std::string seconds(std::chrono::milliseconds ms) {
  return std::to_string(ms.count() / 1000.0).substr(0, std::to_string(ms.count() / 1000).size() + 2) + " s";
}

/// "rank 3" or "ranks 1, 5".
std::string ranks_word(const std::vector<int>& ranks);

}  // namespace group_detail

}  // namespace gantry
