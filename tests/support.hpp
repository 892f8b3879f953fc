// Helpers shared by the tests: temp dirs, files, running the CLI, paths the
// build passes in (GANTRY_BIN, GANTRY_TEST_PLUGIN_DIR, GANTRY_SOURCE_DIR).
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "gantry/errors.hpp"
#include "run_forked.hpp"

/// First line of a *_CUDA test: skipped where no CUDA device is present.
#define GANTRY_REQUIRE_CUDA()                                                \
  do {                                                                       \
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device here"; \
  } while (0)

namespace gantry::test {

namespace fs = std::filesystem;

/// A fresh directory under the system temp dir, removed when it goes out of scope.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "gantry-test-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::string plugin_path(const std::string& name) {
  return std::string(GANTRY_TEST_PLUGIN_DIR) + "/lib" + name + ".so";
}

inline std::string gan_plugin_path() { return std::string(GANTRY_PLUGIN_DIR) + "/libgan.so"; }

inline std::string source_path(const std::string& rel) { return std::string(GANTRY_SOURCE_DIR) + "/" + rel; }

/// The demo experiment (configs/gan_fashion_mnist.yaml).
inline const std::string kDemo = source_path("configs/gan_fashion_mnist.yaml");

/// The SDK test plugin's experiment (tests/sdk_plugin/tiny.yaml) with the
/// built plugin, for a command line between single quotes: "train '" + kTiny + "' ...".
inline const std::string kTiny = source_path("tests/sdk_plugin/tiny.yaml") + "' system.plugin='" + plugin_path("tiny");

/// The real Fashion-MNIST from Debian's dataset-fashion-mnist.
inline std::string fashion_mnist_dir() { return "/usr/share/datasets/fashion-mnist"; }

struct CommandResult {
  int exit_code = -1;
  std::string out;  ///< stdout
  std::string err;  ///< stderr
};

/// Runs a shell command line; its exit code, stdout and stderr.
inline CommandResult run_command(const std::string& command) {
  TempDir io;
  const std::string cmd = "(" + command + ") >'" + (io / "out") + "' 2>'" + (io / "err") + "' </dev/null";
  const int status = std::system(cmd.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_text(io / "out");
  r.err = read_text(io / "err");
  return r;
}

/// Runs the gantry CLI with `args` (shell-quoted by the caller) in `cwd`.
/// `env`: assignments put before the command ("LD_PRELOAD=...").
inline CommandResult run_gantry(const std::string& args, const std::string& cwd = ".", const std::string& env = "") {
  return run_command("cd '" + cwd + "' && " + env + " '" + std::string(GANTRY_BIN) + "' " + args);
}

/// The message of the gantry::ConfigError `f` throws ("" when it throws none).
template <class F>
std::string config_error(F&& f) {
  try {
    f();
  } catch (const gantry::ConfigError& e) {
    return e.what();
  }
  return "";
}

/// The "state_dict" of a gantry checkpoint file, as torch.load would see it.
inline c10::impl::GenericDict state_dict_of(const std::string& ckpt) {
  const auto bytes = read_text(ckpt);
  return torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end()))
      .toGenericDict()
      .at("state_dict")
      .toGenericDict();
}

/// Two checkpoints hold the same parameters and buffers, bit for bit.
inline void expect_same_weights(const std::string& a, const std::string& b) {
  const auto sa = state_dict_of(a);
  const auto sb = state_dict_of(b);
  ASSERT_EQ(sa.size(), sb.size()) << a << " vs " << b;
  for (const auto& e : sa)
    EXPECT_TRUE(torch::equal(e.value().toTensor(), sb.at(e.key()).toTensor())) << e.key().toStringRef();
}

/// Direct children of `parent` (from /proc), with their rank or -1: the
/// environment's RANK, or a rank forked by `gantry launch` without exec (its
/// environ is the launcher's) by its name, "gantry rank N".
inline std::vector<std::pair<pid_t, int>> children_of(pid_t parent) {
  std::vector<std::pair<pid_t, int>> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string stat = read_text((e.path() / "stat").string());
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    int ppid = 0;
    char state = 0;
    if (std::sscanf(stat.c_str() + close + 2, "%c %d", &state, &ppid) != 2 || ppid != parent) continue;
    std::string env = read_text((e.path() / "environ").string());
    for (auto& c : env) c = c == '\0' ? '\n' : c;
    int rank = -1;
    const auto at = ("\n" + env).find("\nRANK=");
    if (at != std::string::npos) rank = std::atoi(env.c_str() + at + 5);
    int named = -1;
    const std::string comm = read_text((e.path() / "comm").string());
    if (std::sscanf(comm.c_str(), "gantry rank %d", &named) == 1 ||
        std::sscanf(comm.c_str(), "gantry r%d", &named) == 1)
      rank = named;
    out.emplace_back(std::stoi(e.path().filename()), rank);
  }
  return out;
}

/// Starts `gantry args` in `cwd` in the background (output to `log`); returns its pid.
// The run directories of an experiment (or a sweep's point, a search's
// trial): every entry but its `latest` link and its `tensorboard` folder
// (the runs' event files, beside them).
inline int run_dirs_in(const std::filesystem::path& experiment) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(experiment))
    n += e.path().filename() != "latest" && e.path().filename() != "tensorboard";
  return n;
}

inline pid_t spawn_gantry(const std::string& args, const std::string& cwd, const std::string& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const std::string cmd =
        "cd '" + cwd + "' && exec '" + std::string(GANTRY_BIN) + "' " + args + " >'" + log + "' 2>&1";
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
    ::_exit(127);
  }
  return pid;
}

/// Non-empty lines of `text`.
inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(line);
  return out;
}

/// Fields of one line split at `sep` (empty fields kept).
inline std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> out(1);
  for (char c : line) {
    if (c == sep)
      out.emplace_back();
    else
      out.back() += c;
  }
  return out;
}

/// A metrics.csv column's non-empty cells by step.
inline std::map<int64_t, std::string> column_by_step(const std::string& csv, const std::string& name) {
  const auto rows = lines_of(read_text(csv));
  std::map<int64_t, std::string> out;
  if (rows.empty()) return out;
  const auto header = split(rows[0], ',');
  const size_t col = std::find(header.begin(), header.end(), name) - header.begin();
  for (size_t i = 1; i < rows.size(); ++i) {
    const auto cells = split(rows[i], ',');
    if (col < cells.size() && !cells[col].empty()) out[std::stoll(cells[0])] = cells[col];
  }
  return out;
}

/// metrics.csv without its wall_time column (the one thing that differs
/// between two runs of the same steps), a line per row.
inline std::string rows_without_wall_time(const std::string& csv) {
  std::string out;
  for (const auto& line : lines_of(csv)) {
    auto cells = split(line, ',');
    if (cells.size() > 2) cells.erase(cells.begin() + 2);
    for (const auto& c : cells) out += c + ",";
    out += "\n";
  }
  return out;
}

/// An IDX file: magic 0x0000080<ndim>, dims, then `data`.
inline std::string idx_bytes(const std::vector<uint32_t>& dims, const std::string& data) {
  std::string b = {0, 0, 8, static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    b += {static_cast<char>(d >> 24), static_cast<char>(d >> 16), static_cast<char>(d >> 8), static_cast<char>(d)};
  return b + data;
}

}  // namespace gantry::test
