// The rank variables and node lists without processes: torchrun's and
// SLURM's variables (explicit settings win, inconsistent ones are one error
// before any rendezvous), SLURM's node ranges, ranks named by node, NCCL's
// packed version; and rank 0's straggler watch on given statuses.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <functional>
#include <map>
#include <regex>
#include <sstream>
#include <thread>
#include <tuple>

#include <torch/torch.h>

#include "distributed/dist_env.hpp"
#include "gantry/errors.hpp"
#include "distributed/distributed.hpp"
#include "distributed/rank_status.hpp"
#include "distributed/shm_allreduce.hpp"
#include "runtime/runtime.hpp"
#include "checkpoint/file.hpp"
#include "train/trainer.hpp"
#include "support.hpp"
#include "wire/message.hpp"
#include "wire/record_log.hpp"

using namespace gantry;
using gantry::test::config_error;
using gantry::test::kDemo;
using gantry::test::run_gantry;
using gantry::test::state_dict_of;
using gantry::test::TempDir;

TEST(NodeList, ExpandsSlurmRanges) {
  EXPECT_EQ(expand_nodelist("gpu[01-04,07],cpu3"),
            (std::vector<std::string>{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "cpu3"}));
  EXPECT_EQ(expand_nodelist("node1"), (std::vector<std::string>{"node1"}));
  EXPECT_EQ(expand_nodelist("n[8-10]"), (std::vector<std::string>{"n8", "n9", "n10"}));
  EXPECT_EQ(expand_nodelist("a[1-2]-ib,b"), (std::vector<std::string>{"a1-ib", "a2-ib", "b"}));
  for (const char* bad : {"", "gpu[01-", "gpu[04-01]", "gpu[a-b]", "x,", "[1-2]x,,y"})
    EXPECT_THROW(expand_nodelist(bad), ConfigError) << bad;
}

// LibTorch 2.x packs NCCL's version as major << 32 | minor << 16 | patch
// (torch/csrc/cuda/nccl.cpp); read as NCCL_VERSION_CODE (major * 10000 + ...),
// 2.27.3 printed as "859170.40.67" in the ddp: line.
// A verdict across nodes names a silent node as a whole (a node down or cut
// off), or the ranks of a node it found silent among the node's others.
TEST(NodeList, SilentRanksAreNamedByTheirNodes) {
  std::vector<std::string> node_of;
  for (int r = 0; r < 16; ++r) node_of.push_back("node0" + std::to_string(1 + r / 4));
  EXPECT_EQ(ranks_by_node({8, 9, 10, 11}, node_of), "node03 (ranks 8-11, all 4 of its ranks)");
  EXPECT_EQ(ranks_by_node({9}, node_of), "rank 9 (node03, 1 of its 4)");
  EXPECT_EQ(ranks_by_node({4, 5, 12, 13, 14, 15}, node_of),
            "ranks 4, 5 (node02, 2 of its 4); node04 (ranks 12-15, all 4 of its ranks)");
  EXPECT_EQ(ranks_by_node({3}, {"a", "b", "c", "d"}), "d (rank 3, its one rank)");
  EXPECT_EQ(ranks_by_node({20}, node_of), "rank 20");  // not in the list: no node to name
}

TEST(Nccl, VersionIsDecodedAsLibTorchPacksIt) {
  EXPECT_EQ(nccl_version_text((uint64_t{2} << 32) | (uint64_t{27} << 16) | 3), "2.27.3");
  EXPECT_EQ(nccl_version_text((uint64_t{2} << 32) | (uint64_t{21} << 16) | 5), "2.21.5");
  EXPECT_EQ(nccl_version_text((uint64_t{3} << 32) | (uint64_t{0} << 16) | 12), "3.0.12");
  EXPECT_EQ(nccl_version_text(0), "0.0.0");
}

TEST(DistEnv, TorchrunVariables) {
  const auto d = DistEnv::from({{"RANK", "3"},
                                {"WORLD_SIZE", "8"},
                                {"LOCAL_RANK", "1"},
                                {"LOCAL_WORLD_SIZE", "2"},
                                {"MASTER_ADDR", "10.0.0.1"},
                                {"MASTER_PORT", "1234"}});
  EXPECT_EQ(d.source, "torchrun");
  EXPECT_EQ(d.rank, 3);
  EXPECT_EQ(d.world_size, 8);
  EXPECT_EQ(d.local_rank, 1);
  EXPECT_EQ(d.node_rank, 1);
  EXPECT_EQ(d.num_nodes, 4);
  EXPECT_EQ(d.master_addr, "10.0.0.1");
  EXPECT_EQ(d.master_port, 1234);
}

TEST(DistEnv, SlurmVariablesAndExplicitMasterWins) {
  std::map<std::string, std::string> env = {{"SLURM_PROCID", "5"},
                                            {"SLURM_NTASKS", "8"},
                                            {"SLURM_LOCALID", "1"},
                                            {"SLURM_NODEID", "2"},
                                            {"SLURM_NNODES", "4"},
                                            {"SLURM_JOB_ID", "4242"},
                                            {"SLURM_JOB_NODELIST", "gpu[07-10]"}};
  auto d = DistEnv::from(env);
  EXPECT_EQ(d.source, "slurm");
  EXPECT_EQ(d.rank, 5);
  EXPECT_EQ(d.local_rank, 1);
  EXPECT_EQ(d.local_world_size, 2);
  EXPECT_EQ(d.master_addr, "gpu07");
  EXPECT_EQ(d.master_port, 15000 + 4242);
  env["MASTER_ADDR"] = "10.1.1.1";
  env["MASTER_PORT"] = "2222";
  d = DistEnv::from(env);
  EXPECT_EQ(d.master_addr, "10.1.1.1");
  EXPECT_EQ(d.master_port, 2222);
}

TEST(DistEnv, InconsistentSettingsAreOneErrorBeforeAnyRendezvous) {
  EXPECT_NE(config_error([] {
              DistEnv::from({{"SLURM_JOB_ID", "7"}, {"SLURM_NTASKS", "4"}});
            }).find("not under srun"),
            std::string::npos);
  EXPECT_NE(config_error([] {
              DistEnv::from({{"RANK", "2"}, {"WORLD_SIZE", "2"}});
            }).find("rank 2 is outside the world size 2"),
            std::string::npos);
  const auto d =
      DistEnv::from({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_JOB_ID", "1"}, {"SLURM_NNODES", "1"}});
  const auto msg = config_error([&] { d.check(1, 2, "exp.yaml:9"); });
  EXPECT_NE(msg.find("exp.yaml:9: trainer.num_nodes x trainer.devices = 1 x 2 = 2 ranks, but SLURM "
                     "started 4"),
            std::string::npos)
      << msg;
}

namespace {

wire::RankStatus busy_rank(uint32_t rank, const std::string& host, double busy, double compute_share = 0.5) {
  wire::RankStatus s;
  s.rank = rank;
  s.host = host;
  s.comm_ms = 100 - busy;  // every rank's step takes as long as the slowest's; the others wait
  s.step_ms = 100;
  s.compute_ms = busy * compute_share;
  s.data_ms = busy * (1 - compute_share);
  s.optimizer_ms = s.other_ms = 0;
  return s;
}

}  // namespace

// Rank 0's watch: above the factor for `intervals` rows in a row, then a line;
// one line when it stops; a whole host at once is named as the host; a rank
// under the factor, or only a fraction of a millisecond above the median, is
// not one; an old writer's statuses (no parts: -1) are left out.
TEST(Straggler, AboveTheFactorForSeveralRowsNamesTheRankOrItsHost) {
  StragglerWatch watch(2.0, 3);
  auto job = [](double slow_busy, double other_busy, bool whole_host) {
    std::vector<wire::RankStatus> all;
    for (uint32_t r = 0; r < 8; ++r) {
      const bool slow = whole_host ? r / 4 == 1 : r == 5;
      all.push_back(busy_rank(r, r / 4 ? "node02" : "node01", slow ? slow_busy : other_busy, slow ? 0.1 : 0.5));
    }
    return all;
  };
  for (int64_t step : {10, 20}) {
    auto all = job(50, 10, false);
    EXPECT_TRUE(watch.update(all, step).empty()) << step;
    EXPECT_FALSE(all[5].straggler);
  }
  auto all = job(50, 10, false);
  EXPECT_EQ(watch.update(all, 30),
            std::vector<std::string>{"rank 5 (node02) is 5.0x slower than the median: 90% waiting for data"});
  EXPECT_TRUE(all[5].straggler);
  EXPECT_FALSE(all[4].straggler);
  all = job(60, 10, false);
  EXPECT_TRUE(watch.update(all, 40).empty());  // still one: said once
  all = job(12, 10, false);
  EXPECT_EQ(watch.update(all, 50),
            std::vector<std::string>{"rank 5 (node02) is no longer slower than the median (1.2x)"});
  EXPECT_FALSE(all[5].straggler);
  EXPECT_EQ(watch.summary(), "rank 5 (node02) from step 30 to step 50, up to 6.0x the median (90% waiting for data)");

  StragglerWatch hosts(2.0, 2);
  for (int64_t step : {10, 20}) {
    all = job(30, 10, true);
    const auto lines = hosts.update(all, step);
    if (step == 10) {
      EXPECT_TRUE(lines.empty());
    } else {
      EXPECT_EQ(lines,
                std::vector<std::string>{"node02 (ranks 4-7) is 3.0x slower than the median: 90% waiting for data"});
    }
  }
  EXPECT_TRUE(all[4].straggler && all[7].straggler && !all[3].straggler);
  EXPECT_EQ(hosts.summary().substr(0, 52), "rank 4 (node02) from step 20 to the end, up to 3.0x ");

  StragglerWatch quiet(2.0, 1);
  all = job(0.9, 0.3, false);  // 3x, but 0.6 ms: scheduling noise
  EXPECT_TRUE(quiet.update(all, 1).empty());
  all = job(19, 10, false);  // 1.9x
  EXPECT_TRUE(quiet.update(all, 2).empty());
  all = job(50, 10, false);
  for (auto& s : all)
    if (s.rank != 5) s.step_ms = s.comm_ms = -1;  // only rank 5 measured: nobody to compare with
  EXPECT_TRUE(quiet.update(all, 3).empty());
  EXPECT_EQ(quiet.summary(), "none");

  // A rank the others wait for at the exchanges (last at most of them) whose
  // busy time says nothing: frozen inside a collective, its frozen time is comm.
  StragglerWatch frozen(2.0, 2);
  for (int64_t step : {10, 20}) {
    all = job(10, 10, false);
    for (auto& s : all) s.last_pct = s.rank == 6 ? 90 : 100.0 / 8;
    const auto lines = frozen.update(all, step);
    if (step == 10) {
      EXPECT_TRUE(lines.empty());
    } else {
      EXPECT_EQ(lines, std::vector<std::string>{"rank 6 (node02) holds the others back: last at 90% of the gradient "
                                                "exchanges (busy 1.0x the median)"});
    }
  }
  StragglerWatch two(2.0, 1);  // of 2 ranks, one is last at half of them by nature: not a sign
  std::vector<wire::RankStatus> pair{busy_rank(0, "a", 10), busy_rank(1, "a", 10)};
  pair[0].last_pct = 20;
  pair[1].last_pct = 80;
  EXPECT_TRUE(two.update(pair, 1).empty());
}

// A slow link: every rank waits as long for it (the same busy times), but
// the heartbeat's round trip to rank 0's store of every rank of the node
// behind it is long. The node is named for its link once its ranks' shortest
// round trip is 4x (or the factor) the other nodes' median and 20 ms above
// it for `intervals` rows; one rank's long round trip (its heartbeat thread
// descheduled), 2-3x the median, or 12 ms above a sub-millisecond median is
// a loaded host's scheduling, not a link.
TEST(Straggler, ANodeWhoseRoundTripToRankZeroIsLongHasASlowLink) {
  auto job = [](double node03_ms, double others_ms) {  // rank 0's node01 over loopback
    std::vector<wire::RankStatus> all;
    for (uint32_t r = 0; r < 16; ++r) {
      all.push_back(busy_rank(r, "node0" + std::to_string(r / 4 + 1), 10));
      all.back().link_ms = r < 4 ? 0.05 : r / 4 == 2 ? node03_ms : others_ms;
    }
    return all;
  };
  StragglerWatch watch(2.0, 2);
  auto all = job(201, 0.4);
  EXPECT_TRUE(watch.update(all, 10).empty());
  all = job(203, 0.3);
  EXPECT_EQ(watch.update(all, 20),
            std::vector<std::string>{"node03 (ranks 8-11) has a slow link: a round trip to rank 0 takes 203 ms or more "
                                     "(the other nodes' median 0.3 ms)"});
  for (const auto& st : all) EXPECT_EQ(st.straggler, st.rank / 4 == 2) << st.rank;
  all = job(0.5, 0.4);
  EXPECT_EQ(watch.update(all, 30).size(), 4u);  // each of its ranks: no longer
  for (const auto& st : all) EXPECT_FALSE(st.straggler) << st.rank;

  StragglerWatch quiet(2.0, 1);
  all = job(12, 0.4);  // 30x, but 11.6 ms: scheduling on a loaded host
  EXPECT_TRUE(quiet.update(all, 1).empty());
  all = job(60, 45);  // 20 ms more, but under 2x: every link is slow
  EXPECT_TRUE(quiet.update(all, 2).empty());
  all = job(54, 19);  // 2.8x: at 128 ranks on 2 cores, scheduling
  EXPECT_TRUE(quiet.update(all, 4).empty());
  all = job(0.4, 0.4);
  all[9].link_ms = 250;  // one rank of node03: its heartbeat thread, not the link
  EXPECT_TRUE(quiet.update(all, 5).empty());
  all = job(300, 0.4);
  for (auto& st : all) st.link_ms = st.rank == 9 ? 300 : -1;  // only rank 9 measured: nobody to compare with
  EXPECT_TRUE(quiet.update(all, 3).empty());
  EXPECT_EQ(quiet.summary(), "none");
}
