// Heartbeats and verdicts: every rank's heartbeat thread, and the verdict a
// failed exchange asks for (silent_ranks: who stopped responding, by node
// across nodes, or who is alive but never came), shared through the store so
// that every rank names the same ranks, and reported to `gantry launch`.
#include <unistd.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <sstream>

#include "distributed/group_internals.hpp"

namespace gantry {

using group_detail::ranks_word;

ProcessGroup::Heartbeat::Heartbeat(const std::string& host, uint16_t port, int rank, std::chrono::milliseconds timeout,
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

ProcessGroup::Heartbeat::~Heartbeat() {
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

namespace {

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

namespace group_detail {

std::string ranks_word(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return std::string(ranks.size() == 1 ? "rank " : "ranks ") + s;
}

}  // namespace group_detail

}  // namespace gantry
