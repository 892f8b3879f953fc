#include "checkpoint/resolve.hpp"

#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <tuple>

#include "checkpoint/names.hpp"
#include "gantry/errors.hpp"

namespace fs = std::filesystem;

namespace gantry {

namespace {

std::string canonical_or(const fs::path& p) {
  std::error_code ec;
  const fs::path c = fs::canonical(p, ec);
  return ec ? p.string() : c.string();
}

// The run directories under `dir`: itself when it is one (a `latest` link
// included), else each run of an experiment (its `latest` link skipped: the
// run it names is there itself).
std::vector<fs::path> runs_of(const fs::path& dir) {
  std::error_code ec;
  if (fs::is_directory(dir / ckpt::kFolder, ec)) return {dir};
  std::vector<fs::path> runs;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (!e.is_symlink(ec) && e.is_directory(ec) && fs::is_directory(e.path() / ckpt::kFolder, ec))
      runs.push_back(e.path());
  return runs;
}

struct Candidate {
  std::string path;  // canonical
  std::string link;  // the run's best.ckpt that names it ("" for the others)
  bool best() const { return !link.empty(); }
};

// A directory's checkpoints in the order resolve_checkpoint tries them.
std::vector<Candidate> in_directory(const fs::path& dir, CheckpointUse use) {
  std::vector<ckpt::Found> all;
  for (const fs::path& run : runs_of(dir))
    for (ckpt::Found& f : ckpt::list_files((run / ckpt::kFolder).string())) all.push_back(std::move(f));
  // Newest step first; of one step, the run that wrote it last; of one run's
  // step_ and best_step_ of a step (the same state), step_ first, whichever
  // was written last (the run's own chain, as a resume names it).
  std::map<std::pair<std::string, int64_t>, int64_t> written;  // (run, step) -> its newest file's mtime
  for (const ckpt::Found& f : all) {
    int64_t& t = written[{fs::path(f.path).parent_path().string(), f.name.step}];
    t = std::max(t, f.mtime_ns);
  }
  auto key = [&](const ckpt::Found& f) {
    const std::string run = fs::path(f.path).parent_path().string();
    return std::make_tuple(f.name.step, written.at({run, f.name.step}), run, f.name.kind == ckpt::FileKind::kStep);
  };
  std::stable_sort(all.begin(), all.end(), [&](const ckpt::Found& a, const ckpt::Found& b) { return key(a) > key(b); });
  std::vector<Candidate> out;
  std::error_code ec;
  if (use == CheckpointUse::kInference && !all.empty()) {
    // The best of the run that holds the newest checkpoint.
    const fs::path best = fs::path(all.front().path).parent_path() / ckpt::kBestLink;
    if (fs::exists(best, ec)) out.push_back({canonical_or(best), best.string()});
  }
  for (const ckpt::Found& f : all) out.push_back({canonical_or(f.path), ""});
  return out;
}

// `given` names a file of a directory's checkpoints/ without being one:
// DIR/best, DIR/last, DIR/step_0001000. Sets `dir` and `use`; false otherwise.
bool short_name(const fs::path& given, fs::path& dir, CheckpointUse& use, std::string& file) {
  std::error_code ec;
  const std::string name = given.filename().string();
  dir = given.parent_path().empty() ? fs::path(".") : given.parent_path();
  if (!fs::is_directory(dir, ec)) return false;
  if (name == "best") {
    use = CheckpointUse::kInference;
    return true;
  }
  if (name == "last") {
    use = CheckpointUse::kResume;
    return true;
  }
  if (ckpt::parse_file(name + ".ckpt").kind != ckpt::FileKind::kOther) {
    file = name + ".ckpt";
    return true;
  }
  return false;
}

std::string monitor_of(const CheckpointMeta& meta) {
  try {
    const YAML::Node c = YAML::Load(meta.config_yaml)["checkpoint"];
    if (c && c["monitor"] && c["monitor"].IsScalar())
      return c["monitor"].Scalar() + (c["mode"] ? " " + c["mode"].Scalar() : "");
  } catch (const YAML::Exception&) {
  }
  return "";
}

// best.ckpt's line: the link, its file, the monitored metric's value and step.
std::string why_best(const std::string& link, const CheckpointFile& f) {
  const TrainState s = f.train_state();
  std::string value;
  const auto steps = s.extra.find(ckpt::kBestStepsKey), values = s.extra.find(ckpt::kBestValuesKey);
  if (steps != s.extra.end() && values != s.extra.end()) {
    const torch::Tensor st = steps->second.to(torch::kInt64), v = values->second.to(torch::kFloat64);
    for (int64_t i = 0; i < st.numel() && i < v.numel(); ++i)
      if (st[i].item<int64_t>() == s.global_step) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.6g", v[i].item<double>());
        value = buf;
      }
  }
  std::string monitor = monitor_of(f.meta());
  const std::string metric = monitor.substr(0, monitor.find(' '));
  return link + " -> " + fs::path(f.path()).filename().string() + ": " +
         (value.empty() ? "the best" : metric + " " + value) + " at step " + std::to_string(s.global_step) +
         " (checkpoint.monitor " + monitor + ")";
}

}  // namespace

std::vector<std::string> checkpoint_candidates(const std::string& given, CheckpointUse use) {
  std::vector<std::string> out;
  std::error_code ec;
  const fs::path p(given);
  if (fs::is_directory(p, ec)) {
    for (const Candidate& c : in_directory(p, use)) out.push_back(c.path);
  } else if (fs::exists(p, ec)) {
    out.push_back(canonical_or(p));
  } else {
    fs::path dir;
    std::string file;
    if (short_name(p, dir, use, file)) {
      if (!file.empty()) return {canonical_or(dir / ckpt::kFolder / file)};
      for (const Candidate& c : in_directory(dir, use))
        if (c.best() || p.filename() != "best") out.push_back(c.path);
    }
  }
  return out;
}

ResolvedCheckpoint resolve_checkpoint(const std::string& given, CheckpointUse use, std::vector<std::string>* skipped) {
  std::error_code ec;
  const fs::path p(given);
  ResolvedCheckpoint r;
  fs::path dir;
  std::string file;
  const bool is_dir = fs::is_directory(p, ec);
  if (!is_dir && fs::exists(p, ec)) {  // a file: it is the one, or an error
    r.path = canonical_or(p);
    r.file = CheckpointFile::read(r.path);
    r.why = r.path + " (step " + std::to_string(r.file->meta().global_step) + ")";
    return r;
  }
  if (!is_dir) {
    if (!short_name(p, dir, use, file))
      throw CheckpointError(given + ": no such checkpoint, run or experiment directory");
    if (!file.empty()) {
      const fs::path f = dir / ckpt::kFolder / file;
      if (!fs::exists(f, ec)) throw CheckpointError(given + ": no " + f.string());
      return resolve_checkpoint(f.string(), use, skipped);
    }
  } else {
    dir = p;
  }
  const bool only_best = !is_dir && p.filename() == "best";
  bool best_skipped = false;
  for (const Candidate& c : in_directory(dir, use)) {
    if (only_best && !c.best()) continue;
    try {
      r.file = CheckpointFile::read(c.path);
    } catch (const CheckpointError& e) {
      if (skipped) skipped->push_back(std::string("skipping ") + e.what());
      best_skipped |= c.best();
      continue;
    }
    r.path = c.path;
    const std::string step = std::to_string(r.file->meta().global_step);
    if (c.best())
      r.why = why_best(c.link, *r.file);
    else
      r.why = r.path + ": the newest valid checkpoint in " + dir.string() + " (step " + step +
              (use != CheckpointUse::kInference ? ")"
               : best_skipped                   ? "; its best.ckpt does not read)"
                                                : "; the run kept no best.ckpt: checkpoint.monitor was not set)");
    return r;
  }
  if (only_best)
    throw CheckpointError(given + ": " + dir.string() +
                          " has no valid best.ckpt (the run kept none: checkpoint.monitor was not set); name a "
                          "checkpoint, or the directory for its newest");
  return r;
}

ResolvedCheckpoint require_checkpoint(const std::string& given, CheckpointUse use) {
  std::vector<std::string> skipped;
  ResolvedCheckpoint r = resolve_checkpoint(given, use, &skipped);
  if (r.found()) return r;
  throw CheckpointError(given + ": no valid checkpoint in it" +
                        (skipped.empty() ? std::string(" (a checkpoint, a run or an experiment directory)")
                                         : " (" + std::to_string(skipped.size()) + " unreadable: " + skipped.front() +
                                               (skipped.size() > 1 ? ", ..." : "") + ")"));
}

}  // namespace gantry
