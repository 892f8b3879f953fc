// The chart model both GUIs paint (gui/client/chart.*), without Qt or ImGui:
// which lines make a chart, colours and labels for one run and for several,
// ranges and ticks, log-y, decimation of a long series, the read-out, and the
// config keys that tell runs apart.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <chrono>
#include <thread>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "chart.hpp"
#include "liveness.hpp"
#include "ranks_model.hpp"
#include "run_state.hpp"
#include "search.hpp"
#include "source.hpp"
#include "stream_client.hpp"
#include "wire/record_log.hpp"

using namespace gantry::client;

namespace {

Series line(std::vector<std::pair<int64_t, double>> points) {
  Series s;
  for (const auto& [step, v] : points) s.append(step, 0, v);
  return s;
}

struct Runs {
  std::map<std::string, Series> a, b, c;
  std::vector<ChartRun> runs() { return {{"a", &a, true}, {"b", &b, true}, {"c", &c, true}}; }
};

Runs three_runs() {
  Runs r;
  r.a["g_loss"] = line({{0, 2.0}, {10, 1.5}, {20, 1.0}});
  r.a["d_loss"] = line({{0, 0.5}, {10, 0.4}, {20, 0.3}});
  r.a["quality_fd"] = line({{0, 600}, {20, 400}});
  r.b["g_loss"] = line({{0, 3.0}, {10, 2.5}, {30, 2.0}});
  r.b["d_loss"] = line({{0, 0.6}, {30, 0.2}});
  r.c["g_loss"] = line({{5, 4.0}, {15, 3.5}});
  return r;
}

}  // namespace

TEST(Chart, GroupsAreTheVisibleRunsMetricGroups) {
  Runs r = three_runs();
  auto runs = r.runs();
  EXPECT_EQ(chart_groups(runs), (std::vector<std::string>{"loss", "quality_fd"}));
  runs[0].visible = false;  // only a has quality_fd
  EXPECT_EQ(chart_groups(runs), (std::vector<std::string>{"loss"}));
}

TEST(Chart, OneRunColoursByMetricSeveralByRunAndAToggledRunDisappears) {
  Runs r = three_runs();
  ChartModel model;
  const std::vector<ChartRun> one{{"a", &r.a, true}};
  Chart c = model.build(one, "loss", {});
  ASSERT_EQ(c.lines.size(), 2u);
  EXPECT_EQ(c.lines[0].label, "d_loss");  // metrics in name order
  EXPECT_EQ(c.lines[1].label, "g_loss");
  EXPECT_EQ(c.lines[0].color, series_color(0));
  EXPECT_EQ(c.lines[1].color, series_color(1));

  auto runs = r.runs();
  c = model.build(runs, "loss", {});
  ASSERT_EQ(c.lines.size(), 5u);
  EXPECT_EQ(c.lines[0].label, "a: d_loss");
  EXPECT_EQ(c.lines[2].label, "b: d_loss");
  EXPECT_EQ(c.lines[4].label, "c: g_loss");
  EXPECT_EQ(c.lines[0].color, series_color(0));  // run a's colour
  EXPECT_NE(c.lines[1].color, series_color(0));  // its second metric: lighter
  EXPECT_EQ(c.lines[2].color, series_color(1));  // run b's
  EXPECT_EQ(c.lines[4].color, series_color(2));  // run c's
  const uint32_t c_colour = c.lines[4].color;

  runs[1].visible = false;  // b toggled off: its lines go, the others keep their colours
  c = model.build(runs, "loss", {});
  ASSERT_EQ(c.lines.size(), 3u);
  for (const auto& l : c.lines) EXPECT_NE(l.run, 1u) << l.label;
  EXPECT_EQ(c.lines[2].color, c_colour);
  EXPECT_EQ(c.x.lo, 0);
  EXPECT_EQ(c.x.hi, 20) << "b's step 30 no longer counts";
}

TEST(Chart, RangesTicksAndLogY) {
  Runs r = three_runs();
  ChartModel model;
  Chart c = model.build(r.runs(), "loss", {});
  EXPECT_EQ(c.x.lo, 0);
  EXPECT_EQ(c.x.hi, 30);
  // y over 0.2 .. 4.0 with 5% padding each side.
  EXPECT_NEAR(c.y.lo, 0.2 - 0.19, 1e-12);
  EXPECT_NEAR(c.y.hi, 4.0 + 0.19, 1e-12);
  ASSERT_FALSE(c.y.ticks.empty());
  for (double t : c.y.ticks) {
    EXPECT_GE(t, c.y.lo);
    EXPECT_LE(t, c.y.hi);
    EXPECT_NEAR(t, std::round(t), 1e-9) << "ticks at round values (step 1 for a span of 4.2)";
  }
  EXPECT_EQ(c.x.ticks, (std::vector<double>{0, 5, 10, 15, 20, 25, 30}));

  std::map<std::string, Series> m;
  m["loss"] = line({{0, 100}, {1, 0}, {2, -5}, {3, 0.01}, {4, std::nan("")}});
  ChartOptions log;
  log.log_y = true;
  c = model.build({{"m", &m, true}}, "loss", log);
  ASSERT_EQ(c.lines.size(), 1u);
  EXPECT_EQ(c.lines[0].y, (std::vector<double>{100, 0.01})) << "<= 0 and NaN are not drawn on a log scale";
  EXPECT_NEAR(c.y.lo, -2 - 0.2, 1e-12);  // log10 units, padded
  EXPECT_NEAR(c.y.hi, 2 + 0.2, 1e-12);
  EXPECT_EQ(c.y_label(1), "10");
  EXPECT_EQ(c.y_label(-2), "0.01");
}

TEST(Chart, ALongSeriesIsDecimatedKeepingItsSpikeAndSmoothed) {
  std::map<std::string, Series> m;
  Series& s = m["g_loss"];
  for (int64_t i = 0; i < 100000; ++i) s.append(i, 0, i == 54321 ? 50.0 : 1.0 + 0.001 * double(i % 7));
  ChartModel model;
  ChartOptions opt;
  opt.columns = 100;
  opt.smoothing = 0.6;
  const Chart c = model.build({{"m", &m, true}}, "loss", opt);
  ASSERT_EQ(c.lines.size(), 1u);
  EXPECT_LE(c.lines[0].x.size(), 2u * 100 + 2);
  EXPECT_NE(std::find(c.lines[0].y.begin(), c.lines[0].y.end(), 50.0), c.lines[0].y.end()) << "the spike is drawn";
  EXPECT_GT(c.y.hi, 50);
  ASSERT_FALSE(c.lines[0].sy.empty());
  EXPECT_LT(*std::max_element(c.lines[0].sy.begin(), c.lines[0].sy.end()), 50.0) << "smoothing flattens it";
  EXPECT_LE(c.lines[0].sx.size(), 2u * 100 + 2);
}

TEST(Chart, TheReadOutNamesEachLinesNearestPoint) {
  Runs r = three_runs();
  ChartModel model;
  auto runs = r.runs();
  runs[2].visible = false;
  const Chart c = model.build(runs, "loss", {});
  EXPECT_EQ(model.readout(runs, c, 11), "step 10\na: d_loss 0.4\na: g_loss 1.5\nb: d_loss 0.6\nb: g_loss 2.5");
  ChartOptions opt;
  opt.smoothing = 0.5;
  const std::vector<ChartRun> one{{"a", &r.a, true}};
  const Chart s = model.build(one, "quality_fd", opt);
  // TensorBoard's debiased EMA at the second point: (0.5*600*0.5 + 0.5*400) / (1 - 0.25) = 466.67
  EXPECT_EQ(model.readout(one, s, 19), "step 20\nquality_fd 400 (smoothed 466.67)");
}

TEST(Chart, TheConfigKeysThatDifferBetweenRuns) {
  const std::vector<std::string> configs{
      "name: sweep-a\nsystem:\n  plugin: gan\n  lr: 0.0001\ndata:\n  batch_size: 32\n  path: /d\n",
      "name: sweep-b\nsystem:\n  plugin: gan\n  lr: 0.0002\ndata:\n  batch_size: 32\n  path: /d\n",
      "name: sweep-c\nsystem:\n  plugin: gan\n  lr: 0.0001\n  hidden: [64, 64]\ndata:\n  batch_size: 64\n  path: /d\n"};
  std::map<std::string, std::vector<std::string>> values;
  EXPECT_EQ(differing_keys(configs, &values),
            (std::vector<std::string>{"data.batch_size", "system.hidden", "system.lr"}));
  EXPECT_EQ(values["system.lr"], (std::vector<std::string>{"0.0001", "0.0002", "0.0001"}));
  EXPECT_EQ(values["system.hidden"], (std::vector<std::string>{"", "", "[64, 64]"}));
  EXPECT_TRUE(differing_keys({configs[0], configs[0]}).empty());
}

// Runs on disk: a run directory is itself; an experiment its runs; a sweep
// its points, named by the point when it has one run.
TEST(Runs, FoundUnderAnExperimentASweepAndSeveralPaths) {
  namespace fs = std::filesystem;
  std::string tmpl = (fs::temp_directory_path() / "gantry-client-XXXXXX").string();
  const fs::path root = ::mkdtemp(tmpl.data());
  auto run = [&](const fs::path& d) {
    fs::create_directories(d);
    std::ofstream(d / "stream.gantrylog") << "";
  };
  run(root / "exp/20261202-100000");
  run(root / "exp/20261202-110000");
  fs::create_directory_symlink("20261202-110000", root / "exp/latest");
  run(root / "exp/sweep/lr=1e-4/20261202-120000");
  run(root / "exp/sweep/lr=2e-4/20261202-120001");
  run(root / "exp/sweep/lr=2e-4/20261202-130000");  // resumed elsewhere: two runs of one point
  fs::create_directories(root / "empty");

  const auto all = find_runs({(root / "exp").string()});
  std::vector<std::string> names;
  for (const auto& r : all) names.push_back(r.name);
  EXPECT_EQ(names, (std::vector<std::string>{"20261202-100000", "20261202-110000", "lr=1e-4", "lr=2e-4/20261202-120001",
                                             "lr=2e-4/20261202-130000"}));
  EXPECT_EQ(all[2].dir, (root / "exp/sweep/lr=1e-4/20261202-120000").string());

  const auto one = find_runs({(root / "exp/20261202-100000").string()});
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].dir, (root / "exp/20261202-100000").string());

  const auto two = find_runs({(root / "exp/20261202-100000").string(), (root / "exp/sweep/lr=1e-4").string()});
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].name, "20261202-100000");
  EXPECT_EQ(two[1].name, "lr=1e-4");

  EXPECT_THROW(find_runs({(root / "empty").string()}), std::invalid_argument);
  EXPECT_THROW(find_runs({(root / "nothing").string()}), std::invalid_argument);
  fs::remove_all(root);
}

TEST(Chart, XAsTimeSinceStartOrWallTimeAndAZoomedRange) {
  std::map<std::string, Series> m;
  Series& s = m["loss"];
  for (int64_t i = 0; i <= 100; ++i) s.append(i * 10, 1000.0 + double(i), i == 50 ? 9.0 : 1.0 + 0.01 * double(i));
  ChartModel model;
  ChartOptions opt;
  opt.x = XAxis::kRelative;
  std::vector<ChartRun> runs{{"r", &m, true, 1000.0}};
  Chart c = model.build(runs, "loss", opt);
  EXPECT_EQ(c.x.lo, 0);
  EXPECT_EQ(c.x.hi, 100);
  EXPECT_EQ(model.readout(runs, c, 20.2), "step 200\nloss 1.2");
  opt.x = XAxis::kWall;
  c = model.build(runs, "loss", opt);
  EXPECT_EQ(c.x.lo, 1000);
  // Zoomed to steps 600..1000 (x = step): the spike at step 500 is outside,
  // so y spans the points inside only; one point beyond each edge is kept.
  opt.x = XAxis::kStep;
  opt.zoomed = true;
  opt.x_lo = 600;
  opt.x_hi = 1000;
  c = model.build(runs, "loss", opt);
  EXPECT_EQ(c.x.lo, 600);
  EXPECT_EQ(c.lines[0].x.front(), 590);
  EXPECT_LT(c.y.hi, 3) << "the spike (9.0 at step 500) is outside the zoom";
}

// A metric logged once (a validation at the end) was a legend without a
// point in both GUIs: one point is centred with room either side and drawn
// as a marker (so is every point of a short line); a long line has none.
TEST(Chart, ALonePointIsCentredAndMarked) {
  std::map<std::string, Series> m;
  m["quality_fd"].append(1000, 1.7e9, 187.0);
  for (int64_t i = 1; i <= 100; ++i) m["loss"].append(i * 10, 1.7e9 + double(i), 1.0);
  ChartModel model;
  std::vector<ChartRun> runs{{"r", &m, true, 0}};
  Chart c = model.build(runs, "quality_fd", ChartOptions{});
  ASSERT_EQ(c.lines.size(), 1u);
  ASSERT_EQ(c.lines[0].x.size(), 1u);
  EXPECT_TRUE(c.lines[0].markers);
  EXPECT_LT(c.x.lo, 1000);
  EXPECT_GT(c.x.hi, 1000);
  EXPECT_NE(std::find(c.x.ticks.begin(), c.x.ticks.end(), 1000.0), c.x.ticks.end());
  c = model.build(runs, "loss", ChartOptions{});
  EXPECT_FALSE(c.lines[0].markers);
}

// A command line naming several live runs, the runner's line, and a directory.
TEST(Runs, SeveralTargetsOnOneCommandLine) {
  auto t = parse_targets(
      {"10.0.0.1:5555", "--token", "a", "monitor:", "gantry-monitor", "10.0.0.2:6666", "--token", "b", "10.0.0.3:7777"},
      "dflt");
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].target.host, "10.0.0.1");
  EXPECT_EQ(t[0].target.token, "a");
  EXPECT_EQ(t[1].target.port, 6666);
  EXPECT_EQ(t[1].target.token, "b");
  EXPECT_EQ(t[2].name, "10.0.0.3:7777");
  EXPECT_EQ(t[2].target.token, "dflt");
  EXPECT_EQ(parse_targets({"127.0.0.1:1", "--token=x"}).size(), 1u);
  try {
    parse_targets({"10.0.0.1:5555", "no-such-dir"});
    ADD_FAILURE() << "a bad second target was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'no-such-dir' is neither a run directory nor HOST:PORT"), std::string::npos)
        << e.what();
  }
}

TEST(Chart, TheRunsTablesColumns) {
  Runs r = three_runs();
  r.a["lr-g"] = line({{0, 1e-4}});
  r.a["quality_seconds"] = line({{0, 2.0}});
  RunsTableModel model;
  const std::string ca = "system:\n  lr: 0.1\n", cb = "system:\n  lr: 0.2\n";
  const RunsTable& t = model.update(r.runs(), {ca, cb, ""});
  EXPECT_EQ(t.metrics, (std::vector<std::string>{"d_loss", "g_loss", "quality_fd"})) << "not lr-* or *_seconds";
  EXPECT_TRUE(t.keys.empty()) << "run c has not sent its config yet";
  model.update(r.runs(), {ca, cb, ca});
  EXPECT_EQ(model.table().keys, std::vector<std::string>{"system.lr"});
  EXPECT_EQ(model.table().values.at("system.lr"), (std::vector<std::string>{"0.1", "0.2", "0.1"}));
  EXPECT_EQ(model.update(r.runs(), {ca, cb, ca}, 2).metrics, (std::vector<std::string>{"d_loss", "g_loss"}));
}

// A run that failed at step 200, was resumed and finished, whose log then had
// a bit flipped in a record after the failure (third fault campaign): the
// viewers showed `[running] step 200 / 300` and "Run failed at step 200".
// Read from disk, the damaged record is skipped with a notice, the state is
// the newest record's (finished at 300) and no failure banner is left.
TEST(Runs, ADamagedLogShowsTheNewestStateWithANotice) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("gantry_client_log_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "stream.gantrylog").string();
  fs::remove(path);
  std::vector<uint64_t> starts;
  {
    gantry::wire::RecordWriter w(path);
    uint64_t seq = 0;
    auto put = [&](gantry::wire::Payload p) {
      starts.push_back(fs::exists(path) ? fs::file_size(path) : 0);
      w.append(gantry::wire::encode({++seq, std::move(p)}));
    };
    put(gantry::wire::RunInfo{"gan", "gan", "0.1.0", "gan 0.1.0 (ABI 1.2)", "name: gan\n", 1, 1, 1.7e9, 300});
    for (int64_t step = 100; step <= 200; step += 100)
      put(gantry::wire::Scalars{{{step, 1.7e9 + step, "g_loss", 1.0}}});
    put(gantry::wire::Event{"failed", 200, 1.7e9 + 201, "plugin gan: training_step failed"});
    put(gantry::wire::Event{"resumed", 200, 1.7e9 + 300, "from step_0000200.ckpt"});
    for (int64_t step = 210; step <= 300; step += 10)
      put(gantry::wire::Scalars{{{step, 1.7e9 + 300 + step, "g_loss", 0.5}}});
    put(gantry::wire::Event{"finished", 300, 1.7e9 + 700, ""});
  }
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(starts[6] + 12));  // inside the step-220 record
    f.put('\x5a');
  }
  RunState state;
  SourceStatus status;
  {
    LogSource source(dir.string());
    std::vector<gantry::wire::Message> got;
    for (int i = 0; i < 50 && state.status() != RunStatus::kFinished; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      got.clear();
      source.drain(got);
      for (const auto& m : got) state.apply(m);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    status = source.status();
  }
  fs::remove_all(dir);
  EXPECT_EQ(state.status(), RunStatus::kFinished);
  EXPECT_EQ(state.latest_step(), 300);
  EXPECT_EQ(state.alerts().size(), 1u);
  EXPECT_EQ(state.current_alert(), nullptr) << "the failure banner outlived the resume";
  EXPECT_NE(status.text.find("log damaged: 1 damaged record skipped"), std::string::npos) << status.text;
}

// The ranks at a glance (both GUIs): grouped by host in rank order, the heat
// of each rank against the job's median busy time, node summaries, slowest
// first, the headline and a rank's detail; a writer without the step's parts
// leaves the heat unknown.
TEST(RanksModel, GroupsByNodeAndRanksTheSlowest) {
  RunState st;
  st.apply({1, gantry::wire::RunInfo{}});
  uint64_t seq = 2;
  for (uint32_t r = 0; r < 8; ++r) {
    gantry::wire::RankStatus s;
    s.rank = r;
    s.host = r < 4 ? "node1" : "node2";
    s.step = 100;
    s.samples_per_s = 100;
    s.rss_mib = 140;
    s.wall_time = r == 6 ? 900 : 1000;
    s.step_ms = 30;
    s.comm_ms = r == 5 ? 5 : 20;  // busy 25 against 10
    s.data_ms = r == 5 ? 20 : 2;
    s.compute_ms = s.step_ms - s.comm_ms - s.data_ms - 1;
    s.optimizer_ms = 1;
    s.other_ms = 0;
    s.cpu_pct = 100;
    s.straggler = r == 5;
    st.apply({seq++, s});
  }
  RanksSummary by_rank = summarize_ranks(st, 1001, false);
  ASSERT_EQ(by_rank.nodes.size(), 2u);
  EXPECT_EQ(by_rank.nodes[0].host, "node1");
  EXPECT_EQ(by_rank.nodes[1].ranks[1].status.rank, 5u);
  EXPECT_DOUBLE_EQ(by_rank.busy_median, 10);
  EXPECT_DOUBLE_EQ(by_rank.nodes[1].ranks[1].ratio, 2.5);
  EXPECT_DOUBLE_EQ(by_rank.nodes[1].ranks[1].heat, 1);
  EXPECT_DOUBLE_EQ(by_rank.nodes[0].ranks[0].heat, 0);
  EXPECT_TRUE(by_rank.nodes[1].ranks[2].stale);  // rank 6: silent for 101 s
  EXPECT_EQ(by_rank.nodes[1].stragglers, 1);
  EXPECT_DOUBLE_EQ(by_rank.nodes[1].busy_max, 25);
  EXPECT_DOUBLE_EQ(by_rank.nodes[0].samples_per_s, 400);
  EXPECT_EQ(by_rank.headline(),
            "8 ranks on 2 nodes | step 30.0 ms, busy median 10.0 ms, max 25.0 ms | 1 straggler | 1 stopped reporting");
  EXPECT_EQ(rank_detail(by_rank.nodes[1].ranks[1]),
            "rank 5 (node2): step 100, 30.0 ms = data 20.0 + compute 4.0 + comm 5.0 + optimizer 1.0 + other 0.0; "
            "busy 25.0 ms (2.5x the median); CPU 100%; RSS 140 MiB; STRAGGLER");
  const RanksSummary slowest = summarize_ranks(st, 1001, true);
  EXPECT_EQ(slowest.nodes[0].host, "node2");
  EXPECT_EQ(slowest.nodes[0].ranks[0].status.rank, 5u);
  EXPECT_EQ(heat_rgb(0), 0x3caa50u);
  EXPECT_EQ(heat_rgb(1), 0xd73228u);
  EXPECT_EQ(heat_rgb(-1), 0x808080u);

  RunState old;  // an older writer: no parts
  old.apply({1, gantry::wire::RankStatus{0, "h", 5, 10, 100, 1.0}});
  const RanksSummary unknown = summarize_ranks(old, 2, false);
  EXPECT_EQ(unknown.nodes.at(0).ranks.at(0).heat, -1);
  EXPECT_TRUE(step_parts(unknown.nodes[0].ranks[0].status).empty());
  EXPECT_EQ(unknown.headline(), "1 rank on 1 node | 0 stragglers | 0 stopped reporting");
}

// A search as both GUIs show it (gui/client/search.hpp): its trials are found
// under the experiment (4 levels down) and named trial_NNNN; each one's row
// is the journal's view of it (status, rung of the rungs, score); a trial the
// search starts later joins the runs, named as its siblings, once; a damaged
// journal shows what it holds up to the damage.
TEST(Search, TrialsShowTheJournalsStatusRungAndScoreAndNewOnesJoin) {
  namespace fs = std::filesystem;
  namespace search = gantry::search;
  std::string tmpl = (fs::temp_directory_path() / "gantry-client-search-XXXXXX").string();
  const fs::path root = ::mkdtemp(tmpl.data());
  const fs::path sdir = root / "runs/exp/search";
  auto run = [&](int t) {
    const fs::path d = sdir / search::trial_name(t) / "20261207-100000";
    fs::create_directories(d);
    std::ofstream(d / "stream.gantrylog") << "";
    fs::create_directory_symlink("20261207-100000", sdir / search::trial_name(t) / "latest");
    return d.string();
  };
  fs::create_directories(sdir);
  {
    gantry::wire::RecordWriter j((sdir / "journal").string());
    auto put = [&](const std::vector<std::string>& f) { j.append(search::record(f)); };
    put({"search", "method=asha", "metric=quality_fd", "mode=min", "rungs=10,30,90", "eta=3"});
    put({"new", "0", "system.lr=0.001"});
    put({"new", "1", "system.lr=0.0001"});
    put({"new", "2", "system.lr=0.0003"});
    put({"run", "0", "10", "1", "h:1"});
    put({"run", "1", "10", "1", "h:1"});
    put({"score", "0", "10", "512.25"});
    put({"end", "0", "paused", ""});
    put({"score", "1", "10", "nan"});
    put({"end", "1", "stopped", "diverged: quality_fd is nan at step 10"});
    put({"run", "0", "30", "1", "h:1"});  // promoted
  }
  const std::string t0 = run(0), t1 = run(1);
  fs::create_directories(root / "runs/exp/sweep/lr=1/20261207-090000");  // not a trial: no journal above it
  std::ofstream(root / "runs/exp/sweep/lr=1/20261207-090000/stream.gantrylog") << "";

  const auto found = find_runs({(root / "runs").string()});
  std::vector<std::string> names, dirs;
  for (const auto& r : found) names.push_back(r.name), dirs.push_back(r.dir);
  EXPECT_EQ(names, (std::vector<std::string>{"exp/search/trial_0000", "exp/search/trial_0001", "exp/sweep/lr=1"}));
  const auto under_exp = find_runs({(root / "runs/exp").string()});
  ASSERT_EQ(under_exp.size(), 3u);
  EXPECT_EQ(under_exp[0].name, "trial_0000");

  const auto of = trial_of(t1);
  ASSERT_TRUE(of.has_value());
  EXPECT_EQ(of->trial, 1);
  EXPECT_EQ(fs::path(of->search_dir), sdir);
  EXPECT_FALSE(trial_of(dirs[2]).has_value());
  EXPECT_FALSE(trial_of((root / "runs/exp").string()).has_value());

  SearchFollower f;
  f.watch({dirs[0], dirs[1], dirs[2], ""}, names);  // and a live run (no directory)
  ASSERT_TRUE(f.any());
  EXPECT_EQ(f.metric(), "quality_fd");
  EXPECT_TRUE(f.poll(100.0).empty());
  const auto r0 = f.row(0), r1 = f.row(1);
  ASSERT_TRUE(r0 && r1);
  EXPECT_EQ(r0->status, "promoted");
  EXPECT_EQ(r0->rung, "1 of 3");
  EXPECT_EQ(r0->score, "512.2");
  EXPECT_EQ(r1->status, "stopped");
  EXPECT_EQ(r1->score, "nan");
  EXPECT_EQ(r1->note, "diverged: quality_fd is nan at step 10");
  EXPECT_FALSE(f.row(2).has_value());
  EXPECT_FALSE(f.row(3).has_value());

  {  // the search goes on: trial 0 reaches its second rung, trial 2 starts
    gantry::wire::RecordWriter j((sdir / "journal").string());
    j.append(search::record({"score", "0", "30", "400"}));
    j.append(search::record({"end", "0", "paused", ""}));
    j.append(search::record({"run", "2", "10", "1", "h:1"}));
  }
  EXPECT_TRUE(f.poll(100.5).empty()) << "polled again within a second";
  EXPECT_TRUE(f.poll(101.0).empty()) << "trial_0002 has no run directory yet";
  EXPECT_EQ(f.row(0)->status, "paused");
  EXPECT_EQ(f.row(0)->rung, "2 of 3");
  EXPECT_EQ(f.row(0)->score, "400");
  const std::string t2 = run(2);  // its run directory made, the journal unchanged since
  const auto added = f.poll(102.0);
  ASSERT_EQ(added.size(), 1u);
  EXPECT_EQ(added[0].name, "exp/search/trial_0002");
  EXPECT_EQ(added[0].dir, t2);
  EXPECT_EQ(f.row(4)->status, "running");
  EXPECT_EQ(f.row(4)->score, "-");
  EXPECT_EQ(f.row(4)->rung, "-");
  {
    gantry::wire::RecordWriter j((sdir / "journal").string());
    j.append(search::record({"score", "2", "10", "600"}));
    j.append(search::record({"end", "2", "paused", ""}));
  }
  EXPECT_TRUE(f.poll(103.0).empty()) << "trial_0002 added twice";
  EXPECT_EQ(f.row(4)->status, "paused");

  {  // a record the search's code cannot read: the rows stay those of the records before it
    gantry::wire::RecordWriter j((sdir / "journal").string());
    j.append(search::record({"score", "0", "20", "1"}));  // a score before the last one's step
    j.append(search::record({"end", "0", "done", ""}));
  }
  SearchJournal journal(sdir.string());
  EXPECT_NE(journal.error().find("record 17 cannot be read"), std::string::npos) << journal.error();
  EXPECT_EQ(trial_row(journal, 0).status, "paused");
  EXPECT_EQ(trial_row(journal, 7).status, "unknown");
  fs::remove_all(root);
}

// A run paused by trainer.pause_at_step (a search's trial at a rung) is
// paused, not running, and has ended: nothing comes until a resume.
TEST(Runs, APausedRunIsPausedAndEnded) {
  RunState s;
  s.apply({1, gantry::wire::RunInfo{"gan", "gan", "0.1.0", "gan 0.1.0", "name: gan\n", 1, 1, 1.7e9, 300}});
  s.apply({2, gantry::wire::Scalars{{{100, 1.7e9 + 1, "g_loss", 1.0}}}});
  EXPECT_EQ(s.status(), RunStatus::kRunning);
  EXPECT_FALSE(has_ended(s.status()));
  s.apply({3, gantry::wire::Event{"paused", 100, 1.7e9 + 2, "trainer.pause_at_step=100 reached"}});
  EXPECT_EQ(s.status(), RunStatus::kPaused);
  EXPECT_STREQ(to_string(s.status()), "paused");
  EXPECT_TRUE(has_ended(s.status()));
  EXPECT_FALSE(has_ended(RunStatus::kRequeued));
  s.apply({4, gantry::wire::Event{"resumed", 100, 1.7e9 + 3, "from step_0000100.ckpt"}});
  EXPECT_EQ(s.status(), RunStatus::kRunning);
}

// Issue 44.1: a run whose messages say "running" is judged from facts
// outside the stream. Each fact, offline (a run directory's .lock note) and
// live (the stream's state), and a run that ended is never lost.
namespace {

namespace fs = std::filesystem;

struct LockedRun {
  fs::path dir;
  RunState state;
  explicit LockedRun(double last_wall) {
    static int made = 0;
    dir = fs::temp_directory_path() / ("gantry_lost_" + std::to_string(::getpid()) + "_" + std::to_string(made++));
    fs::create_directories(dir);
    state.apply(
        {1, gantry::wire::RunInfo{"gan", "gan", "0.1.0", "gan 0.1.0", "name: gan\n", 1, 1, last_wall - 60, 300}});
    state.apply({2, gantry::wire::Scalars{{{1200, last_wall, "g_loss", 1.0}}}});
  }
  ~LockedRun() { fs::remove_all(dir); }
  void note(long pid, const std::string& host) {
    std::ofstream(dir / ".lock") << "gantry pid " << pid << " on " << host << "\n";
  }
};

std::string this_host() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

double unix_now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

// A child process named "gantry" (its comm, as the runner's), until killed.
pid_t gantry_named_child() {
  int ready[2];
  if (::pipe(ready) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_NAME, "gantry", 0, 0, 0);
    const char c = 1;
    (void)!::write(ready[1], &c, 1);
    for (;;) ::pause();
  }
  char c = 0;
  (void)!::read(ready[0], &c, 1);
  ::close(ready[0]);
  ::close(ready[1]);
  return pid;
}

}  // namespace

TEST(Lost, ADeadWritersRunIsLostAndALiveOnesIsRunningHowEverQuiet) {
  const double now = unix_now();
  SourceStatus following;
  following.state = SourceStatus::State::kFollowing;
  // The writer's process is gone (a pid that cannot be alive).
  LockedRun dead(now - 1);
  dead.note(0x3fffffff, this_host());
  const std::string why = lost_why(dead.state, following, dead.dir.string(), now);
  EXPECT_EQ(why, "no end record, the writer's process (gantry pid " + std::to_string(0x3fffffff) + " on " +
                     this_host() + ") is gone");
  dead.state.mark_lost(why);
  EXPECT_EQ(dead.state.status(), RunStatus::kLost);
  EXPECT_TRUE(has_ended(dead.state.status()));
  EXPECT_EQ(dead.state.eta_seconds(), -1) << "the ETA stops";
  EXPECT_EQ(dead.state.lost_text().rfind("lost at step 1200: no end record, the writer's process", 0), 0u)
      << dead.state.lost_text();
  // A live "gantry" holds it: running, even after an hour without a record.
  const pid_t child = gantry_named_child();
  ASSERT_GT(child, 0);
  LockedRun quiet(now - 3600);
  quiet.note(child, this_host());
  EXPECT_EQ(lost_why(quiet.state, following, quiet.dir.string(), now), "");
  // The same pid with a note older than the process: another process got the pid.
  const auto old = fs::file_time_type::clock::now() - std::chrono::hours(2);
  fs::last_write_time(quiet.dir / ".lock", old);
  EXPECT_NE(lost_why(quiet.state, following, quiet.dir.string(), now).find("is gone"), std::string::npos);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  quiet.note(child, this_host());
  EXPECT_NE(lost_why(quiet.state, following, quiet.dir.string(), now).find("is gone"), std::string::npos);
}

TEST(Lost, FromAnotherHostItIsTheAgeOfTheLastRecord) {
  const double now = unix_now();
  SourceStatus following;
  following.state = SourceStatus::State::kFollowing;
  LockedRun fresh(now - 200);  // under 5 min: may be alive
  fresh.note(12345, "elsewhere.invalid");
  EXPECT_EQ(lost_why(fresh.state, following, fresh.dir.string(), now), "");
  LockedRun stale(now - 360);
  stale.note(12345, "elsewhere.invalid");
  EXPECT_EQ(lost_why(stale.state, following, stale.dir.string(), now), "no end record, no record for 6 min 00 s");
  // No note at all (a directory copied away from its host): the same rule.
  fs::remove(stale.dir / ".lock");
  EXPECT_EQ(lost_why(stale.state, following, stale.dir.string(), now), "no end record, no record for 6 min 00 s");
}

TEST(Lost, ALiveStreamClosedWithoutAnEndIsLostAfter15sAndBackWhenItAnswers) {
  const double now = unix_now();
  RunState s;
  s.apply({1, gantry::wire::RunInfo{"gan", "gan", "0.1.0", "gan 0.1.0", "name: gan\n", 1, 1, now - 60, 300}});
  s.apply({2, gantry::wire::Scalars{{{700, now - 2, "g_loss", 1.0}}}});
  SourceStatus live;
  live.state = SourceStatus::State::kConnected;
  live.since = now - 100;
  EXPECT_EQ(lost_why(s, live, "", now), "");
  live.state = SourceStatus::State::kReconnecting;
  live.since = now - 10;
  EXPECT_EQ(lost_why(s, live, "", now), "") << "10 s: a network blip";
  live.since = now - 16;
  const std::string why = lost_why(s, live, "", now);
  EXPECT_EQ(why, "no end record, the stream closed and its server has not answered for 16 s");
  s.mark_lost(why);
  EXPECT_EQ(s.status(), RunStatus::kLost);
  const uint64_t v = s.version();
  // The server answers again (a Welcome, seq 0): running.
  s.apply({0, gantry::wire::Welcome{1, "gan", 3, gantry::wire::kProtocolMinor, ""}});
  EXPECT_EQ(s.status(), RunStatus::kRunning);
  EXPECT_GT(s.version(), v);
  s.mark_lost(why);
  s.apply({3, gantry::wire::Scalars{{{710, now, "g_loss", 1.0}}}});
  EXPECT_EQ(s.status(), RunStatus::kRunning) << "a new record revives it";
}

TEST(Lost, ARunThatEndedOrWasRequeuedIsNeverLost) {
  const double now = unix_now();
  SourceStatus closed;
  closed.state = SourceStatus::State::kReconnecting;
  closed.since = now - 1000;
  for (const char* end : {"finished", "failed", "stopped", "paused", "requeued"}) {
    LockedRun run(now - 1000);
    run.note(0x3fffffff, this_host());
    run.state.apply({3, gantry::wire::Event{end, 1200, now - 999, ""}});
    EXPECT_EQ(lost_why(run.state, closed, run.dir.string(), now), "") << end;
    run.state.mark_lost("no end record");
    EXPECT_NE(run.state.status(), RunStatus::kLost) << end;
  }
}

// check_lost reads the run directory through the real LogSource, at most once a second.
TEST(Lost, CheckLostFollowsARunDirectoryAndIsThrottled) {
  const double now = unix_now();
  LockedRun run(now - 1);
  run.note(0x3fffffff, this_host());
  {
    gantry::wire::RecordWriter w((run.dir / "stream.gantrylog").string());
    w.append(gantry::wire::encode(
        {1, gantry::wire::RunInfo{"gan", "gan", "0.1.0", "gan", "name: gan\n", 1, 1, now - 60, 300}}));
    w.append(gantry::wire::encode({2, gantry::wire::Scalars{{{1200, now - 1, "g_loss", 1.0}}}}));
  }
  RunState state;
  LogSource source(run.dir.string());
  EXPECT_EQ(source.run_dir(), run.dir.string());
  for (int i = 0; i < 50 && state.latest_step() < 1200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::vector<gantry::wire::Message> got;
    source.drain(got);
    for (const auto& m : got) state.apply(m);
  }
  ASSERT_EQ(state.latest_step(), 1200);
  check_lost(state, source, now);
  EXPECT_EQ(state.status(), RunStatus::kLost);
  EXPECT_EQ(state.lost_text().rfind("lost at step 1200: no end record, the writer's process", 0), 0u);
  const pid_t child = gantry_named_child();
  run.note(child, this_host());
  check_lost(state, source, now + 0.5);
  EXPECT_EQ(state.status(), RunStatus::kLost) << "checked again within a second";
  check_lost(state, source, now + 1.5);
  EXPECT_EQ(state.status(), RunStatus::kRunning) << "a live writer holds it now";
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
}
