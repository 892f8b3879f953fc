#include "distributed/distributed.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <random>

#include "distributed/counting_store.hpp"
#include "distributed/shm_allreduce.hpp"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <sstream>
#include <cstdlib>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>
#include <type_traits>

#include "gantry/errors.hpp"
#include "runtime/runtime.hpp"
#if GANTRY_WITH_CUDA
#include "distributed/cuda.hpp"
#endif

namespace gantry {

std::string nccl_version_text(uint64_t packed) {
  return std::to_string(packed >> 32) + "." + std::to_string((packed >> 16) & 0xffff) + "." +
         std::to_string(packed & 0xffff);
}

namespace {

std::string seconds(std::chrono::milliseconds ms) {
  return std::to_string(ms.count() / 1000.0).substr(0, std::to_string(ms.count() / 1000).size() + 2) + " s";
}

bool is_loopback(const std::string& host) { return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1"; }

// The local address of the interface that routes to the master: what Gloo
// binds to, so that peers on other hosts (or network namespaces) reach it.
// A connected UDP socket sends nothing; it only asks the kernel for a route.
std::string local_address_towards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res) return "";
  std::string out;
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof local;
    char buf[INET_ADDRSTRLEN] = {};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        ::inet_ntop(AF_INET, &local.sin_addr, buf, sizeof buf))
      out = buf;
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(res);
  return out;
}

// LibTorch 1.13: ProcessGroupGloo is itself a c10d::ProcessGroup. 2.x: it is
// a c10d::Backend, and a ProcessGroup dispatches to it by device type.
c10::intrusive_ptr<c10d::ProcessGroup> make_gloo_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                       c10::intrusive_ptr<c10d::ProcessGroupGloo::Options> options) {
#if TORCH_VERSION_MAJOR >= 2
  auto backend = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, std::move(options));
  auto group = c10::make_intrusive<c10d::ProcessGroup>(store, rank, size);
  group->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
  group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, backend);
  return group;
#else
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, std::move(options));
#endif
}

#if TORCH_VERSION_MAJOR >= 2
// c10d::Reducer's constructor grew trailing arguments during 2.x (2.15 has
// skip_all_reduce_unused_params, use_python_reducer and the caps to rebuild
// buckets with; earlier 2.x releases end at first_bucket_bytes_cap): the
// longest form this LibTorch has, with DDP's defaults. A template, so that
// only the chosen branch is compiled.
template <class R>
std::shared_ptr<R> new_reducer(std::vector<at::Tensor> params, std::vector<std::vector<size_t>> buckets,
                               c10::intrusive_ptr<c10d::ProcessGroup> group, std::vector<bool> sparse,
                               int64_t first_bucket, int64_t bucket) {
  using Names = std::unordered_map<size_t, std::string>;
  using Group = c10::intrusive_ptr<c10d::ProcessGroup>;
  using Tensors = std::vector<at::Tensor>;
  using Buckets = std::vector<std::vector<size_t>>;
  if constexpr (std::is_constructible_v<R, Tensors, Buckets, Group, std::vector<bool>, int64_t, bool, bool, Names,
                                        int64_t, bool, bool, std::vector<int64_t>>) {
    return std::make_shared<R>(std::move(params), std::move(buckets), std::move(group), std::move(sparse), bucket,
                               /*find_unused_parameters=*/false, /*gradient_as_bucket_view=*/false, Names{},
                               first_bucket, /*skip_all_reduce_unused_params=*/false,
                               /*use_python_reducer=*/false, std::vector<int64_t>{first_bucket, bucket});
  } else if constexpr (std::is_constructible_v<R, Tensors, Buckets, Group, std::vector<bool>, int64_t, bool, bool,
                                               Names, int64_t, bool, bool>) {
    return std::make_shared<R>(std::move(params), std::move(buckets), std::move(group), std::move(sparse), bucket,
                               false, false, Names{}, first_bucket, false, false);
  } else if constexpr (std::is_constructible_v<R, Tensors, Buckets, Group, std::vector<bool>, int64_t, bool, bool,
                                               Names, int64_t, bool>) {
    return std::make_shared<R>(std::move(params), std::move(buckets), std::move(group), std::move(sparse), bucket,
                               false, false, Names{}, first_bucket, false);
  } else {
    return std::make_shared<R>(std::move(params), std::move(buckets), std::move(group), std::move(sparse), bucket,
                               false, false, Names{}, first_bucket);
  }
}
#endif

}  // namespace

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
            const std::atomic<int64_t>* entered, std::shared_ptr<StoreCounts> counts) {
    c10d::TCPStoreOptions o;
    o.port = port;
    o.isServer = false;
    o.waitWorkers = false;
    o.timeout = timeout;
    st->store = c10::make_intrusive<CountingStore>(c10::make_intrusive<c10d::TCPStore>(host, o), std::move(counts));
    thread = std::thread([st = st, entered, beat = "gantry/beat/" + std::to_string(rank),
                          progress = "gantry/entered/" + std::to_string(rank)] {
      int64_t published = 0;
      try {
        for (;;) {
          int64_t now = 0;
          {
            std::lock_guard<std::mutex> lock(st->m);
            if (st->stop) break;
            now = entered->load(std::memory_order_relaxed);  // the group lives while !stop
          }
          const auto asked = std::chrono::steady_clock::now();
          st->asking_since.store(asked.time_since_epoch().count());
          st->store->add(beat, 1);
          {
            std::lock_guard<std::mutex> lock(st->m);
            st->round_trips_ms.push_back(
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - asked).count());
            if (st->round_trips_ms.size() > State::kKept) st->round_trips_ms.pop_front();
          }
          if (now != published) {
            st->store->add(progress, now - published);
            published = now;
          }
          st->asking_since.store(0);
          std::unique_lock<std::mutex> lock(st->m);
          if (st->cv.wait_for(lock, std::chrono::milliseconds(500), [&] { return st->stop; })) break;
        }
      } catch (const std::exception&) {
        // the store is gone (rank 0 ended): nobody is listening
      }
      std::lock_guard<std::mutex> lock(st->m);
      st->done = true;
      st->cv.notify_all();
    });
  }
  ~Heartbeat() {
    std::unique_lock<std::mutex> lock(st->m);
    st->stop = true;
    st->cv.notify_all();
    const bool ended = st->cv.wait_for(lock, std::chrono::seconds(2), [&] { return st->done; });
    lock.unlock();
    if (ended)
      thread.join();
    else
      thread.detach();  // blocked on a dead link: the process's exit ends it
  }
};

namespace {

std::string join_ranks(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

std::string ranks_word(const std::vector<int>& ranks) {
  return std::string(ranks.size() == 1 ? "rank " : "ranks ") + join_ranks(ranks);
}

// Ranks in order with runs of three or more as ranges: "ranks 8-11, 20".
std::string ranks_ranges(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    s += s.empty() ? "" : ", ";
    if (j - i >= 2) {
      s += std::to_string(ranks[i]) + "-" + std::to_string(ranks[j]);
      i = j + 1;
    } else {
      s += std::to_string(ranks[i]);
      ++i;
    }
  }
  return std::string(ranks.size() == 1 ? "rank " : "ranks ") + s;
}

}  // namespace

std::string ranks_by_node(const std::vector<int>& ranks, const std::vector<std::string>& node_of) {
  std::vector<std::string> order;  // nodes in the order of their first named rank
  std::map<std::string, std::vector<int>> named;
  for (int r : ranks) {
    const std::string& n = r >= 0 && size_t(r) < node_of.size() ? node_of[size_t(r)] : std::string();
    if (!named.count(n)) order.push_back(n);
    named[n].push_back(r);
  }
  std::string out;
  for (const std::string& n : order) {
    const std::vector<int>& mine = named[n];
    const auto all = n.empty() ? 0 : std::count(node_of.begin(), node_of.end(), n);
    out += out.empty() ? "" : "; ";
    if (n.empty())
      out += ranks_ranges(mine);
    else if (size_t(all) == mine.size())
      out += n + " (" + ranks_ranges(mine) +
             (all > 1 ? ", all " + std::to_string(all) + " of its ranks)" : ", its one rank)");
    else
      out +=
          ranks_ranges(mine) + " (" + n + ", " + std::to_string(mine.size()) + " of its " + std::to_string(all) + ")";
  }
  return out;
}

namespace {

// `gantry launch` reads which ranks its ranks named (one line per verdict on
// the descriptor it passes), to name them in its summary and kill them at once.
void report_to_launcher(const std::vector<int>& ranks, int me, const std::string& text) {
  const char* fd_text = std::getenv("GANTRY_LAUNCH_REPORT_FD");
  if (!fd_text || ranks.empty()) return;
  const int fd = std::atoi(fd_text);
  std::string line = "silent ";
  for (size_t i = 0; i < ranks.size(); ++i) line += (i ? "," : "") + std::to_string(ranks[i]);
  line +=
      " by " + std::to_string(me) + ": " + text.substr(0, 3000) + "\n";  // one write below PIPE_BUF: not interleaved
  if (fd > 2) {
    const ssize_t n = ::write(fd, line.data(), line.size());
    (void)n;
  }
}

}  // namespace

std::vector<double> ProcessGroup::store_round_trips_ms() {
  if (!heartbeat_) return {};
  Heartbeat::State& st = *heartbeat_->st;
  std::lock_guard<std::mutex> lock(st.m);
  return {st.round_trips_ms.begin(), st.round_trips_ms.end()};
}

std::string ProcessGroup::silent_ranks() {
  if (env_.world_size < 2) return "";
  const auto started = std::chrono::steady_clock::now();
  const std::string me = std::to_string(env_.rank);
  std::vector<int> named;
  std::string verdict;
  auto bytes = [](const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); };
  if (heartbeat_ && env_.rank != 0) {
    // The heartbeat's request has waited for seconds: asking the store now
    // would block as long (its socket's timeout is the group's, and
    // setTimeout bounds only waits), doubling the time a cut-off node's
    // ranks take to end.
    const int64_t since = heartbeat_->st->asking_since.load();
    const double waited = since == 0
                              ? 0
                              : std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch() -
                                                              std::chrono::steady_clock::duration(since))
                                    .count();
    if (waited >= 5)
      return "rank 0 stopped responding (its rendezvous store has not answered this rank's heartbeat for " +
             std::to_string(int(waited)) + " s: rank 0 is stopped or hung, or this rank's node is cut off from it)";
  }
  try {
    store_->setTimeout(std::chrono::seconds(2));
    if (store_->check({"gantry/verdict"})) {  // another rank judged already: "1,5|text"
      const auto v = store_->get("gantry/verdict");
      const std::string stored(v.begin(), v.end());
      const size_t bar = stored.find('|');
      verdict = bar == std::string::npos ? stored : stored.substr(bar + 1);
      std::stringstream list(stored.substr(0, bar == std::string::npos ? 0 : bar));
      for (std::string r; std::getline(list, r, ',');)
        if (!r.empty()) named.push_back(std::atoi(r.c_str()));
    } else {
      auto read = [&](const char* prefix) {
        std::vector<int64_t> v;
        for (int r = 0; r < env_.world_size; ++r) v.push_back(store_->add(prefix + std::to_string(r), 0));
        return v;
      };
      const auto before = read("gantry/beat/");
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      const auto after = read("gantry/beat/");
      const auto entered = read("gantry/entered/");
      const int64_t mine = entered_.load(std::memory_order_relaxed);
      std::vector<int> silent, hung;
      for (int r = 0; r < env_.world_size; ++r) {
        if (r == env_.rank || store_->check({"gantry/ended/" + std::to_string(r)}))
          continue;  // it left: its output says why
        if (after[r] == before[r])
          silent.push_back(r);
        else if (entered[r] < mine)
          hung.push_back(r);
      }
      // A silent rank explains every other wait: a rank behind this one may be
      // blocked in an earlier exchange with it (Gloo lets some ranks finish a
      // collective that the silent one never finished with the others), so
      // the alive-but-absent are named only when no rank is silent.
      if (!silent.empty()) hung.clear();
      if (!silent.empty()) {
        // Across nodes, the silent ranks by node (their rendezvous keys hold
        // their nodes: N requests once, at a failure): a whole node silent is
        // a node down or cut off.
        std::vector<std::string> node_of;
        if (env_.num_nodes > 1)
          for (int r = 0; r < env_.world_size; ++r) {
            const auto v = store_->get("gantry/arrived/" + std::to_string(r));
            node_of.emplace_back(v.begin(), v.end());
          }
        verdict = (node_of.empty() ? ranks_word(silent) : ranks_by_node(silent, node_of)) +
                  " stopped responding (no heartbeat for 1.5 s: stopped, hung or dead" +
                  (node_of.empty() ? ")" : ", or its node is down or cut off)");
      }
      if (!hung.empty())
        verdict += (verdict.empty() ? "" : "; ") + ranks_word(hung) + (hung.size() == 1 ? " is" : " are") +
                   " alive but never came to this exchange (busy or hung in its own code: the plugin's step, "
                   "data loading)";
      named = silent;
      named.insert(named.end(), hung.begin(), hung.end());
      if (!verdict.empty()) {
        std::string list;
        for (int r : named) list += (list.empty() ? "" : ",") + std::to_string(r);
        store_->set("gantry/verdict", bytes(list + "|" + verdict));
      }
    }
    store_->set("gantry/ended/" + me, bytes("1"));  // leaving: not to be blamed, and rank 0 may go
    if (env_.rank == 0) {
      // This process holds the store: stay until every other rank has asked
      // (or is among the named, or ended), so that none finds it gone.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(4);
      while (std::chrono::steady_clock::now() < deadline) {
        bool all = true;
        for (int r = 1; r < env_.world_size && all; ++r)
          all = std::find(named.begin(), named.end(), r) != named.end() ||
                store_->check({"gantry/ended/" + std::to_string(r)});
        if (all) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  } catch (const std::exception&) {
    if (verdict.empty() && env_.rank != 0) {
      // The store is in rank 0's process: refused at once, rank 0 is gone;
      // no answer within the timeout, it is stopped or hung.
      const bool quick = std::chrono::steady_clock::now() - started < std::chrono::milliseconds(1000);
      return quick ? "rank 0 ended before this rank could learn who stopped responding (rank 0's output says why)"
                   : "rank 0 stopped responding (its rendezvous store does not answer)";
    }
  }
  report_to_launcher(named, env_.rank, verdict);
  return verdict;
}

std::string check_file_limit(int rank, int world_size) {
  // Measured (2 and 8 ranks on one host): rank 0 holds ~24 + 5 descriptors
  // per rank (the rendezvous store's connections, Gloo's pairs), every other
  // rank ~13 + 1 per rank; with margin for data, checkpoints, images, CUDA.
  const uint64_t need = 64 + uint64_t(rank == 0 ? 6 : 2) * uint64_t(world_size);
  const auto [soft, hard] = file_limits();
  if (soft == 0 || soft >= need) return "";
  return "this process may open " + std::to_string(soft) + " files (ulimit -n; hard limit " + std::to_string(hard) +
         "), and with " + std::to_string(world_size) + " ranks rank " + (rank == 0 ? "0" : "N > 0") + " needs about " +
         std::to_string(need) + " (a socket to every rank" + (rank == 0 ? ", two store connections per rank" : "") +
         "): raise it, e.g. `ulimit -n " + std::to_string(std::max<uint64_t>(4096, 2 * need)) +
         "` before gantry (under SLURM: the limit srun propagates, --propagate=NOFILE)";
}

namespace {

// LibTorch's socket errors for a full descriptor table: one more sentence.
std::string with_file_limit_hint(const std::string& text) {
  if (text.find("Too many open files") == std::string::npos) return text;
  const auto [soft, hard] = file_limits();
  return text + " (this process may open " + std::to_string(soft) + " files, hard limit " + std::to_string(hard) +
         ": raise it with ulimit -n)";
}

}  // namespace

ProcessGroup::ProcessGroup(const DistEnv& env, std::chrono::milliseconds timeout, bool nccl)
    : env_(env),
      timeout_(timeout),
      counts_(std::make_shared<StoreCounts>()),
      beat_counts_(std::make_shared<StoreCounts>()) {
  env_.master_addr = resolve_master_host(env.master_addr);
  const std::string where = env_.master_addr + ":" + std::to_string(env.master_port);
  const std::string me = "rank " + std::to_string(env.rank);
  raise_file_limit();
  if (const std::string short_of = check_file_limit(env.rank, env.world_size); !short_of.empty())
    throw Error(me + ": " + short_of);
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(env.master_port);
  opts.isServer = env.rank == 0;
  opts.numWorkers = env.world_size;
  opts.waitWorkers = false;  // we wait ourselves, to name who is missing
  opts.timeout = timeout;
  try {
    store_ = c10::make_intrusive<CountingStore>(c10::make_intrusive<c10d::TCPStore>(env_.master_addr, opts), counts_);
  } catch (const std::exception& e) {
    throw Error(me + ": " +
                (env.rank == 0 ? "cannot listen on " + where
                               : "cannot reach the master (rank 0) at " + where + " within " + seconds(timeout)) +
                ": " + with_file_limit_hint(error_text(e)));
  }
  // Everyone checks in: one counter, bumped once by each rank; the rank that
  // makes it whole writes "ok" under gantry/rendezvous, which every rank
  // waits for (one request each, answered by the store when the key is set).
  // When rank 0's wait ends first, it reads the arrival keys and writes the
  // missing ranks there instead, so that the ranks that did arrive name them
  // too before its store goes, and stays until they have read it (at most
  // 3 s). The first to bump gantry/rendezvous_decided writes. A wait that
  // timed out leaves its connection out of step (the store answers it later),
  // so what follows goes over a new one. (Before: every rank polled every
  // rank's key every 50 ms, N x N requests a round on rank 0's store.)
  const std::string verdict_key = "gantry/rendezvous";
  const std::string never = " never arrived at the rendezvous on " + where;
  const std::string hint = " (not started, crashed, or another MASTER_ADDR/PORT?)";
  auto bytes = [](const std::string& t) { return std::vector<uint8_t>(t.begin(), t.end()); };
  auto client = [&]() -> c10::intrusive_ptr<c10d::Store> {
    c10d::TCPStoreOptions o = opts;
    o.isServer = false;
    o.timeout = std::chrono::seconds(10);
    return c10::make_intrusive<CountingStore>(c10::make_intrusive<c10d::TCPStore>(env_.master_addr, o), counts_);
  };
  auto decide = [&](c10d::Store& s, const std::string& text) {
    if (s.add("gantry/rendezvous_decided", 1) == 1) s.set(verdict_key, bytes(text));
  };
  auto missing_in = [&](c10d::Store& s) {
    std::vector<int> missing;
    for (int r = 0; r < env.world_size; ++r)
      if (!s.check({"gantry/arrived/" + std::to_string(r)})) missing.push_back(r);
    return missing;
  };
  std::string verdict;
  try {
    store_->set("gantry/arrived/" + std::to_string(env.rank), bytes(node_name()));  // who is where, for a verdict
    if (store_->add("gantry/arrivals", 1) == env.world_size) decide(*store_, "ok");
    // Rank 0's store_ is the store itself (it cannot be replaced): it waits over a connection of its own.
    c10::intrusive_ptr<c10d::Store> waiter = env.rank == 0 ? client() : store_;
    bool timed_out = false;
    try {
      waiter->wait({verdict_key}, timeout);
    } catch (const std::exception&) {
      timed_out = true;
    }
    if (timed_out) {
      if (env.rank != 0) store_ = client();  // throws when rank 0 (and its store) is gone: below
      std::vector<int> missing = missing_in(*store_);
      if (!missing.empty() && env.rank != 0 && !store_->check({verdict_key}))
        throw Error(me + ": " + ranks_word(missing) + " of " + std::to_string(env.world_size) + never + " within " +
                    seconds(timeout) + hint);
      std::string list;
      for (int r : missing) list += (list.empty() ? "" : ",") + std::to_string(r);
      if (env.rank == 0) decide(*store_, missing.empty() ? "ok" : "missing " + list);
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!store_->check({verdict_key}) && std::chrono::steady_clock::now() < until)  // the decider's set
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const auto v = store_->get(verdict_key);
    verdict.assign(v.begin(), v.end());
    if (verdict != "ok" && env.rank != 0) store_->add("gantry/rendezvous_read", 1);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    // The store lives in rank 0's process: it is gone.
    throw Error(me + ": the rendezvous on " + where + " ended (rank 0 is gone; its output says why): " + error_text(e));
  }
  if (verdict != "ok") {
    std::vector<int> missing;
    std::stringstream list(verdict.substr(verdict.find(' ') + 1));
    for (std::string r; std::getline(list, r, ',');) missing.push_back(std::atoi(r.c_str()));
    if (env.rank == 0) {  // stay until every rank that arrived has read why
      const int64_t readers = env.world_size - 1 - int64_t(missing.size());
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
      try {
        while (store_->add("gantry/rendezvous_read", 0) < readers && std::chrono::steady_clock::now() < deadline)
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
      } catch (const std::exception&) {
      }
      throw Error(me + ": " + ranks_word(missing) + " of " + std::to_string(env.world_size) + never + " within " +
                  seconds(timeout) + hint);
    }
    throw Error(me + ": " + ranks_word(missing) + " of " + std::to_string(env.world_size) + never +
                "; rank 0 gave up waiting first and ended it" + hint);
  }
  try {
    heartbeat_ = std::make_unique<Heartbeat>(env_.master_addr, opts.port, env.rank, timeout, &entered_, beat_counts_);
  } catch (const std::exception& e) {
    throw Error(me + ": cannot open a second connection to the rendezvous store on " + where + ": " +
                with_file_limit_hint(error_text(e)));
  }
  auto gloo = c10d::ProcessGroupGloo::Options::create();
  gloo->timeout = timeout;
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"))
    gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  else if (is_loopback(env_.master_addr))
    gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  else if (const std::string local = local_address_towards(env_.master_addr, env_.master_port); !local.empty())
    gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(local));
  else
    gloo->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  try {
    pg_ = make_gloo_group(c10::make_intrusive<c10d::PrefixStore>("gloo", store_), env.rank, env.world_size, gloo);
  } catch (const std::exception& e) {
    throw Error(me + ": cannot connect the Gloo process group: " + with_file_limit_hint(error_text(e)));
  }
  if (!nccl) {
    report_counts("start-up");
    return;
  }
#if GANTRY_WITH_CUDA
  try {  // NCCL's communicator itself is made at the first CUDA collective (the broadcast of rank 0's weights)
    cuda::add_nccl_backend(*pg_, c10::make_intrusive<c10d::PrefixStore>("nccl", store_), env.rank, env.world_size,
                           timeout);
  } catch (const std::exception& e) {
    throw Error(me + ": cannot create the NCCL process group: " + error_text(e));
  }
#else
  throw Error(me + ": NCCL asked for, but this gantry was built against a LibTorch without CUDA");
#endif
  report_counts("start-up");
}

void ProcessGroup::report_counts(const std::string& when) {
  static const bool wanted = [] {
    const char* v = std::getenv("GANTRY_DIST_STATS");
    return v && *v && std::string(v) != "0";
  }();
  if (!wanted) return;
  const double unix_now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  rusage self{};
  ::getrusage(RUSAGE_SELF, &self);
  const double cpu = double(self.ru_utime.tv_sec + self.ru_stime.tv_sec) +
                     1e-6 * double(self.ru_utime.tv_usec + self.ru_stime.tv_usec);
  std::fprintf(stderr,
               "gantry dist stats: rank %d of %d, %s, unix %.3f, cpu %.3f s: store requests %s; heartbeat requests "
               "%lld; collectives %lld\n",
               env_.rank, env_.world_size, when.c_str(), unix_now, cpu, counts_->text().c_str(),
               static_cast<long long>(beat_counts_->total()),
               static_cast<long long>(entered_.load(std::memory_order_relaxed)));
}

ProcessGroup::~ProcessGroup() {
  report_counts("the end");
  try {  // leaving: a failure another rank notices from now on is not this rank's
    store_->setTimeout(std::chrono::seconds(1));
    store_->set("gantry/ended/" + std::to_string(env_.rank), std::vector<uint8_t>{'1'});
  } catch (const std::exception&) {
  }
  heartbeat_.reset();
}

c10::intrusive_ptr<c10d::ProcessGroup> ProcessGroup::group() const { return pg_; }

std::string ProcessGroup::share(const std::string& key, const std::string& value) {
  if (env_.rank == 0) {
    entering();  // the others enter collective() below
    store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
    return value;
  }
  std::vector<uint8_t> v;
  collective("waiting for rank 0's shared value", [&] { v = store_->get(key); });
  return std::string(v.begin(), v.end());
}

void ProcessGroup::barrier() {
  torch::Tensor t = torch::zeros({1});
  allreduce_sum(t);
}

std::vector<std::string> ProcessGroup::gather_status(const std::string& record) {
  // Fixed slots of bytes (a length, then the record): one gather to rank 0,
  // one message from each other rank, instead of a store key per rank that
  // rank 0 read one request at a time.
  constexpr int64_t kSlot = 1024;
  if (record.size() + 4 > size_t(kSlot))
    throw Error("rank " + std::to_string(env_.rank) + ": a status record of " + std::to_string(record.size()) +
                " bytes (at most " + std::to_string(kSlot - 4) + ")");
  torch::Tensor mine = torch::zeros({kSlot}, torch::kUInt8);
  const uint32_t n = static_cast<uint32_t>(record.size());
  std::memcpy(mine.data_ptr(), &n, 4);
  std::memcpy(static_cast<uint8_t*>(mine.data_ptr()) + 4, record.data(), record.size());
  std::vector<std::vector<torch::Tensor>> all;
  if (env_.rank == 0) {
    all.emplace_back();
    for (int r = 0; r < env_.world_size; ++r) all[0].push_back(torch::empty({kSlot}, torch::kUInt8));
  }
  std::vector<torch::Tensor> in{mine};
  c10d::GatherOptions o;
  o.rootRank = 0;
  o.timeout = timeout_;
  collective("gathering the ranks' status", [&] { pg_->gather(all, in, o)->wait(); });
  std::vector<std::string> out;
  if (env_.rank != 0) return out;
  for (const torch::Tensor& t : all[0]) {
    uint32_t len = 0;
    std::memcpy(&len, t.data_ptr(), 4);
    out.emplace_back(static_cast<const char*>(t.data_ptr()) + 4, std::min<uint32_t>(len, kSlot - 4));
  }
  return out;
}

template <class F>
void ProcessGroup::collective(const char* what, F&& f) {
  entering();
  try {
    f();
  } catch (const std::exception& e) {
    const std::string silent = silent_ranks();
    throw Error("rank " + std::to_string(env_.rank) + ": " + what + " failed: " +
                (silent.empty() ? "another rank died or stopped responding (see its output" : silent + " (") +
                "; timeout " + seconds(timeout_) + "): " + error_text(e));
  }
}

void ProcessGroup::broadcast(const std::vector<torch::Tensor>& tensors) {
  if (tensors.empty()) return;
  collective("broadcast from rank 0", [&] { c10d::broadcast_coalesced(pg_, tensors, 16 * 1024 * 1024, 0); });
}

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

bool ProcessGroup::small(const torch::Tensor& t) const {
  return env_.world_size > 1 && t.numel() > 0 && t.device().is_cpu() && t.is_contiguous() && !t.is_sparse() &&
         int64_t(t.numel()) * int64_t(t.element_size()) <= kSmallAllreduceBytes;
}

// Recursive doubling. With p the largest power of two <= N, ranks p..N-1
// first hand their value to rank r - p and at the end get the result back
// from it; ranks 0..p-1 exchange with rank r ^ 1, r ^ 2, ..., r ^ p/2, each
// round both partners combining the same two operands (a + b == b + a in
// IEEE arithmetic, and max is symmetric), so every rank ends with the same
// bits. Per rank: log2(p) rounds (+2 for the ranks folded in), one message
// each way a round; Gloo's ring takes 2(N-1) steps one after another.
// Messages go through Gloo's unbound buffers under plain tags (its
// collectives' slots carry a prefix byte above bit 56: no clash); the tag
// holds `seq` and the round.
void ProcessGroup::tree_allreduce(torch::Tensor& t, Op op, uint32_t seq) {
  const int n = env_.world_size, r = env_.rank;
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const auto tag = [seq](int round) { return int((1u << 30) | ((seq & 0xFFFFFFu) << 6) | uint32_t(round)); };
  torch::Tensor other = torch::empty_like(t);
  const auto combine = [&] {
    if (op == Op::kSum)
      t.add_(other);
    else
      t.copy_(torch::maximum(t, other));
  };
  const auto send = [&](int to, int round) {
    std::vector<torch::Tensor> v{t};
    return pg_->send(v, to, tag(round));
  };
  const auto recv = [&](int from, int round) {
    std::vector<torch::Tensor> v{other};
    return pg_->recv(v, from, tag(round));
  };
  if (r >= p) {  // folded in: hand over, then receive the result
    send(r - p, 0)->wait();
    std::vector<torch::Tensor> v{t};
    pg_->recv(v, r - p, tag(63))->wait();
    return;
  }
  if (r + p < n) {
    recv(r + p, 0)->wait();
    combine();
  }
  int round = 1;
  for (int mask = 1; mask < p; mask *= 2, ++round) {
    const int partner = r ^ mask;
    auto in = recv(partner, round);
    auto out = send(partner, round);
    out->wait();
    in->wait();
    combine();
  }
  if (r + p < n) send(r + p, 63)->wait();
}

void ProcessGroup::allreduce_sum(torch::Tensor& t) {
  collective("all-reduce", [&] {
    if (small(t)) return tree_allreduce(t, Op::kSum, small_seq_++);
    std::vector<torch::Tensor> v{t};
    pg_->allreduce(v)->wait();
  });
}

std::function<void()> ProcessGroup::allreduce_max_async(torch::Tensor& t) {
  if (small(t)) {
    const uint32_t seq = small_seq_++;
    std::shared_future<void> done;
    collective("all-reduce", [&] {
      if (!worker_) worker_ = std::make_unique<Worker>();
      done = worker_->post([this, t, seq]() mutable { tree_allreduce(t, Op::kMax, seq); });
    });
    return [this, done] { collective("all-reduce", [&] { done.get(); }); };
  }
  std::vector<torch::Tensor> v{t};
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::MAX;
  c10::intrusive_ptr<c10d::Work> work;
  collective("all-reduce", [&] { work = pg_->allreduce(v, o); });
  return [this, work] { collective("all-reduce", [&] { work->wait(); }); };
}

std::vector<torch::Tensor> ProcessGroup::allgather(const torch::Tensor& t) {
  std::vector<std::vector<torch::Tensor>> out(1);
  for (int r = 0; r < env_.world_size; ++r) out[0].push_back(torch::empty_like(t));
  std::vector<torch::Tensor> in{t.contiguous()};
  collective("all-gather", [&] { pg_->allgather(out, in)->wait(); });
  return out[0];
}

void ProcessGroup::allreduce_max(torch::Tensor& t) {
  collective("all-reduce", [&] {
    if (small(t)) return tree_allreduce(t, Op::kMax, small_seq_++);
    std::vector<torch::Tensor> v{t};
    c10d::AllreduceOptions o;
    o.reduceOp = c10d::ReduceOp::MAX;
    pg_->allreduce(v, o)->wait();
  });
}

GradSync::GradSync(ProcessGroup& pg, std::vector<torch::Tensor> params, Transport transport, bool fp16)
    : params_(params), pg_(&pg), world_(pg.world_size()) {
  bool float_cpu = true;
  size_t count = 0;
  for (const auto& p : params_) {
    float_cpu = float_cpu && p.device().is_cpu() && p.scalar_type() == torch::kFloat;
    count += static_cast<size_t>(p.numel());
  }
  if (transport == Transport::kShm && float_cpu) {
    // Rank 0 creates the segment under a random name, then shares the name;
    // the others open it. Every rank says whether it could; only if all could
    // is it used (a rank may see another /dev/shm, e.g. in a container), else
    // all fall back to Gloo together. Rank 0 removes the name at once either
    // way: nothing is left in /dev/shm, whatever happens to the job later.
    const int id = pg.next_id();
    const double timeout_s = std::chrono::duration<double>(pg.timeout()).count();
    std::unique_ptr<ShmAllreduce> shm;
    std::string why;
    std::string name;
    // The segment's bound: rank 0's, shared with the name ("name budget").
    size_t budget = ShmAllreduce::kSegmentBudget;
    if (pg.rank() == 0) {
      if (const char* mib = std::getenv("GANTRY_SHM_SEGMENT_MIB"); mib && std::atoll(mib) > 0)
        budget = size_t(std::atoll(mib)) << 20;
      std::random_device rd;
      name = "/gantry-" + std::to_string(::getpid()) + "-" + std::to_string(rd()) + "-" + std::to_string(id);
      try {
        shm = std::make_unique<ShmAllreduce>(name, 0, pg.world_size(), count, true, timeout_s, 5.0, budget);
        name += " " + std::to_string(budget);
      } catch (const Error& e) {
        why = e.what();
        name.clear();
      }
    }
    name = pg.share("gantry/shm/" + std::to_string(id), name);
    if (pg.rank() != 0 && !name.empty()) {
      const size_t space = name.find(' ');
      budget = size_t(std::stoull(name.substr(space + 1)));
      name.resize(space);
      try {
        shm = std::make_unique<ShmAllreduce>(name, pg.rank(), pg.world_size(), count, false, timeout_s, 5.0, budget);
      } catch (const Error& e) {
        why = e.what();
      }
    }
    torch::Tensor ready = torch::full({1}, shm ? 1.0f : 0.0f);
    pg.allreduce_sum(ready);
    if (pg.rank() == 0 && shm) shm->unlink();
    if (ready.item<float>() == static_cast<float>(pg.world_size())) {
      shm_ = std::move(shm);
      return;
    }
    if (!why.empty())
      std::fprintf(stderr, "rank %d: %s; gradients are averaged with Gloo instead\n", pg.rank(), why.c_str());
  }
  constexpr int64_t kFirstBucket = 1024 * 1024, kBucket = 25 * 1024 * 1024;  // DDP's defaults
  const std::vector<bool> sparse(params.size(), false);
  auto [buckets, limits] =
      c10d::compute_bucket_assignment_by_size(params, {size_t(kFirstBucket), size_t(kBucket)}, sparse);
  // Gradients become ready last layer first: reduce the buckets in that order (as DDP does).
  std::reverse(buckets.begin(), buckets.end());
  std::reverse(limits.begin(), limits.end());
#if TORCH_VERSION_MAJOR >= 2
  // 2.x takes no per-bucket limits (they are the buckets' own).
  (void)limits;
  reducer_ =
      new_reducer<c10d::Reducer>(std::move(params), std::move(buckets), pg.group(), sparse, kFirstBucket, kBucket);
#else
  reducer_ = std::make_shared<c10d::Reducer>(
      std::move(params), std::move(buckets), std::move(limits), pg.group(), sparse, kBucket,
      /*find_unused_parameters=*/false,
      /*gradient_as_bucket_view=*/false, std::unordered_map<size_t, std::string>{}, kFirstBucket);
#endif
  if (fp16) reducer_->register_builtin_comm_hook(c10d::BuiltinCommHookType::FP16_COMPRESS);
  // Each gradient's arrival time (a hook before the Reducer's on the same
  // accumulation; the shared counter outlives this object with the hooks).
  for (const auto& p : params_)
    p.register_hook([last = last_gradient_](const torch::Tensor&) {
      const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
      int64_t seen = last->load(std::memory_order_relaxed);
      while (seen < now && !last->compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
      }
    });
}

GradSync::~GradSync() = default;

void GradSync::prepare() {
  pg_->entering();
  if (reducer_) reducer_->prepare_for_backward({});
}

void GradSync::finish() {
  if (!shm_) return;
  torch::NoGradGuard no_grad;
  // The exchange's elements: each parameter's gradient in the parameter's
  // own memory order (a transposed weight stays transposed:
  // trainer.weight_layout), one parameter after another, so the copies are
  // straight memory copies, not transposes. Every rank lays its parameters
  // out alike, so the slots line up element for element. They go through the
  // segment a chunk at a time (ShmAllreduce::chunk(): all of them unless many
  // ranks share the host); each element is summed in the same order either way.
  std::vector<torch::Tensor> in, out;  // dense, in the parameter's layout
  in.reserve(params_.size());
  out.reserve(params_.size());
  for (auto& p : params_) {
    const bool dense = p.is_non_overlapping_and_dense();
    auto laid_out = [&] {
      return dense ? torch::empty_strided(p.sizes(), p.strides(), p.options())
                   : torch::empty_like(p, at::MemoryFormat::Contiguous);
    };
    const auto fits = [&](const torch::Tensor& t) {
      return t.defined() && t.scalar_type() == torch::kFloat && t.device().is_cpu() &&
             (dense ? t.strides() == p.strides() && t.is_non_overlapping_and_dense() : t.is_contiguous());
    };
    const torch::Tensor g = p.grad();
    if (fits(g))
      in.push_back(g);
    else if (g.defined())
      in.push_back(laid_out().copy_(g));
    else
      in.push_back(laid_out().zero_());  // no gradient on this rank: it contributes zeros
    if (!fits(g)) p.mutable_grad() = laid_out();
    out.push_back(p.grad());
  }
  // Copies elements [from, from + n) of the parameters' gradients to or from `at`.
  auto copy = [](std::vector<torch::Tensor>& ts, size_t from, size_t n, float* at, bool to_segment) {
    size_t off = 0;
    for (const auto& t : ts) {
      const size_t len = static_cast<size_t>(t.numel());
      const size_t a = std::max(from, off), b = std::min(from + n, off + len);
      if (a < b) {
        float* mine = t.data_ptr<float>() + (a - off);
        if (to_segment)
          std::memcpy(at + (a - from), mine, (b - a) * sizeof(float));
        else
          std::memcpy(mine, at + (a - from), (b - a) * sizeof(float));
      }
      off += len;
      if (off >= from + n) break;
    }
  };
  const size_t count = shm_->count(), chunk = shm_->chunk();
  for (size_t from = 0; from < count; from += chunk) {
    const size_t n = std::min(chunk, count - from);
    copy(in, from, n, shm_->slot(), true);
    shm_->run(1.0f / static_cast<float>(world_), n);
    copy(out, from, n, const_cast<float*>(shm_->result()), false);
  }
}

}  // namespace gantry
