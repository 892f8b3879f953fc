// The rendezvous: the store on rank 0, every rank checked in (or the
// missing ones named alike on every rank), the heartbeat started, Gloo's
// group connected on the interface that routes to the master (and NCCL's
// added for a CUDA job); the file limit checked first; the group's end.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "distributed/group_internals.hpp"
#include "gantry/errors.hpp"
#include "runtime/runtime.hpp"
#if GANTRY_WITH_CUDA
#include "distributed/cuda.hpp"
#endif

namespace gantry {

using group_detail::ranks_word;
using group_detail::seconds;

std::string nccl_version_text(uint64_t packed) {
  return std::to_string(packed >> 32) + "." + std::to_string((packed >> 16) & 0xffff) + "." +
         std::to_string(packed & 0xffff);
}
namespace {

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

}  // namespace

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

// Every rank checks in at the rendezvous, or every rank that came names
// the ranks that did not (throws). `store` may be replaced: a wait that timed
// out leaves its connection out of step.
void check_in(c10::intrusive_ptr<c10d::Store>& store, const DistEnv& env, const c10d::TCPStoreOptions& opts,
              std::chrono::milliseconds timeout, const std::shared_ptr<StoreCounts>& counts, const std::string& where,
              const std::string& me) {
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
    return c10::make_intrusive<CountingStore>(c10::make_intrusive<c10d::TCPStore>(env.master_addr, o), counts);
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
    store->set("gantry/arrived/" + std::to_string(env.rank), bytes(node_name()));  // who is where, for a verdict
    if (store->add("gantry/arrivals", 1) == env.world_size) decide(*store, "ok");
    // Rank 0's store is the store itself (it cannot be replaced): it waits over a connection of its own.
    c10::intrusive_ptr<c10d::Store> waiter = env.rank == 0 ? client() : store;
    bool timed_out = false;
    try {
      waiter->wait({verdict_key}, timeout);
    } catch (const std::exception&) {
      timed_out = true;
    }
    if (timed_out) {
      if (env.rank != 0) store = client();  // throws when rank 0 (and its store) is gone: below
      std::vector<int> missing = missing_in(*store);
      if (!missing.empty() && env.rank != 0 && !store->check({verdict_key}))
        throw Error(me + ": " + ranks_word(missing) + " of " + std::to_string(env.world_size) + never + " within " +
                    seconds(timeout) + hint);
      std::string list;
      for (int r : missing) list += (list.empty() ? "" : ",") + std::to_string(r);
      if (env.rank == 0) decide(*store, missing.empty() ? "ok" : "missing " + list);
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!store->check({verdict_key}) && std::chrono::steady_clock::now() < until)  // the decider's set
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const auto v = store->get(verdict_key);
    verdict.assign(v.begin(), v.end());
    if (verdict != "ok" && env.rank != 0) store->add("gantry/rendezvous_read", 1);
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
        while (store->add("gantry/rendezvous_read", 0) < readers && std::chrono::steady_clock::now() < deadline)
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
      } catch (const std::exception&) {
      }
      throw Error(me + ": " + ranks_word(missing) + " of " + std::to_string(env.world_size) + never + " within " +
                  seconds(timeout) + hint);
    }
    throw Error(me + ": " + ranks_word(missing) + " of " + std::to_string(env.world_size) + never +
                "; rank 0 gave up waiting first and ended it" + hint);
  }
}

// Gloo's options: the timeout, and the device on the interface that routes
// to the master (GLOO_SOCKET_IFNAME first; loopback for a local job).
c10::intrusive_ptr<c10d::ProcessGroupGloo::Options> gloo_options(const DistEnv& env,
                                                                 std::chrono::milliseconds timeout) {
  auto gloo = c10d::ProcessGroupGloo::Options::create();
  gloo->timeout = timeout;
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"))
    gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  else if (is_loopback(env.master_addr))
    gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  else if (const std::string local = local_address_towards(env.master_addr, env.master_port); !local.empty())
    gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(local));
  else
    gloo->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  return gloo;
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
  check_in(store_, env_, opts, timeout, counts_, where, me);
  try {
    heartbeat_ = std::make_unique<Heartbeat>(env_.master_addr, opts.port, env.rank, timeout, &entered_, beat_counts_);
  } catch (const std::exception& e) {
    throw Error(me + ": cannot open a second connection to the rendezvous store on " + where + ": " +
                with_file_limit_hint(error_text(e)));
  }
  auto gloo = gloo_options(env_, timeout);
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

}  // namespace gantry
