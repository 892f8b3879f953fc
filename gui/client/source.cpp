#include "source.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <map>
#include <sstream>
#include <stdexcept>

#include "stream_client.hpp"

namespace gantry::client {

namespace fs = std::filesystem;

const char* to_string(SourceStatus::State s) {
  switch (s) {
    case SourceStatus::State::kConnecting:
      return "connecting";
    case SourceStatus::State::kConnected:
      return "connected";
    case SourceStatus::State::kReconnecting:
      return "reconnecting";
    case SourceStatus::State::kFollowing:
      return "following";
    case SourceStatus::State::kEnded:
      return "ended";
    case SourceStatus::State::kRefused:
      return "refused";
  }
  return "?";
}

void Source::drain(std::vector<wire::Message>& out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (out.empty()) {
    out.swap(inbox_);
  } else {
    for (auto& m : inbox_) out.push_back(std::move(m));
    inbox_.clear();
  }
}

SourceStatus Source::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

void Source::deliver(wire::Message m) {
  std::lock_guard<std::mutex> lock(mu_);
  inbox_.push_back(std::move(m));
  ++status_.received;
}

void Source::set_status(SourceStatus::State state, std::string text) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state != status_.state || status_.since == 0)
    status_.since = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  status_.state = state;
  status_.text = std::move(text);
}

void Source::count_attempt() {
  std::lock_guard<std::mutex> lock(mu_);
  ++status_.attempts;
}

std::string Target::describe() const { return is_dir ? dir : host + ":" + std::to_string(port); }

namespace {

// The run directory a path names: the directory itself when it holds the
// stream, or the run its `latest` link points at (an experiment directory).
std::string run_dir_of(const fs::path& p) {
  if (fs::exists(p / "stream.gantrylog")) return p.string();
  if (fs::exists(p / "latest" / "stream.gantrylog")) return (p / "latest").string();
  throw std::invalid_argument(p.string() + " is not a gantry run directory (it has no stream.gantrylog)");
}

}  // namespace

Target parse_target(const std::string& text, const std::string& token) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  Target t;
  t.token = token;
  std::string where;
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (i == 0 && w == "monitor:") continue;  // the runner's printed line, pasted whole
    if (w == "gantry-monitor" || w == "gantry-view") continue;
    if (w == "--token") {
      if (i + 1 == words.size()) throw std::invalid_argument("--token needs a value");
      t.token = words[++i];
    } else if (w.rfind("--token=", 0) == 0) {
      t.token = w.substr(8);
    } else if (where.empty()) {
      where = w;
    } else {
      throw std::invalid_argument("unexpected '" + w + "' after '" + where + "'");
    }
  }
  if (where.empty()) throw std::invalid_argument("nothing to open: give HOST:PORT or a run directory");
  if (std::error_code ec; fs::is_directory(where, ec)) {
    t.is_dir = true;
    t.dir = run_dir_of(where);
    return t;
  }
  std::string hp = where;
  if (hp.rfind("ws://", 0) == 0) hp = hp.substr(5);
  while (!hp.empty() && hp.back() == '/') hp.pop_back();
  const size_t colon = hp.rfind(':');
  if (colon == std::string::npos || colon == 0)
    throw std::invalid_argument("'" + where + "' is neither a run directory nor HOST:PORT");
  t.host = hp.substr(0, colon);
  if (t.host.size() > 2 && t.host.front() == '[' && t.host.back() == ']') t.host = t.host.substr(1, t.host.size() - 2);
  const std::string port = hp.substr(colon + 1);
  unsigned long p = 0;
  bool digits = !port.empty() && port.size() <= 5;
  for (char c : port) digits = digits && std::isdigit(static_cast<unsigned char>(c));
  if (digits) p = std::stoul(port);
  if (!digits || p == 0 || p > 65535)
    throw std::invalid_argument("'" + port + "' in '" + where + "' is not a port (1-65535)");
  t.port = static_cast<uint16_t>(p);
  return t;
}

namespace {

void collect_runs(const fs::path& dir, int depth, std::vector<fs::path>& out) {
  std::error_code ec;
  if (fs::exists(dir / "stream.gantrylog", ec)) {
    out.push_back(dir);
    return;
  }
  if (depth == 0) return;
  std::vector<fs::path> subs;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory(ec) && !e.is_symlink(ec) && e.path().filename() != "latest") subs.push_back(e.path());
  std::sort(subs.begin(), subs.end());
  for (const auto& sub : subs) collect_runs(sub, depth - 1, out);
}

}  // namespace

std::vector<RunDir> find_runs(const std::vector<std::string>& paths) {
  std::vector<RunDir> all;
  for (const auto& path : paths) {
    std::error_code ec;
    if (!fs::is_directory(path, ec)) throw std::invalid_argument("'" + path + "' is not a directory");
    const fs::path root = fs::path(path).lexically_normal();
    std::vector<fs::path> found;
    collect_runs(root, 4, found);  // runs/<experiment>/search/trial_NNNN/<run>
    if (found.empty())
      throw std::invalid_argument("'" + path + "' holds no gantry run (no stream.gantrylog in 4 levels)");
    std::map<fs::path, int> per_parent;
    for (const auto& f : found) ++per_parent[f.parent_path()];
    std::string prefix = paths.size() > 1 ? root.filename().string() : "";
    if (prefix == "latest" || prefix.empty()) prefix = paths.size() > 1 ? root.parent_path().filename().string() : "";
    for (const auto& f : found) {
      // A point or experiment with one run is named by it, not by the run's timestamp.
      const fs::path named =
          f != root && per_parent[f.parent_path()] == 1 && f.parent_path() != root ? f.parent_path() : f;
      std::string name = named == root ? "" : named.lexically_relative(root).string();
      if (name.rfind("sweep/", 0) == 0) name = name.substr(6);
      if (name.rfind("search/", 0) == 0) name = name.substr(7);  // a search's trial_NNNN
      if (!prefix.empty()) name = name.empty() || found.size() == 1 ? prefix : prefix + "/" + name;
      if (name.empty()) name = root.filename().string();
      all.push_back({name, f.string()});
    }
  }
  return all;
}

std::vector<NamedTarget> parse_targets(const std::vector<std::string>& words, const std::string& token) {
  // Split into targets: a word starts one unless it belongs to the previous
  // (--token and its value, the runner's "monitor:" and program name).
  std::vector<std::vector<std::string>> groups;
  bool lead_in = false;  // "monitor:" / "gantry-monitor" seen: the next word joins them
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    const bool joins = !groups.empty() && (lead_in || w == "--token" || w.rfind("--token=", 0) == 0);
    if (!joins) groups.emplace_back();
    groups.back().push_back(w);
    if (w == "--token" && i + 1 < words.size()) groups.back().push_back(words[++i]);
    lead_in = w == "monitor:" || w == "gantry-monitor" || w == "gantry-view";
  }
  std::vector<NamedTarget> out;
  std::vector<std::string> dirs;
  for (const auto& g : groups) {
    std::error_code ec;
    if (g.size() == 1 && fs::is_directory(g[0], ec)) {
      dirs.push_back(g[0]);
      continue;
    }
    std::string text;
    for (const auto& w : g) text += (text.empty() ? "" : " ") + w;
    Target t = parse_target(text, token);
    out.push_back({t.describe(), t});
  }
  if (!dirs.empty()) {
    std::vector<NamedTarget> found;
    for (const auto& r : find_runs(dirs)) {
      Target t;
      t.is_dir = true;
      t.dir = r.dir;
      found.push_back({r.name, t});
    }
    out.insert(out.begin(), found.begin(), found.end());
  }
  if (out.empty()) throw std::invalid_argument("nothing to open: give HOST:PORT or a run directory");
  return out;
}

std::unique_ptr<Source> open_source(const Target& target, uint64_t last_seq) {
  if (target.is_dir) return std::make_unique<LogSource>(target.dir, last_seq);
  return std::make_unique<StreamClient>(target.host, target.port, target.token, last_seq);
}

}  // namespace gantry::client
