#include "search.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "wire/record_log.hpp"

namespace gantry::client {

namespace fs = std::filesystem;

SearchJournal::SearchJournal(std::string search_dir) : dir_(std::move(search_dir)) { refresh(); }

bool SearchJournal::refresh() {
  const std::string path = (fs::path(dir_) / "journal").string();
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  const int64_t mtime = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (uint64_t(st.st_size) == size_ && mtime == mtime_ns_) return false;
  size_ = uint64_t(st.st_size);
  mtime_ns_ = mtime;
  // Replayed whole (a journal is a few hundred bytes a trial): a torn last
  // record (an append in flight) is left out until it is complete.
  const wire::Replay r = wire::replay(path);
  search::SearchState s;
  error_.clear();
  for (size_t i = 0; i < r.frames.size(); ++i) {
    try {
      s.apply(r.frames[i]);
    } catch (const std::exception& e) {
      error_ = path + ": record " + std::to_string(i + 1) + " cannot be read (" + e.what() + ")";
      break;
    }
  }
  state_ = std::move(s);
  rungs_.clear();
  const auto it = state_.settings.find("rungs");
  if (it != state_.settings.end()) {
    size_t start = 0;
    const std::string& text = it->second;
    while (start < text.size()) {
      size_t comma = text.find(',', start);
      if (comma == std::string::npos) comma = text.size();
      try {
        rungs_.push_back(std::stoll(text.substr(start, comma - start)));
      } catch (const std::exception&) {
        error_ = path + ": rungs '" + text + "' cannot be read";
        rungs_.clear();
        break;
      }
      start = comma + 1;
    }
  }
  return true;
}

std::string SearchJournal::method() const {
  const auto it = state_.settings.find("method");
  return it == state_.settings.end() ? "" : it->second;
}

std::string SearchJournal::metric() const {
  const auto it = state_.settings.find("metric");
  return it == state_.settings.end() ? "" : it->second;
}

TrialRow trial_row(const SearchJournal& journal, int trial) {
  TrialRow row;
  const search::Trial* t = journal.state().find(trial);
  if (!t) {
    row.status = "unknown";  // the run is there, the journal does not (yet) name it
    row.rung = row.score = "-";
    return row;
  }
  row.status = search::shown_status(*t, journal.method() == "pbt");
  const std::vector<int64_t>& rungs = journal.rungs();
  const int64_t reached = t->reached();
  const auto passed = std::upper_bound(rungs.begin(), rungs.end(), reached) - rungs.begin();
  row.rung = passed == 0 ? "-" : std::to_string(passed) + " of " + std::to_string(rungs.size());
  if (t->scores.empty()) {
    row.score = "-";
  } else {
    char buf[32];
    const double v = t->scores.back().value;
    if (v != v)
      std::snprintf(buf, sizeof buf, "nan");
    else
      std::snprintf(buf, sizeof buf, "%.4g", v);
    row.score = buf;
  }
  row.note = t->note;
  for (const auto& l : t->lineage)
    row.note += (row.note.empty() ? "" : "; ") + std::string("copied ") + search::trial_name(l.from) + " at step " +
                std::to_string(l.step);
  return row;
}

std::optional<TrialOf> trial_of(const std::string& run_dir) {
  const fs::path run = fs::path(run_dir).lexically_normal();
  fs::path trial = run.parent_path();
  if (run.filename().empty()) trial = trial.parent_path();  // "dir/" normalises to "dir/"
  const std::string name = trial.filename().string();
  int id = -1;
  char tail = 0;
  if (name.size() != 10 || std::sscanf(name.c_str(), "trial_%4d%c", &id, &tail) != 1 || id < 0) return std::nullopt;
  const fs::path search = trial.parent_path();
  std::error_code ec;
  if (!fs::is_regular_file(search / "journal", ec)) return std::nullopt;
  return TrialOf{search.string(), id};
}

void SearchFollower::watch(const std::vector<std::string>& dirs, const std::vector<std::string>& names) {
  runs_.clear();
  journals_.clear();
  known_.clear();
  last_poll_ = -1e300;
  for (size_t i = 0; i < dirs.size(); ++i) {
    Watched w;
    w.name = i < names.size() ? names[i] : "";
    if (const auto t = dirs[i].empty() ? std::nullopt : trial_of(dirs[i])) {
      const std::string canonical = fs::weakly_canonical(t->search_dir).string();
      int j = 0;
      while (j < int(journals_.size()) && journals_[size_t(j)].dir() != canonical) ++j;
      if (j == int(journals_.size())) {
        journals_.emplace_back(canonical);
        known_.emplace_back();
      }
      w.journal = j;
      w.trial = t->trial;
      known_[size_t(j)].insert(t->trial);
    }
    runs_.push_back(std::move(w));
  }
}

std::vector<RunDir> SearchFollower::poll(double now_s, double every_s) {
  std::vector<RunDir> added;
  if (journals_.empty() || now_s - last_poll_ < every_s) return added;
  last_poll_ = now_s;
  for (size_t j = 0; j < journals_.size(); ++j) {
    SearchJournal& journal = journals_[j];
    journal.refresh();  // and, changed or not, look for the run directories of trials started before
    // A sibling's name shows how this window names the search's trials
    // ("trial_0003", "search/trial_0003", "quality/search/trial_0003").
    std::string pattern;
    for (const auto& w : runs_)
      if (w.journal == int(j)) {
        pattern = w.name;
        break;
      }
    for (const search::Trial& t : journal.state().trials) {
      if (t.status == search::Status::kNew || known_[j].count(t.id)) continue;
      const fs::path trial_dir = fs::path(journal.dir()) / search::trial_name(t.id);
      std::error_code ec;
      std::vector<fs::path> found;  // its run: the directory with the stream (one a trial; the newest if more)
      for (const auto& e : fs::directory_iterator(trial_dir, ec))
        if (e.is_directory(ec) && !e.is_symlink(ec) && fs::exists(e.path() / "stream.gantrylog", ec))
          found.push_back(e.path());
      if (found.empty()) continue;  // started, its run directory not made yet: the next poll
      std::sort(found.begin(), found.end());
      std::string name = search::trial_name(t.id);
      const size_t at = pattern.rfind("trial_");
      if (at != std::string::npos && pattern.size() >= at + 10)
        name = pattern.substr(0, at) + name + pattern.substr(at + 10);
      known_[j].insert(t.id);
      runs_.push_back({int(j), t.id, name});
      added.push_back({name, found.back().string()});
    }
  }
  return added;
}

std::optional<TrialRow> SearchFollower::row(size_t run) const {
  if (run >= runs_.size() || runs_[run].journal < 0) return std::nullopt;
  return trial_row(journals_[size_t(runs_[run].journal)], runs_[run].trial);
}

std::string SearchFollower::metric() const { return journals_.empty() ? "" : journals_.front().metric(); }

}  // namespace gantry::client
