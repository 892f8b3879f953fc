// The engine's rooms keep the direction core/CMakeLists.txt writes: every
// `#include "<room>/..."` in core/src/<dir>/ names a room below <dir>, and no
// two units (a header and its source) need each other. Read from the source
// tree, so a new include against the direction, or a new room nobody placed,
// fails here naming the file and line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "support.hpp"

namespace fs = std::filesystem;

namespace {

// core/src's rooms, lowest first; a room may include only rooms of a lower
// level (core/CMakeLists.txt's comment, in the same order).
const std::map<std::string, int> kLevels = {
    {"files", 0},      {"config", 1}, {"io", 2},    {"runtime", 3}, {"plugin", 4}, {"data", 4},   {"distributed", 4},
    {"checkpoint", 4}, {"optim", 5},  {"train", 6}, {"quality", 7}, {"serve", 7},  {"engine", 8},
};

struct Include {
  std::string file;  // relative to core/src
  int line;
  std::string target;  // "train/model.hpp"
};

std::vector<Include> includes_of_core() {
  const fs::path src = gantry::test::source_path("core/src");
  std::vector<Include> out;
  const std::regex quoted(R"(^\s*#\s*include\s*"([^"]+)\")");
  for (const auto& e : fs::recursive_directory_iterator(src)) {
    const std::string ext = e.path().extension().string();
    if (!e.is_regular_file() || (ext != ".cpp" && ext != ".hpp")) continue;
    std::ifstream in(e.path());
    std::string text;
    int n = 0;
    while (std::getline(in, text)) {
      ++n;
      std::smatch m;
      if (std::regex_search(text, m, quoted)) out.push_back({fs::relative(e.path(), src).string(), n, m[1]});
    }
  }
  return out;
}

std::string room_of(const std::string& path) { return path.substr(0, path.find('/')); }
std::string unit_of(const std::string& path) { return fs::path(path).replace_extension().string(); }

}  // namespace

TEST(Layout, EveryIncludeOfCoreSrcNamesALowerRoom) {
  const auto all = includes_of_core();
  ASSERT_GT(all.size(), 200u) << "core/src's includes were not found";
  for (const auto& e : fs::directory_iterator(gantry::test::source_path("core/src"))) {
    if (!e.is_directory()) continue;
    EXPECT_TRUE(kLevels.count(e.path().filename().string()))
        << "core/src/" << e.path().filename().string()
        << " is placed nowhere: give it a level here and in core/CMakeLists.txt's comment";
  }
  for (const Include& i : all) {
    const std::string from = room_of(i.file), to = room_of(i.target);
    if (from == to || !kLevels.count(to) || !kLevels.count(from)) continue;  // gantry/, wire/: below every room
    EXPECT_LT(kLevels.at(to), kLevels.at(from))
        << "core/src/" << i.file << ":" << i.line << " includes " << i.target << ": " << from << "/ is level "
        << kLevels.at(from) << ", " << to << "/ level " << kLevels.at(to)
        << " (core/CMakeLists.txt writes the direction)";
  }
}

TEST(Layout, NoTwoUnitsOfCoreSrcNeedEachOther) {
  // Units: a header and its source. An edge: a file of one includes another's header.
  const fs::path src = gantry::test::source_path("core/src");
  std::map<std::string, std::set<std::string>> needs;
  std::map<std::pair<std::string, std::string>, std::string> where;
  for (const Include& i : includes_of_core()) {
    const std::string u = unit_of(i.file), v = unit_of(i.target);
    if (u == v || !fs::exists(src / i.target)) continue;
    needs[u].insert(v);
    where.emplace(std::make_pair(u, v), i.file + ":" + std::to_string(i.line));
  }
  std::map<std::string, int> state;  // 1: on the path, 2: done
  std::vector<std::string> path;
  std::function<void(const std::string&)> visit = [&](const std::string& u) {
    state[u] = 1;
    path.push_back(u);
    for (const std::string& v : needs[u]) {
      if (state[v] == 1) {
        std::string loop;
        for (size_t k = std::find(path.begin(), path.end(), v) - path.begin(); k < path.size(); ++k)
          loop += path[k] + " (" + where[{path[k], k + 1 < path.size() ? path[k + 1] : v}] + ") -> ";
        ADD_FAILURE() << "a loop of units: " << loop << v;
      } else if (state[v] == 0) {
        visit(v);
      }
    }
    path.pop_back();
    state[u] = 2;
  };
  for (const auto& [u, _] : needs)
    if (state[u] == 0) visit(u);
}
