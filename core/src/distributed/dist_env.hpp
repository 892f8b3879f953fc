// Where this process stands in a distributed job, read from the environment:
// SLURM (srun) or torchrun-style variables (gantry launch sets those). No LibTorch.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "gantry/core_export.hpp"

namespace gantry {

struct GANTRY_CORE_EXPORT DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  int num_nodes = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source = "single";  ///< "single", "torchrun" or "slurm"

  /// Reads `env` (pass the process environment, or a map in tests). Explicit
  /// MASTER_ADDR / MASTER_PORT win over what SLURM implies. Throws ConfigError
  /// for malformed or contradictory variables.
  static DistEnv from(const std::map<std::string, std::string>& env);
  /// The process environment as a map.
  static std::map<std::string, std::string> process_environment();

  /// Checks this job against the config's trainer.num_nodes x trainer.devices
  /// before any rendezvous (the silent-hang class: Lightning #4389, #8707).
  void check(int64_t num_nodes_cfg, int64_t devices_cfg, const std::string& where) const;

  /// "rank 1/4 (node 0, local 1) via slurm, master host:port"
  std::string describe() const;
};

/// Expands a SLURM node list: "gpu[01-04,07],cpu3" -> gpu01 gpu02 gpu03 gpu04 gpu07 cpu3.
/// Throws ConfigError on malformed input.
GANTRY_CORE_EXPORT std::vector<std::string> expand_nodelist(const std::string& list);

/// `host` if it resolves; else, inside SLURM, the node's NodeAddr from
/// `scontrol show node` (clusters whose node names are not in DNS); else `host`.
GANTRY_CORE_EXPORT std::string resolve_master_host(const std::string& host);

/// MASTER_PORT derived from a SLURM job id, so jobs sharing a node differ.
GANTRY_CORE_EXPORT int port_for_job(const std::string& job_id);

/// A TCP port of 127.0.0.1 nobody listens on now (bound to 0, read, closed):
/// `gantry launch`'s MASTER_PORT. 29500 when the system gives none.
GANTRY_CORE_EXPORT int free_local_port();

/// This rank's node as the job knows it: under SLURM the node's name
/// (SLURMD_NODENAME: node10, the host name on a real cluster and the emulated
/// node's on a test cluster), else the host name.
GANTRY_CORE_EXPORT std::string node_name();

}  // namespace gantry
