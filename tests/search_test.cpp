// gantry search: the space, the journal, ASHA's decisions (unit), and the
// command itself on the SDK's tiny plugin: a promoted trial ends bit for bit
// as an uninterrupted run of its values, kill -9 of the search and rerun
// continues, bad input is one line before any trial runs.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "gantry/errors.hpp"
#include "search/asha.hpp"
#include "search/journal.hpp"
#include "search/pbt.hpp"
#include "search/plan.hpp"
#include "search/space.hpp"
#include "search/tpe.hpp"
#include "support.hpp"
#include "wire/record_log.hpp"

using namespace gantry::search;
using gantry::test::TempDir;

namespace {

std::string parse_error(const std::string& key, const std::string& value) {
  try {
    parse_dimension(key, value);
  } catch (const gantry::ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(SearchSpace, ParsesEachDistributionAndNamesWhatIsWrong) {
  const Dimension lr = parse_dimension("system.lr", "loguniform(1e-5,1e-3)");
  EXPECT_EQ(lr.kind, Dimension::Kind::kLogUniform);
  EXPECT_EQ(lr.low, 1e-5);
  EXPECT_EQ(lr.high, 1e-3);
  EXPECT_EQ(parse_dimension("data.batch_size", "choice(32, 64,128)").values,
            (std::vector<std::string>{"32", "64", "128"}));
  EXPECT_EQ(parse_dimension("trainer.seed", "int(1,100)").extremes(), (std::vector<std::string>{"1", "100"}));
  EXPECT_NE(parse_error("system.lr", "normal(0,1)").find("unknown distribution 'normal'"), std::string::npos);
  EXPECT_NE(parse_error("system.lr", "uniform(1,0)").find("low must be below high"), std::string::npos);
  EXPECT_NE(parse_error("system.lr", "loguniform(0,1)").find("loguniform() needs low > 0"), std::string::npos);
  EXPECT_NE(parse_error("system.lr", "uniform(a,1)").find("finite numbers"), std::string::npos);
  EXPECT_NE(parse_error("trainer.seed", "int(1.5,3)").find("integer bounds"), std::string::npos);
  EXPECT_NE(parse_error("data.batch_size", "choice(32)").find("two values or more"), std::string::npos);
  EXPECT_NE(parse_error("data.batch_size", "choice(32,32)").find("lists 32 twice"), std::string::npos);
  EXPECT_EQ(parse_error("x", "uniform(1,1)").rfind("gantry search: 'x=uniform(1,1)': ", 0), 0u) << "names the override";
}

// Trial N's values come from its own stream: the same whatever ran before,
// within the bounds, and log-uniform draws spread evenly over the decades.
TEST(SearchSpace, ATrialsDrawsAreItsOwnAndWithinTheBounds) {
  const Dimension lr = parse_dimension("system.lr", "loguniform(1e-5,1e-1)");
  const Dimension n = parse_dimension("trainer.seed", "int(1,4)");
  auto a = trial_rng(7, 5, 0), b = trial_rng(7, 5, 0), other = trial_rng(7, 6, 0);
  const std::string va = lr.sample(a);
  EXPECT_EQ(va, lr.sample(b));
  EXPECT_NE(va, lr.sample(other));
  int below_1e3 = 0;
  std::map<std::string, int> ints;
  for (int i = 0; i < 4000; ++i) {
    auto r = trial_rng(1, uint64_t(i), 0);
    const double v = std::stod(lr.sample(r));
    ASSERT_GE(v, 1e-5);
    ASSERT_LE(v, 1e-1);
    below_1e3 += v < 1e-3;
    ++ints[n.sample(r)];
  }
  // Half the decades lie below 1e-3: 2000 expected, binomial sd 32; 5 sd allowed.
  EXPECT_NEAR(below_1e3, 2000, 160);
  ASSERT_EQ(ints.size(), 4u);  // 1, 2, 3 and 4, each ~1000 (sd 27)
  for (const auto& [v, count] : ints) EXPECT_NEAR(count, 1000, 140) << v;
  // PBT's explore stays within the bounds.
  auto r = trial_rng(1, 0, 1);
  EXPECT_EQ(lr.perturb("0.1", r, false) == "0.1" || lr.perturb("0.1", r, false) == "0.08", true);
}

// A search killed mid-append leaves a torn record: reopening cuts it and keeps
// every whole one; appends go on after them.
TEST(SearchJournal, ATornLastRecordIsCutAndTheRestReadBack) {
  TempDir dir;
  const std::string path = dir / "journal";
  {
    Journal j(path, true);
    j.append({"search", "method=asha", "metric=loss"});
    j.append({"new", "0", "system.lr=0.01"});
    j.append({"run", "0", "10", "123"});
    j.append({"score", "0", "10", "1.5"});
    j.append({"end", "0", "paused", ""});
  }
  const auto whole = std::filesystem::file_size(path);
  {
    std::ofstream out(path, std::ios::app | std::ios::binary);
    out.write("\x20\x00\x00\x00\x01\x02", 6);  // a length and half a CRC: the append kill -9 cut
  }
  Journal j(path, true);
  EXPECT_NE(j.note().find("torn last record cut (6 bytes"), std::string::npos) << j.note();
  EXPECT_EQ(std::filesystem::file_size(path), whole + 6) << "cut only under the lock: it may be another's append";
  auto lock = j.lock(60);
  EXPECT_EQ(std::filesystem::file_size(path), whole);
  ASSERT_EQ(j.state().trials.size(), 1u);
  const Trial& t = j.state().trials[0];
  EXPECT_EQ(t.status, Status::kPaused);
  ASSERT_EQ(t.scores.size(), 1u);
  EXPECT_EQ(t.scores[0].step, 10);
  EXPECT_EQ(t.value("system.lr"), "0.01");
  j.append({"run", "0", "30", "124"});
  lock.reset();
  EXPECT_FALSE(std::filesystem::exists(path + ".lock"));
  const Journal reread(path, false);
  EXPECT_EQ(reread.state().trials[0].status, Status::kRunning);
  EXPECT_TRUE(reread.note().empty());
  EXPECT_TRUE(reread.state().trials[0].promoted);
}

TEST(SearchJournal, ARecordItCannotReadIsOneLineNamingIt) {
  TempDir dir;
  const std::string path = dir / "journal";
  {
    Journal j(path, true);
    j.append({"search", "method=asha"});
    EXPECT_THROW(j.append({"score", "3", "10", "1.0"}), gantry::Error);  // never written
    gantry::wire::RecordWriter w(path);
    w.append(record({"score", "3", "10", "1.0"}));  // as an edit or another program would
  }
  try {
    Journal again(path, false);
    FAIL() << "read a score of an unknown trial";
  } catch (const gantry::Error& e) {
    EXPECT_NE(std::string(e.what()).find("record 2 cannot be read (trial 3 is not known)"), std::string::npos)
        << e.what();
  }
}

namespace {

// A state of `scores.size()` trials, each paused at rung 0 with that score.
SearchState paused_at(const std::vector<double>& scores, int64_t step) {
  SearchState s;
  for (size_t i = 0; i < scores.size(); ++i) {
    const std::string id = std::to_string(i);
    s.apply(record({"new", id, "system.lr=0.1"}));
    s.apply(record({"run", id, std::to_string(step)}));
    s.apply(record({"score", id, std::to_string(step), std::isnan(scores[i]) ? "nan" : std::to_string(scores[i])}));
    s.apply(record({"end", id, "paused", ""}));
  }
  return s;
}

}  // namespace

TEST(Asha, PromotesTheTopThirdOfTheHighestRungAndNeverWaitsForARungToFill) {
  const Asha asha{rung_steps(10, 3, 90), 3, 9, false};
  EXPECT_EQ(asha.rungs, (std::vector<int64_t>{10, 30, 90}));
  // Two results at rung 0: floor(2/3) = 0 may go on, so a new trial starts (no waiting).
  Action a = asha.next(paused_at({2.0, 1.0}, 10));
  EXPECT_EQ(a.kind, Action::Kind::kNew);
  EXPECT_EQ(a.trial, 2);
  EXPECT_EQ(a.target, 10);
  // Three: the best (smallest) goes on to rung 1.
  SearchState s = paused_at({2.0, 1.0, 3.0}, 10);
  a = asha.next(s);
  EXPECT_EQ(a.kind, Action::Kind::kResume);
  EXPECT_EQ(a.trial, 1);
  EXPECT_EQ(a.target, 30);
  // Promoted once: not again; the next free worker starts a trial.
  s.apply(record({"run", "1", "30"}));
  EXPECT_EQ(asha.next(s).kind, Action::Kind::kNew);
  // --max: the largest.
  const Asha up{rung_steps(10, 3, 90), 3, 9, true};
  EXPECT_EQ(up.next(paused_at({2.0, 1.0, 3.0}, 10)).trial, 2);
  // A tie keeps the earlier result; a NaN is never promoted.
  EXPECT_EQ(asha.next(paused_at({1.0, 1.0, 1.0}, 10)).trial, 0);
  EXPECT_EQ(asha.top(paused_at({NAN, NAN, NAN}, 10), 0), std::vector<int>{});
  // All trials sampled and nothing promotable: nothing to do.
  const Asha three{rung_steps(10, 3, 90), 3, 2, false};
  EXPECT_EQ(three.next(paused_at({2.0, 1.0}, 10)).kind, Action::Kind::kNone);
  // A trial sampled but never started (the search was killed between) starts.
  SearchState sampled = paused_at({2.0, 1.0}, 10);
  sampled.apply(record({"new", "2", "system.lr=0.5"}));
  a = asha.next(sampled);
  EXPECT_EQ(a.kind, Action::Kind::kNew);
  EXPECT_EQ(a.trial, 2);
  // An interrupted trial goes on first, to its own target.
  s.apply(record({"end", "1", "interrupted", ""}));
  a = asha.next(s);
  EXPECT_EQ(a.kind, Action::Kind::kResume);
  EXPECT_EQ(a.trial, 1);
  EXPECT_EQ(a.target, 30);
}

// PBT: nothing is decided while a member runs; at a step every member paused
// at, the bottom quarter copies the top quarter (each its own draw, the
// same on a rerun), explored within the bounds; the next interval starts
// only once the step is decided.
TEST(Pbt, TheBottomQuarterCopiesTheTopQuarterOnceEveryMemberPausedThere) {
  const std::vector<Dimension> space = {parse_dimension("system.lr", "loguniform(0.01,1)")};
  const Pbt pbt{interval_steps(10, 30), 8, false, 5, &space};
  EXPECT_EQ(pbt.steps, (std::vector<int64_t>{10, 20, 30}));
  SearchState s = paused_at({0.5, 0.1, 0.9, 0.3, 0.8, 0.2, 0.7, 0.4}, 10);
  SearchState running = s;
  running.apply(record({"run", "3", "20"}));
  EXPECT_EQ(pbt.decide_at(running), -1);
  EXPECT_EQ(pbt.next(s).kind, Action::Kind::kNone) << "step 10 is not decided yet";
  ASSERT_EQ(pbt.decide_at(s), 10);
  const std::vector<Exploit> e = pbt.decide(s, 10);
  ASSERT_EQ(e.size(), 2u);   // floor(8 / 4)
  EXPECT_EQ(e[0].trial, 2);  // 0.9, the worst, first
  EXPECT_EQ(e[1].trial, 4);  // 0.8
  for (const Exploit& x : e) {
    EXPECT_TRUE(x.from == 1 || x.from == 5) << x.from;  // 0.1 and 0.2
    ASSERT_EQ(x.overrides.size(), 1u);
    const double lr = std::stod(x.overrides[0].substr(std::string("system.lr=").size()));
    EXPECT_TRUE(lr >= 0.01 && lr <= 1) << x.overrides[0];
  }
  const std::vector<Exploit> again = pbt.decide(s, 10);
  for (size_t i = 0; i < e.size(); ++i) {
    EXPECT_EQ(again[i].from, e[i].from);
    EXPECT_EQ(again[i].overrides, e[i].overrides);
    EXPECT_EQ(again[i].seed, e[i].seed);
  }
  EXPECT_NE(e[0].seed, e[1].seed);
  for (const Exploit& x : e) {
    std::vector<std::string> f = {"exploit", std::to_string(x.trial), std::to_string(x.from), "10",
                                  std::to_string(x.seed)};
    f.insert(f.end(), x.overrides.begin(), x.overrides.end());
    s.apply(record(f));
  }
  EXPECT_EQ(s.trials[2].lineage.at(0).from, e[0].from);
  EXPECT_EQ(s.trials[2].value("system.lr"), e[0].overrides[0].substr(10));
  EXPECT_EQ(s.trials[2].lineage.at(0).overrides, std::vector<std::string>{"system.lr=0.1"});
  s.apply(record({"decided", "10"}));
  EXPECT_EQ(pbt.decide_at(s), -1);
  const Action a = pbt.next(s);
  EXPECT_EQ(a.kind, Action::Kind::kResume);
  EXPECT_EQ(a.target, 20);
  // A tie keeps the earlier result on top; a NaN is the worst; fewer than 4 members: no exploit.
  EXPECT_EQ(pbt.decide(paused_at({1, 1, 1, 1}, 10), 10).at(0).trial, 3);
  EXPECT_EQ(pbt.decide(paused_at({1, NAN, 2, 3}, 10), 10).at(0).trial, 1);
  EXPECT_TRUE(pbt.decide(paused_at({1, 2, 3}, 10), 10).empty());
  // At the budget nothing is decided: the members are done.
  EXPECT_EQ(pbt.decide_at(paused_at({1, 2, 3, 4, 5, 6, 7, 8}, 30)), -1);
}

// TPE: after the startup trials (random search's own draws), new values
// crowd where the good quarter lies: on (u - 0.2)^2 over lr's log position,
// and on a choice whose third value is best (by more than lr can give: a
// univariate TPE locks onto the first good choice it meets otherwise).
TEST(Tpe, NewTrialsCrowdWhereTheGoodQuarterLies) {
  const std::vector<Dimension> space = {parse_dimension("system.lr", "loguniform(0.0001,1)"),
                                        parse_dimension("data.batch_size", "choice(16,32,64,128)")};
  const Tpe tpe{&space, false, 3, 10};
  SearchState s;
  auto objective = [&](const std::vector<std::string>& v) {
    const double u = space[0].unit(v[0].substr(v[0].find('=') + 1));
    return (u - 0.2) * (u - 0.2) + (v[1] == "data.batch_size=64" ? 0.0 : 0.3);
  };
  // The startup draws are random search's: trial N's own stream.
  for (int i = 0; i < 10; ++i) {
    const auto v = tpe.sample(s, i);
    auto rng = trial_rng(3, uint64_t(i), 0);
    ASSERT_EQ(
        v, (std::vector<std::string>{"system.lr=" + space[0].sample(rng), "data.batch_size=" + space[1].sample(rng)}));
  }
  std::vector<std::string> f;
  for (int i = 0; i < 60; ++i) {
    const auto v = tpe.sample(s, i);
    f = {"new", std::to_string(i)};
    f.insert(f.end(), v.begin(), v.end());
    s.apply(record(f));
    s.apply(record({"run", std::to_string(i), "90"}));
    s.apply(record({"score", std::to_string(i), "90", std::to_string(objective(v))}));
    s.apply(record({"end", std::to_string(i), "done", ""}));
  }
  double tpe_gap = 0, random_gap = 0;
  int at_64 = 0;
  for (int i = 40; i < 60; ++i) {
    const Trial& t = s.trials[size_t(i)];
    tpe_gap += std::abs(space[0].unit(t.value("system.lr")) - 0.2) / 20;
    at_64 += t.value("data.batch_size") == "64";
    auto rng = trial_rng(3, uint64_t(i), 0);
    random_gap += std::abs(space[0].unit(space[0].sample(rng)) - 0.2) / 20;
  }
  // Uniform draws are 0.34 from 0.2 on average; the last 20 of TPE's within a third of that.
  EXPECT_LT(tpe_gap, random_gap / 3) << tpe_gap << " vs " << random_gap;
  EXPECT_GE(at_64, 12) << "of 20 (random: 5)";
  // The same state gives the same values.
  EXPECT_EQ(tpe.sample(s, 60), tpe.sample(s, 60));
}

// ---- the command ------------------------------------------------------------

namespace {

const std::string kTinySearch = "search '" + gantry::test::kTiny + "' 'system.lr=loguniform(0.001,1)'";

Journal journal_of(const TempDir& dir) { return Journal(dir.path() / "runs/tiny/search/journal", false); }

// The trial that reached the budget with the best score.
const Trial* best_done(const SearchState& s) {
  const Trial* best = nullptr;
  for (const auto& t : s.trials)
    if (t.status == Status::kDone && (!best || t.scores.back().value < best->scores.back().value)) best = &t;
  return best;
}

// Trains `t`'s values straight to `steps` in `dir` and compares its metrics
// with the trial's (the trial ran paused, promoted, maybe interrupted).
void expect_same_as_straight(const TempDir& search_dir, const Trial& t, int64_t steps, int64_t log_every,
                             const std::string& fixed = "") {
  TempDir straight;
  const auto r = gantry::test::run_gantry("train '" + gantry::test::kTiny + "' " + t.overrides.at(0) +
                                              " trainer.max_steps=" + std::to_string(steps) +
                                              " trainer.max_epochs=-1 trainer.threads=1 " + fixed,
                                          straight.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string a = gantry::test::read_text(straight / "runs/tiny/latest/metrics.csv");
  const std::string b = gantry::test::read_text(
      (search_dir.path() / "runs/tiny/search" / trial_name(t.id) / "latest/metrics.csv").string());
  EXPECT_EQ(gantry::test::rows_without_wall_time(a), gantry::test::rows_without_wall_time(b)) << trial_name(t.id);
  EXPECT_EQ(gantry::test::lines_of(b).size(), size_t(steps / log_every + 1));  // a row every log step, no duplicate
}

}  // namespace

TEST(SearchCli, AshaPausesAndPromotesTrialsThatEndAsAnUninterruptedRunBitForBit) {
  TempDir dir;
  const auto r = gantry::test::run_gantry(
      kTinySearch + " --trials 6 --budget 40 --rung 10 --eta 2 --metric loss --parallel 2 trainer.threads=1",
      dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("rungs at steps 10, 20, 40, min loss"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(": promoted to step 20"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nbest: trial_"), std::string::npos) << r.out;
  const Journal j = journal_of(dir);
  ASSERT_EQ(j.state().trials.size(), 6u);
  size_t done = 0;
  for (const auto& t : j.state().trials) {
    EXPECT_TRUE(t.status == Status::kDone || t.status == Status::kPaused) << trial_name(t.id);
    done += t.status == Status::kDone;
    // Every trial's run is one run directory, resumed in place at each promotion.
    EXPECT_EQ(gantry::test::run_dirs_in(dir.path() / "runs/tiny/search" / trial_name(t.id)), 1) << trial_name(t.id);
  }
  // 6 results at rung 0 (10 steps) promote 3 to rung 1; 3 promote 1 to the budget
  // (rung 1's first results may promote earlier: at least one trial is done).
  EXPECT_GE(done, 1u);
  const Trial* best = best_done(j.state());
  ASSERT_NE(best, nullptr);
  ASSERT_EQ(best->scores.size(), 3u);  // scored at 10, 20 and 40: paused twice, promoted twice
  expect_same_as_straight(dir, *best, 40, 10);
  // --summary reads the journal and runs nothing.
  const auto s = gantry::test::run_gantry(
      kTinySearch + " --trials 6 --budget 40 --rung 10 --eta 2 --metric loss --summary", dir.path());
  ASSERT_EQ(s.exit_code, 0) << s.out << s.err;
  EXPECT_NE(s.out.find(trial_name(best->id) + "  done"), std::string::npos) << s.out;
  EXPECT_EQ(s.out.find("started"), std::string::npos) << s.out;
}

// kill -9 of the search while trials run: they checkpoint (their parent's
// death is SIGTERM to them), the rerun marks them interrupted, resumes them
// from their checkpoints and finishes; the result equals an uninterrupted run.
TEST(SearchCli, KillNineOfTheSearchThenRerunContinuesExactly) {
  TempDir dir;
  const std::string cmd = kTinySearch +
                          " --trials 4 --budget 3000 --rung 1000 --eta 2 --metric loss --parallel 2 trainer.threads=1 "
                          "trainer.log_every_n_steps=500 checkpoint.every_n_steps=250";
  const pid_t pid = gantry::test::spawn_gantry(cmd, dir.path(), dir / "first.log");
  const auto journal = dir.path() / "runs/tiny/search/journal";
  bool scored = false;
  for (int i = 0; i < 2000 && !scored; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!std::filesystem::exists(journal)) continue;
    const Journal j(journal, false);
    for (const auto& t : j.state().trials) scored |= !t.scores.empty();
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  ASSERT_TRUE(scored) << gantry::test::read_text(dir / "first.log");
  size_t running = 0;
  const Journal killed(journal, false);
  for (const auto& t : killed.state().trials) running += t.status == Status::kRunning;
  ASSERT_GT(running, 0u) << "nothing ran when the search was killed: " << gantry::test::read_text(dir / "first.log");

  const auto again = gantry::test::run_gantry(cmd, dir.path());
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_NE(again.out.find("interrupted (the search was stopped): it goes on from its checkpoint"), std::string::npos)
      << again.out;
  EXPECT_NE(again.out.find(": goes on to step"), std::string::npos) << again.out;
  const Journal j = journal_of(dir);
  EXPECT_EQ(j.state().trials.size(), 4u);
  for (const auto& t : j.state().trials)
    EXPECT_TRUE(t.status == Status::kDone || t.status == Status::kPaused) << trial_name(t.id) << " " << t.note;
  const Trial* best = best_done(j.state());
  ASSERT_NE(best, nullptr) << again.out;
  expect_same_as_straight(dir, *best, 3000, 500, "trainer.log_every_n_steps=500 checkpoint.every_n_steps=250");
}

// Bad input: one line naming the culprit, before any trial runs (no search directory).
TEST(SearchCli, BadInputIsOneLineBeforeAnyTrialRuns) {
  const std::string base = "search '" + gantry::test::kTiny + "' ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"'system.lr=normal(0,1)' --trials 2 --budget 20 --metric loss", "unknown distribution 'normal'"},
      {"'data.batch_size=int(0,64)' --trials 2 --budget 20 --metric loss",
       "data.batch_size=int(0,64): the value 0 is refused: "},
      {"'system.lr=uniform(0.01,0.1)' --trials 2 --budget 5 --rung 10 --metric loss",
       "--budget 5 is below the first rung (--rung 10)"},
      {"'system.lr=uniform(0.01,0.1)' --trials 2 --budget 40 --rung 15 --metric loss",
       "the first rung (15 steps) is not a multiple of trainer.log_every_n_steps=10"},
      {"'system.lr=uniform(0.01,0.1)' --trials 2 --budget 40 --metric quality_fd",
       "--metric quality_fd is the quality score, which this config does not compute"},
      {"'system.lr=uniform(0.01,0.1)' trainer.max_steps=5 --trials 2 --budget 40 --metric loss",
       "'trainer.max_steps' is set by the search"},
      {"system.lr=0.1 --trials 2 --budget 40 --metric loss", "no key has a distribution"},
  };
  for (const auto& [args, expected] : cases) {
    TempDir dir;
    const auto r = gantry::test::run_gantry(base + args, dir.path());
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(expected), std::string::npos) << args << "\n" << r.err;
    EXPECT_EQ(gantry::test::lines_of(r.err).size(), 1u) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir.path() / "runs/tiny/search")) << args;
  }
  // A bound only the plugin refuses (the GAN's constructor: b1 in [0, 1)) is
  // caught the same way: each extreme builds the system before any trial.
  TempDir dir;
  const auto r = gantry::test::run_gantry("search '" + gantry::test::kDemo + "' system.plugin='" +
                                              gantry::test::gan_plugin_path() +
                                              "' 'system.b1=uniform(0,2)' --trials 2 "
                                              "--budget 100 --rung 50 --metric loss_d",
                                          dir.path());
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("system.b1=uniform(0,2): the value 2 is refused: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("system.b1 must be in [0, 1)"), std::string::npos) << r.err;
  EXPECT_EQ(gantry::test::lines_of(r.err).size(), 1u) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "runs")) << r.out;
}

// A metric no trial logs stops the search at the first rung with one line
// naming what is logged; the rerun with a metric that is, continues.
TEST(SearchCli, AMetricNoTrialLogsIsNamedAndARerunWithARightOneGoesOn) {
  TempDir dir;
  const std::string args = " --trials 2 --budget 20 --rung 10 --eta 2 --parallel 1 trainer.threads=1";
  const auto r = gantry::test::run_gantry(kTinySearch + args + " --metric lossy", dir.path());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("gantry: error: gantry search: --metric lossy: trial_0000 logs no such metric (its "
                       "metrics.csv has loss"),
            std::string::npos)
      << r.out << r.err;
  const auto again = gantry::test::run_gantry(kTinySearch + args + " --metric loss", dir.path());
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  const Journal j = journal_of(dir);
  ASSERT_EQ(j.state().trials.size(), 2u);
  EXPECT_EQ(j.state().settings.at("metric"), "loss");
  EXPECT_EQ(j.state().trials[0].scores.front().step, 10);
  // Another setting than the journal's (a new space) is refused, naming it.
  const auto other = gantry::test::run_gantry(
      "search '" + gantry::test::kTiny + "' 'system.lr=uniform(0.1,1)'" + args + " --metric loss", dir.path());
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_NE(other.err.find("holds a search whose space is 'system.lr=loguniform(0.001,1)'"), std::string::npos)
      << other.err;
}

// The space in the config's `search:` block (flat or nested keys, file
// order first): it is the search's space, its trials run the same config
// (train ignores the block); a key the command line gives is the command
// line's (a value pins it, a distribution replaces it); a bad distribution
// in the block is one line naming the file and line.
TEST(SearchCli, TheSpaceInTheConfigsSearchBlock) {
  TempDir dir;
  const std::string head = gantry::test::read_text(gantry::test::source_path("tests/sdk_plugin/tiny.yaml"));
  const std::string config = (dir.path() / "tiny_search.yaml").string();
  gantry::test::write_text(
      config, head + "search:\n  system.lr: loguniform(0.001,1)\n  data:\n    batch_size: choice(16,32)\n");
  const std::string base = "search '" + config + "' system.plugin='" + gantry::test::plugin_path("tiny") +
                           "' --trials 3 --budget 20 --rung 10 --eta 2 -j 1 trainer.threads=1 --metric loss";
  const auto r = gantry::test::run_gantry(base, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const Journal j = journal_of(dir);
  EXPECT_EQ(j.state().settings.at("space"), "system.lr=loguniform(0.001,1) data.batch_size=choice(16,32)");
  ASSERT_EQ(j.state().trials.size(), 3u);
  for (const auto& t : j.state().trials) {
    EXPECT_FALSE(t.value("system.lr").empty()) << trial_name(t.id);
    const std::string bs = t.value("data.batch_size");
    EXPECT_TRUE(bs == "16" || bs == "32") << bs;
    const std::string yaml =
        gantry::test::read_text((dir.path() / "runs/tiny/search" / trial_name(t.id) / "latest/config.yaml").string());
    EXPECT_NE(yaml.find("batch_size: " + bs), std::string::npos) << yaml;
  }

  // The command line pins one key and replaces the other's distribution.
  TempDir other;
  gantry::test::write_text((other.path() / "tiny_search.yaml").string(), gantry::test::read_text(config));
  const std::string base2 = "search '" + (other.path() / "tiny_search.yaml").string() + "' system.plugin='" +
                            gantry::test::plugin_path("tiny") +
                            "' --trials 2 --budget 10 --rung 10 -j 1 trainer.threads=1 --metric loss";
  const auto pinned = gantry::test::run_gantry(base2 + " data.batch_size=8 'system.lr=uniform(0.2,0.3)'", other.path());
  ASSERT_EQ(pinned.exit_code, 0) << pinned.out << pinned.err;
  const Journal pj(other.path() / "runs/tiny/search/journal", false);
  EXPECT_EQ(pj.state().settings.at("space"), "system.lr=uniform(0.2,0.3)");
  EXPECT_NE(pj.state().settings.at("fixed").find("data.batch_size=8"), std::string::npos)
      << pj.state().settings.at("fixed");
  for (const auto& t : pj.state().trials) {
    const double lr = std::stod(t.value("system.lr"));
    EXPECT_TRUE(lr >= 0.2 && lr <= 0.3) << lr;
  }

  // A bad distribution in the block: one line with the file and line.
  gantry::test::write_text((other.path() / "bad.yaml").string(), head + "search:\n  system.lr: normal(0,1)\n");
  const auto bad =
      gantry::test::run_gantry("search '" + (other.path() / "bad.yaml").string() + "' system.plugin='" +
                                   gantry::test::plugin_path("tiny") + "' --trials 2 --budget 20 --metric loss",
                               other.path());
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("bad.yaml:15: search.system.lr: 'normal(0,1)': unknown distribution 'normal'"),
            std::string::npos)
      << bad.err;
  EXPECT_EQ(gantry::test::lines_of(bad.err).size(), 1u) << bad.err;
}

// PBT on the tiny plugin: members pause at every interval, the bottom quarter
// copies the top quarter's checkpoint and perturbs its lr; a member after
// its exploit trains on exactly as a run resumed from its source's
// checkpoint with its new lr (the tiny plugin draws no noise: the copy's new
// random streams change nothing here; tests/checkpoint_test.cpp proves they
// are new).
TEST(SearchCli, PbtExploitsATopMembersCheckpointAndTrainsOnFromItExactly) {
  TempDir dir;
  const std::string args =
      " --method pbt --trials 4 --budget 30 --rung 10 --metric loss --parallel 2 trainer.threads=1";
  const auto r = gantry::test::run_gantry(kTinySearch + args, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("intervals end at steps 10, 20, 30"), std::string::npos) << r.out;
  const Journal j = journal_of(dir);
  ASSERT_EQ(j.state().trials.size(), 4u);
  EXPECT_EQ(j.state().decided, 20);
  const Trial* copied = nullptr;
  for (const auto& t : j.state().trials) {
    EXPECT_EQ(t.status, Status::kDone) << trial_name(t.id);
    if (!t.lineage.empty() && t.lineage.front().step == 10) copied = &t;
  }
  ASSERT_NE(copied, nullptr) << "no member copied another at step 10: " << r.out;  // floor(4/4) = 1 at each step
  EXPECT_NE(r.out.find(trial_name(copied->id) + ": exploit " + trial_name(copied->lineage.front().from) +
                       "'s checkpoint at step 10"),
            std::string::npos)
      << r.out;
  // Its values from step 10 on: the ones after its first exploit (a second exploit at 20 ends the comparison).
  const Trial& from = j.state().trials[size_t(copied->lineage.front().from)];
  const std::string source_lr = from.lineage.empty() || from.lineage.front().step > 10
                                    ? (from.lineage.empty() ? from.overrides : from.lineage.front().overrides).at(0)
                                    : "";
  ASSERT_FALSE(source_lr.empty());
  const std::string new_lr = copied->lineage.size() > 1 ? copied->lineage[1].overrides.at(0) : copied->overrides.at(0);
  TempDir chain;
  const std::string train = "train '" + gantry::test::kTiny +
                            "' trainer.max_steps=30 trainer.max_epochs=-1 "
                            "trainer.threads=1 trainer.resume=auto name=chain ";
  ASSERT_EQ(gantry::test::run_gantry(train + source_lr + " trainer.pause_at_step=10", chain.path()).exit_code, 0);
  ASSERT_EQ(gantry::test::run_gantry(train + new_lr + " trainer.pause_at_step=20", chain.path()).exit_code, 0);
  const auto rows = gantry::test::lines_of(gantry::test::rows_without_wall_time(gantry::test::read_text(
      (dir.path() / "runs/tiny/search" / trial_name(copied->id) / "latest/metrics.csv").string())));
  const auto want = gantry::test::lines_of(
      gantry::test::rows_without_wall_time(gantry::test::read_text(chain / "runs/chain/latest/metrics.csv")));
  ASSERT_GE(rows.size(), 3u);
  ASSERT_EQ(want.size(), 3u);  // header, 10, 20
  EXPECT_EQ(rows[2], want[2]) << "the row at step 20 is its source's checkpoint trained on with its new lr";
  EXPECT_NE(rows[1], want[1]) << "its own first interval is not its source's";
  // --summary names the lineage.
  const auto s = gantry::test::run_gantry(kTinySearch + args + " --summary", dir.path());
  EXPECT_NE(s.out.find("copied " + trial_name(from.id) + " at 10;"), std::string::npos) << s.out;
}

// --method tpe: ASHA's schedule, its first trials random search's draws and
// the later ones the estimator's (not those draws).
TEST(SearchCli, TpeSchedulesAsAshaAndDrawsItsLaterTrialsFromTheResults) {
  TempDir dir;
  const auto r =
      gantry::test::run_gantry(kTinySearch +
                                   " --method tpe --trials 6 --budget 20 --rung 10 --eta 2 --metric loss --parallel 2 "
                                   "trainer.threads=1",
                               dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find(": promoted to step 20"), std::string::npos) << r.out;
  const Journal j = journal_of(dir);
  ASSERT_EQ(j.state().trials.size(), 6u);
  const Dimension lr = parse_dimension("system.lr", "loguniform(0.001,1)");
  int drawn_by_tpe = 0;
  for (const auto& t : j.state().trials) {
    auto rng = trial_rng(0, uint64_t(t.id), 0);
    const bool random = t.value("system.lr") == lr.sample(rng);
    if (t.id < tpe_startup(6)) {
      EXPECT_TRUE(random) << trial_name(t.id);
    }
    drawn_by_tpe += !random;
  }
  EXPECT_GE(drawn_by_tpe, 3) << "of the 4 after the startup";
}

// ---- several workers on one journal ------------------------------------------

// Eight processes append 40 records each under the lock, each the next trial
// after what it re-read: any two that decided at once would write the same
// trial twice (the journal refuses it on reading). A lock whose holder is
// dead, or whose lease is over, is broken; a live one is waited for, then
// named.
TEST(SearchJournal, WritersRacingUnderTheLockNeverDecideAtOnce) {
  TempDir dir;
  const std::string path = dir / "journal";
  { Journal(path, true).append({"search", "method=asha"}); }
  EXPECT_TRUE(gantry::test::run_forked(
      8,
      [&](int k) {
        Journal j(path, true);
        for (int i = 0; i < 40; ++i) {
          const auto lock = j.lock(60);
          j.append({"new", std::to_string(j.state().trials.size()), "system.lr=" + std::to_string(k)});
        }
      },
      "writer"));
  const Journal j(path, false);
  ASSERT_EQ(j.state().trials.size(), 320u);
  std::map<std::string, int> by_writer;
  for (const auto& t : j.state().trials) ++by_writer[t.value("system.lr")];
  for (const auto& [k, n] : by_writer) EXPECT_EQ(n, 40) << "writer " << k;
  EXPECT_FALSE(std::filesystem::exists(path + ".lock"));

  // A holder on this host that is gone (pid 2^22 + 1 is above pid_max's default), and one elsewhere whose lease is
  // over.
  const auto now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  gantry::test::write_text(
      path + ".lock", this_worker().substr(0, this_worker().rfind(':')) + ":4194305 " + std::to_string(now) + "\n");
  EXPECT_EQ(JournalLock(path + ".lock", 60).broken(), 1);
  gantry::test::write_text(path + ".lock", "elsewhere:12 " + std::to_string(now - 120) + "\n");
  EXPECT_EQ(JournalLock(path + ".lock", 60).broken(), 1);
  gantry::test::write_text(path + ".lock", "elsewhere:12 " + std::to_string(now) + "\n");
  try {
    JournalLock held(path + ".lock", 60, 0.3);
    FAIL() << "took a lock another holds";
  } catch (const gantry::Error& e) {
    EXPECT_NE(std::string(e.what()).find("is held by elsewhere:12"), std::string::npos) << e.what();
  }
}

namespace {

// The records of the journal: how many times each (trial, target) was run.
std::map<std::pair<std::string, std::string>, int> runs_of(const std::string& journal) {
  std::map<std::pair<std::string, std::string>, int> out;
  for (const auto& r : gantry::wire::replay(journal).frames)
    if (r.rfind("run\t", 0) == 0) {
      const size_t a = r.find('\t', 4), b = r.find('\t', a + 1);
      ++out[{r.substr(4, a - 4), r.substr(a + 1, b - a - 1)}];
    }
  return out;
}

}  // namespace

// Three searches started at once on one directory (a SLURM array's workers
// on one node) share the trials: none runs twice to one target, the search
// ends with every trial decided, and its best equals a straight run.
TEST(SearchCli, ThreeWorkersRacingOnOneJournalShareTheTrials) {
  TempDir dir;
  const std::string cmd =
      kTinySearch + " --trials 6 --budget 40 --rung 10 --eta 2 --metric loss --parallel 1 trainer.threads=1";
  std::vector<pid_t> workers;
  for (int w = 0; w < 3; ++w)
    workers.push_back(gantry::test::spawn_gantry(cmd, dir.path(), dir / ("w" + std::to_string(w) + ".log")));
  std::string logs;
  for (size_t w = 0; w < workers.size(); ++w) {
    int status = 0;
    ::waitpid(workers[w], &status, 0);
    logs += gantry::test::read_text(dir / ("w" + std::to_string(w) + ".log"));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << logs;
  }
  const std::string journal = (dir.path() / "runs/tiny/search/journal").string();
  for (const auto& [run, n] : runs_of(journal)) EXPECT_EQ(n, 1) << "trial " << run.first << " to " << run.second;
  const Journal j(journal, false);
  ASSERT_EQ(j.state().trials.size(), 6u) << logs;
  std::set<std::string> who;
  for (const auto& t : j.state().trials) {
    EXPECT_TRUE(t.status == Status::kDone || t.status == Status::kPaused) << trial_name(t.id);
    who.insert(t.worker);
  }
  EXPECT_GE(who.size(), 2u) << "one worker ran everything: " << logs;
  const Trial* best = best_done(j.state());
  ASSERT_NE(best, nullptr) << logs;
  expect_same_as_straight(dir, *best, 40, 10);
}

// A worker on another node (another hostname: a UTS namespace) killed with
// -9: its trial checkpoints (SIGTERM with its parent), its lease runs out,
// and the worker that remains takes the trial and finishes it from its
// checkpoint, as an uninterrupted run.
TEST(SearchCli, AWorkerKilledOnAnotherNodeLosesItsLeaseAndAnotherFinishesItsTrial) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for a UTS namespace (CI runs as root)";
  TempDir dir;
  const std::string fixed = "trainer.log_every_n_steps=500 checkpoint.every_n_steps=250";
  const std::string cmd = kTinySearch +
                          " --trials 3 --budget 3000 --rung 1000 --eta 2 --metric loss --parallel 1 "
                          "trainer.threads=1 --lease 2 " +
                          fixed;
  gantry::test::write_text(dir / "node_b.sh", "hostname node-b\nexec '" + std::string(GANTRY_BIN) + "' " + cmd + "\n");
  const pid_t a = ::fork();
  if (a == 0) {
    const std::string sh = "cd '" + dir.path().string() + "' && exec unshare --uts /bin/sh node_b.sh >a.log 2>&1";
    ::execl("/bin/sh", "sh", "-c", sh.c_str(), nullptr);
    ::_exit(127);
  }
  const std::string journal = (dir.path() / "runs/tiny/search/journal").string();
  bool running = false;
  for (int i = 0; i < 3000 && !running; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!std::filesystem::exists(journal)) continue;
    const Journal j(journal, false);
    for (const auto& t : j.state().trials) running |= t.status == Status::kRunning && t.worker.rfind("node-b:", 0) == 0;
  }
  ASSERT_TRUE(running) << gantry::test::read_text(dir / "a.log");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // a checkpoint or two of its trial
  ::kill(a, SIGKILL);
  ::waitpid(a, nullptr, 0);
  const auto b = gantry::test::run_gantry(cmd, dir.path());
  ASSERT_EQ(b.exit_code, 0) << b.out << b.err;
  EXPECT_NE(b.out.find("is gone: no lease for 2 s): it goes on from its checkpoint"), std::string::npos) << b.out;
  const Journal j(journal, false);
  ASSERT_EQ(j.state().trials.size(), 3u);
  const Trial& taken = j.state().trials[0];
  EXPECT_EQ(taken.worker.rfind("node-b:", 0), std::string::npos) << "finished by the worker that remained";
  for (const auto& t : j.state().trials)
    EXPECT_TRUE(t.status == Status::kDone || t.status == Status::kPaused) << trial_name(t.id) << " " << t.note;
  expect_same_as_straight(dir, taken, taken.reached(), 500, fixed);
}

// Ctrl-C (SIGINT to the search): every running trial stops at its next step
// with a checkpoint, the journal says interrupted, the search exits 130; the
// rerun goes on from the checkpoints and ends as an uninterrupted run.
TEST(SearchCli, CtrlCStopsEveryTrialWithACheckpointAndTheRerunGoesOn) {
  TempDir dir;
  const std::string fixed = "trainer.log_every_n_steps=500 checkpoint.every_n_steps=250";
  const std::string cmd = kTinySearch +
                          " --trials 2 --budget 3000 --rung 1500 --eta 2 --metric loss --parallel 2 "
                          "trainer.threads=1 " +
                          fixed;
  const pid_t pid = gantry::test::spawn_gantry(cmd, dir.path(), dir / "first.log");
  const auto journal = dir.path() / "runs/tiny/search/journal";
  size_t running = 0;
  for (int i = 0; i < 3000 && running < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!std::filesystem::exists(journal)) continue;
    running = Journal(journal, false).state().count(Status::kRunning);
  }
  ASSERT_EQ(running, 2u) << gantry::test::read_text(dir / "first.log");
  ::kill(pid, SIGINT);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const std::string first = gantry::test::read_text(dir / "first.log");
  ASSERT_TRUE(WIFEXITED(status)) << first;
  EXPECT_EQ(WEXITSTATUS(status), 130) << first;
  EXPECT_NE(first.find("search: signal 2: stopping the running trials"), std::string::npos) << first;
  const Journal stopped(journal, false);
  for (const auto& t : stopped.state().trials)
    EXPECT_TRUE(t.status == Status::kInterrupted || t.status == Status::kPaused) << trial_name(t.id) << " " << t.note;
  const auto again = gantry::test::run_gantry(cmd, dir.path());
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  const Journal j = journal_of(dir);
  const Trial* best = best_done(j.state());
  ASSERT_NE(best, nullptr) << again.out;
  expect_same_as_straight(dir, *best, 3000, 500, fixed);
}
