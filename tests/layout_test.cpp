// The engine's rooms keep the direction core/CMakeLists.txt writes: every
// `#include "<room>/..."` in core/src/<dir>/ names a room below <dir>, and no
// two units (a header and its source) need each other. Read from the source
// tree, so a new include against the direction, or a new room nobody placed,
// fails here naming the file and line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
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

namespace {

// A source file with its comments, preprocessor lines, string and character
// literals (raw ones too) blanked, line breaks kept: what is left of braces is the code's.
std::string code_only(const std::string& s) {
  std::string out = s;
  size_t i = 0;
  auto blank = [&](size_t from, size_t to) {
    for (size_t k = from; k < to && k < out.size(); ++k)
      if (out[k] != '\n') out[k] = ' ';
  };
  bool line_start = true;  // only blanks since the line's start
  while (i < s.size()) {
    const bool at_start = line_start;
    line_start = s[i] == '\n' || (line_start && (s[i] == ' ' || s[i] == '\t'));
    if (at_start && s[i] == '#') {  // a preprocessor line, with its continuations
      size_t end = i;
      while ((end = s.find('\n', end)) != std::string::npos && end > 0 && s[end - 1] == '\\') ++end;
      if (end == std::string::npos) end = s.size();
      blank(i, end);
      i = end;
    } else if (s.compare(i, 2, "//") == 0) {
      const size_t end = s.find('\n', i);
      blank(i, end == std::string::npos ? s.size() : end);
      i = end == std::string::npos ? s.size() : end;
    } else if (s.compare(i, 2, "/*") == 0) {
      const size_t end = std::min(s.size(), s.find("*/", i + 2) + 2);
      blank(i, end);
      i = end;
    } else if (s[i] == 'R' && i + 1 < s.size() && s[i + 1] == '"' && (i == 0 || !std::isalnum(s[i - 1]))) {
      const size_t open = s.find('(', i);
      const std::string close = ")" + s.substr(i + 2, open - i - 2) + "\"";
      const size_t end = std::min(s.size(), s.find(close, open) + close.size());
      blank(i, end);
      i = end;
    } else if (s[i] == '"' || (s[i] == '\'' && (i == 0 || !std::isxdigit(s[i - 1])))) {  // 1'000 is a number
      const char q = s[i];
      size_t k = i + 1;
      while (k < s.size() && s[k] != q && s[k] != '\n') k += s[k] == '\\' ? 2 : 1;
      blank(i, k + 1);
      i = k + 1;
    } else {
      ++i;
    }
  }
  return out;
}

struct Function {
  std::string where;  // file:line
  int lines;
};

// Every function body of a file at namespace or class level (a lambda's or a
// block's braces count within their function): from the line its
// declaration starts on to its closing brace.
std::vector<Function> functions_of(const fs::path& file, const std::string& name) {
  std::ifstream in(file);
  const std::string code = code_only(std::string(std::istreambuf_iterator<char>(in), {}));
  struct Open {
    bool function;
    int first_line;
  };
  std::vector<Open> open;
  std::vector<Function> out;
  std::string head;  // the text since the last ';', '{' or '}' at this level
  int line = 1, head_line = 1;
  const std::regex not_function(
      R"(^\s*(namespace|class|struct|union|enum|extern)\b|\b(if|for|while|switch|catch|do|else|try)\s*(\(|$)|=\s*$|\]\s*\()");
  for (const char c : code) {
    if (c == '\n') ++line;
    if (c == '{') {
      const bool in_function = std::any_of(open.begin(), open.end(), [](const Open& o) { return o.function; });
      const bool function =
          !in_function && head.find(')') != std::string::npos && !std::regex_search(head, not_function);
      open.push_back({function, head_line});
    } else if (c == '}') {
      if (!open.empty()) {
        if (open.back().function)
          out.push_back({name + ":" + std::to_string(open.back().first_line), line - open.back().first_line + 1});
        open.pop_back();
      }
    }
    if (c == ';' || c == '{' || c == '}') {
      head.clear();
      continue;
    }
    if (head.find_first_not_of(" \t\n") == std::string::npos && !std::isspace(static_cast<unsigned char>(c)))
      head_line = line;
    head += c;
  }
  return out;
}

}  // namespace

// The house's size limits (issue 43): no file of core/src over 30 KB, no
// function of core/src, runner/, gui/ or plugins/ over 120 lines, so that a
// newcomer reads a room in one sitting. A heuristic reader (comments,
// preprocessor lines and literals blanked, braces counted), cross-checked
// against lizard's lengths: the same longest functions, within a line.
TEST(Layout, NoCoreSrcFileOver30KBAndNoFunctionOver120Lines) {
  size_t functions = 0;
  int longest = 0;
  std::string longest_at;
  for (const std::string dir : {"core/src", "runner", "gui", "plugins"}) {
    const fs::path root = gantry::test::source_path(dir);
    for (const auto& e : fs::recursive_directory_iterator(root)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".cpp" && ext != ".hpp")) continue;
      const std::string name = dir + "/" + fs::relative(e.path(), root).string();
      if (dir == "core/src") {
        EXPECT_LE(fs::file_size(e.path()), 30000u) << name << " is over 30 KB: split it by concern";
      }
      for (const Function& f : functions_of(e.path(), name)) {
        ++functions;
        EXPECT_LE(f.lines, 120) << f.where << ": a function of " << f.lines << " lines: cut it into named parts";
        if (f.lines > longest) longest = f.lines, longest_at = f.where;
      }
    }
  }
  EXPECT_GT(functions, 1000u) << "the reader found too few functions to be reading right";
  EXPECT_GT(longest, 60) << "the longest function found, " << longest_at << ", is too short to be right";
  std::printf("%zu functions, the longest %d lines at %s\n", functions, longest, longest_at.c_str());
}
