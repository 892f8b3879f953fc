#include "search/state.hpp"

#include <cmath>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace gantry::search {

std::string trial_name(int t) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "trial_%04d", t);
  return buf;
}

std::string shown_status(const Trial& t, bool pbt) {
  if (t.status == Status::kRunning) return t.promoted && !pbt ? "promoted" : "running";
  return status_name(t.status);
}

namespace {

std::vector<std::string> fields_of(const std::string& r) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t tab; (tab = r.find('\t', start)) != std::string::npos; start = tab + 1)
    out.push_back(r.substr(start, tab - start));
  out.push_back(r.substr(start));
  return out;
}

int64_t to_int(const std::string& s) {
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end) throw std::runtime_error("'" + s + "' is not an integer");
  return v;
}

uint64_t to_uint(const std::string& s) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (s.empty() || *end || s[0] == '-') throw std::runtime_error("'" + s + "' is not an unsigned integer");
  return v;
}

double to_double(const std::string& s) {
  if (s == "nan") return std::nan("");
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end) throw std::runtime_error("'" + s + "' is not a number");
  return v;
}

}  // namespace

const char* status_name(Status s) {
  switch (s) {
    case Status::kNew:
      return "new";
    case Status::kRunning:
      return "running";
    case Status::kPaused:
      return "paused";
    case Status::kDone:
      return "done";
    case Status::kStopped:
      return "stopped";
    case Status::kFailed:
      return "failed";
    case Status::kInterrupted:
      return "interrupted";
  }
  return "?";
}

std::string record(const std::vector<std::string>& fields) {
  std::string out;
  for (size_t i = 0; i < fields.size(); ++i) {
    std::string f = fields[i];
    for (char& c : f)
      if (c == '\t' || c == '\n' || c == '\r') c = ' ';
    out += (i ? "\t" : "") + f;
  }
  return out;
}

std::string Trial::value(const std::string& key) const {
  for (const auto& o : overrides)
    if (o.size() > key.size() && o.compare(0, key.size(), key) == 0 && o[key.size()] == '=')
      return o.substr(key.size() + 1);
  return "";
}

const Score* Trial::score_at(int64_t step) const {
  for (const auto& s : scores)
    if (s.step == step) return &s;
  return nullptr;
}

Trial& SearchState::trial(int id) {
  if (id < 0 || size_t(id) >= trials.size()) throw std::runtime_error("trial " + std::to_string(id) + " is not known");
  return trials[size_t(id)];
}

const Trial* SearchState::find(int id) const {
  return id >= 0 && size_t(id) < trials.size() ? &trials[size_t(id)] : nullptr;
}

std::vector<int> ranked_at(const SearchState& s, int64_t step, bool maximize, bool (*keep)(const Trial&)) {
  std::vector<std::pair<int, Score>> at;
  for (const auto& t : s.trials)
    if (!keep || keep(t))
      if (const Score* sc = t.score_at(step)) at.push_back({t.id, *sc});
  std::stable_sort(at.begin(), at.end(), [&](const auto& a, const auto& b) {
    if (better(a.second.value, b.second.value, maximize)) return true;
    if (better(b.second.value, a.second.value, maximize)) return false;
    return a.second.order < b.second.order;
  });
  std::vector<int> out;
  for (const auto& e : at) out.push_back(e.first);
  return out;
}

size_t SearchState::count(Status s) const {
  size_t n = 0;
  for (const auto& t : trials) n += t.status == s;
  return n;
}

void SearchState::apply(const std::string& r) {
  const std::vector<std::string> f = fields_of(r);
  const std::string& kind = f[0];
  auto need = [&](size_t n) {
    if (f.size() < n) throw std::runtime_error("record '" + kind + "' has " + std::to_string(f.size()) + " fields");
  };
  ++records;
  if (kind == "search") {
    for (size_t i = 1; i < f.size(); ++i) {
      const size_t eq = f[i].find('=');
      if (eq == std::string::npos) throw std::runtime_error("setting '" + f[i] + "' is not key=value");
      settings[f[i].substr(0, eq)] = f[i].substr(eq + 1);
    }
    return;
  }
  need(2);
  if (kind == "decided") {
    const int64_t step = to_int(f[1]);
    if (step <= decided)
      throw std::runtime_error("step " + std::to_string(step) + " decided after step " + std::to_string(decided));
    decided = step;
    return;
  }
  const int id = int(to_int(f[1]));
  if (kind == "new") {
    if (size_t(id) != trials.size())
      throw std::runtime_error("trial " + std::to_string(id) + " follows trial " + std::to_string(trials.size() - 1));
    Trial t;
    t.id = id;
    t.overrides.assign(f.begin() + 2, f.end());
    trials.push_back(std::move(t));
    return;
  }
  Trial& t = trial(id);
  if (kind == "run") {
    need(3);
    t.target = to_int(f[2]);
    t.pid = f.size() > 3 ? long(to_int(f[3])) : 0;
    t.worker = f.size() > 4 ? f[4] : "";
    t.status = Status::kRunning;
    if (!t.scores.empty()) t.promoted = true;
    t.note.clear();
  } else if (kind == "score") {
    need(4);
    Score s{to_int(f[2]), to_double(f[3]), records};
    if (!t.scores.empty() && s.step <= t.scores.back().step)
      throw std::runtime_error("trial " + std::to_string(id) + " scored at step " + std::to_string(s.step) +
                               " after step " + std::to_string(t.scores.back().step));
    t.scores.push_back(s);
  } else if (kind == "end") {
    need(3);
    const std::string& st = f[2];
    t.status = st == "paused"        ? Status::kPaused
               : st == "done"        ? Status::kDone
               : st == "stopped"     ? Status::kStopped
               : st == "failed"      ? Status::kFailed
               : st == "interrupted" ? Status::kInterrupted
                                     : throw std::runtime_error("status '" + st + "' is not known");
    t.note = f.size() > 3 ? f[3] : "";
  } else if (kind == "exploit") {
    need(5);
    const int from = int(to_int(f[2]));
    const int64_t step = to_int(f[3]);
    (void)trial(from);
    t.lineage.push_back({from, step, to_uint(f[4]), t.overrides});
    t.overrides.assign(f.begin() + 5, f.end());
  } else {
    throw std::runtime_error("record kind '" + kind + "' is not known");
  }
}

}  // namespace gantry::search
