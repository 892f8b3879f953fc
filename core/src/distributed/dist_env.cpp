#include "distributed/dist_env.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "gantry/errors.hpp"

extern char** environ;

namespace gantry {

namespace {

int to_int(const std::map<std::string, std::string>& env, const std::string& key, int fallback) {
  const auto it = env.find(key);
  if (it == env.end() || it->second.empty()) return fallback;
  try {
    size_t used = 0;
    const int v = std::stoi(it->second, &used);
    if (used == it->second.size()) return v;
  } catch (const std::exception&) {
  }
  throw ConfigError("environment variable " + key + "='" + it->second + "' is not an integer");
}

std::string get(const std::map<std::string, std::string>& env, const std::string& key) {
  const auto it = env.find(key);
  return it == env.end() ? "" : it->second;
}

}  // namespace

std::vector<std::string> expand_nodelist(const std::string& list) {
  std::vector<std::string> out;
  auto fail = [&] { throw ConfigError("SLURM node list '" + list + "' is malformed"); };
  size_t i = 0;
  while (i < list.size()) {
    // one entry: prefix[ranges]suffix... up to a top-level comma
    std::string prefix;
    while (i < list.size() && list[i] != ',' && list[i] != '[') prefix += list[i++];
    if (i < list.size() && list[i] == '[') {
      const size_t close = list.find(']', i);
      if (close == std::string::npos) fail();
      const std::string ranges = list.substr(i + 1, close - i - 1);
      i = close + 1;
      std::string suffix;
      while (i < list.size() && list[i] != ',') suffix += list[i++];
      std::stringstream rs(ranges);
      std::string r;
      while (std::getline(rs, r, ',')) {
        const size_t dash = r.find('-');
        const std::string lo = r.substr(0, dash), hi = dash == std::string::npos ? lo : r.substr(dash + 1);
        if (lo.empty() || hi.empty() || lo.find_first_not_of("0123456789") != std::string::npos ||
            hi.find_first_not_of("0123456789") != std::string::npos)
          fail();
        const long a = std::stol(lo), b = std::stol(hi);
        if (b < a || b - a > 100000) fail();
        for (long n = a; n <= b; ++n) {
          std::string num = std::to_string(n);
          if (num.size() < lo.size()) num = std::string(lo.size() - num.size(), '0') + num;  // keep width
          out.push_back(prefix + num + suffix);
        }
      }
    } else {
      if (prefix.empty()) fail();
      out.push_back(prefix);
    }
    if (i < list.size() && list[i] == ',') {
      ++i;
      if (i == list.size()) fail();
    }
  }
  if (out.empty()) fail();
  return out;
}

std::string resolve_master_host(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) == 0) {
    ::freeaddrinfo(res);
    return host;
  }
  if (host.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") != std::string::npos)
    return host;
  FILE* p = ::popen(("scontrol show node '" + host + "' 2>/dev/null").c_str(), "r");
  if (!p) return host;
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  ::pclose(p);
  const auto at = out.find("NodeAddr=");
  if (at == std::string::npos) return host;
  const auto end = out.find_first_of(" \n", at);
  const std::string addr = out.substr(at + 9, end - at - 9);
  return addr.empty() ? host : addr;
}

std::string node_name() {
  const char* slurm_node = std::getenv("SLURMD_NODENAME");
  if (slurm_node && *slurm_node) return slurm_node;
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  return host;
}

int port_for_job(const std::string& job_id) {
  // Lightning's rule: 15000 + the last 4 digits of the job id.
  long id = 0;
  for (char c : job_id)
    if (c >= '0' && c <= '9') id = (id * 10 + (c - '0')) % 10000;
  return 15000 + static_cast<int>(id);
}

std::map<std::string, std::string> DistEnv::process_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv(*e);
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

DistEnv DistEnv::from(const std::map<std::string, std::string>& env) {
  DistEnv d;
  const bool torchrun = env.count("RANK") && env.count("WORLD_SIZE");
  const bool slurm = env.count("SLURM_PROCID") && env.count("SLURM_NTASKS") && env.count("SLURM_JOB_ID");
  if (torchrun) {
    d.source = "torchrun";
    d.rank = to_int(env, "RANK", 0);
    d.world_size = to_int(env, "WORLD_SIZE", 1);
    d.local_rank = to_int(env, "LOCAL_RANK", d.rank);
    d.local_world_size = to_int(env, "LOCAL_WORLD_SIZE", d.world_size);
    d.node_rank = to_int(env, "GROUP_RANK", d.rank / std::max(1, d.local_world_size));
    d.num_nodes = std::max(1, d.world_size / std::max(1, d.local_world_size));
  } else if (slurm) {
    d.source = "slurm";
    d.rank = to_int(env, "SLURM_PROCID", 0);
    d.world_size = to_int(env, "SLURM_NTASKS", 1);
    d.local_rank = to_int(env, "SLURM_LOCALID", 0);
    d.node_rank = to_int(env, "SLURM_NODEID", 0);
    d.num_nodes = to_int(env, "SLURM_NNODES", 1);
    d.local_world_size = std::max(1, d.world_size / std::max(1, d.num_nodes));
    const std::string nodes =
        get(env, "SLURM_STEP_NODELIST").empty() ? get(env, "SLURM_JOB_NODELIST") : get(env, "SLURM_STEP_NODELIST");
    if (!nodes.empty()) d.master_addr = expand_nodelist(nodes).front();
    d.master_port = port_for_job(get(env, "SLURM_JOB_ID"));
  } else if (env.count("SLURM_JOB_ID") && to_int(env, "SLURM_NTASKS", 1) > 1 && !env.count("SLURM_PROCID")) {
    throw ConfigError("running inside SLURM job " + get(env, "SLURM_JOB_ID") + " with " + get(env, "SLURM_NTASKS") +
                      " tasks but not under srun: start each rank with `srun gantry train ...`");
  }
  if (!get(env, "MASTER_ADDR").empty()) d.master_addr = get(env, "MASTER_ADDR");
  d.master_port = to_int(env, "MASTER_PORT", d.master_port);
  if (d.world_size < 1) throw ConfigError("world size " + std::to_string(d.world_size) + " < 1");
  if (d.rank < 0 || d.rank >= d.world_size)
    throw ConfigError("rank " + std::to_string(d.rank) + " is outside the world size " + std::to_string(d.world_size) +
                      " (" + d.source + " variables)");
  if (d.master_port <= 0 || d.master_port > 65535)
    throw ConfigError("MASTER_PORT " + std::to_string(d.master_port) + " is not a TCP port");
  return d;
}

void DistEnv::check(int64_t num_nodes_cfg, int64_t devices_cfg, const std::string& where) const {
  const int64_t expected = num_nodes_cfg * devices_cfg;
  if (expected != world_size)
    throw ConfigError(where + ": trainer.num_nodes x trainer.devices = " + std::to_string(num_nodes_cfg) + " x " +
                      std::to_string(devices_cfg) + " = " + std::to_string(expected) + " ranks, but " +
                      (source == "slurm"      ? "SLURM started "
                       : source == "torchrun" ? "WORLD_SIZE is "
                                              : "this is ") +
                      std::to_string(world_size) +
                      (source == "single" ? " process (use `gantry launch -n N` or srun)" : "") + ": make them agree");
  if (local_rank >= devices_cfg)
    throw ConfigError(where + ": local rank " + std::to_string(local_rank) +
                      " is beyond trainer.devices = " + std::to_string(devices_cfg));
}

std::string DistEnv::describe() const {
  return "rank " + std::to_string(rank) + "/" + std::to_string(world_size) + " (node " + std::to_string(node_rank) +
         ", local " + std::to_string(local_rank) + ") via " + source + ", master " + master_addr + ":" +
         std::to_string(master_port);
}

int free_local_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  int port = 29500;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  if (fd >= 0) ::close(fd);
  return port;
}

}  // namespace gantry
