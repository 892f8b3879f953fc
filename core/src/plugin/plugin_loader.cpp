#include "plugin/plugin_loader.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <c10/util/Exception.h>

#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>

#include "plugin/elf_manifest.hpp"
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <regex>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "gantry/errors.hpp"
#include "runtime/runtime.hpp"

namespace fs = std::filesystem;

namespace gantry {

namespace {

// The smallest manifest this runner understands: version 1 up to `cuda`.
constexpr uint32_t kManifestV1Size = offsetof(gantry_manifest_v1, cuda) + sizeof(uint32_t);

std::string torch_version(uint32_t major, uint32_t minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

void check_against_runner(const PluginManifest& p) {
  const PluginManifest r = runner_manifest();
  const std::string who = "plugin " + p.path;
  if (p.abi_major != r.abi_major)
    throw PluginError(who + " uses gantry ABI " + std::to_string(p.abi_major) + ".x, this runner " +
                      std::to_string(r.abi_major) + "." + std::to_string(r.abi_minor) +
                      ": rebuild the plugin against this gantry SDK");
  // A newer minor may rely on virtuals this runner's vtables do not have: a
  // call to one would jump past the end of the plugin's view of the table.
  if (p.abi_minor > r.abi_minor)
    throw PluginError(who + " uses gantry ABI " + std::to_string(p.abi_major) + "." + std::to_string(p.abi_minor) +
                      ", newer than this runner's " + std::to_string(r.abi_major) + "." + std::to_string(r.abi_minor) +
                      ": update gantry, or rebuild the plugin against SDK " + std::to_string(r.abi_major) + "." +
                      std::to_string(r.abi_minor));
  if (p.torch_major != r.torch_major || p.torch_minor != r.torch_minor)
    throw PluginError(who + " was built against LibTorch " + torch_version(p.torch_major, p.torch_minor) +
                      ", this runner uses " + torch_version(r.torch_major, r.torch_minor) + ": rebuild the plugin");
  if (p.cxx11_abi != r.cxx11_abi)
    throw PluginError(who + " was built with _GLIBCXX_USE_CXX11_ABI=" + std::to_string(p.cxx11_abi) +
                      ", this runner with " + std::to_string(r.cxx11_abi) +
                      ": rebuild the plugin with the runner's LibTorch flags");
  if (p.cuda != r.cuda)
    throw PluginError(who + " was built for " + (p.cuda ? "a CUDA" : "a CPU-only") + " LibTorch, this runner for " +
                      (r.cuda ? "a CUDA" : "a CPU-only") + " one: rebuild the plugin against the runner's LibTorch");
}

// The runner's copy of a manifest (strings only when the plugin is loaded:
// a manifest read from the file has null pointers).
PluginManifest manifest_of(const gantry_manifest_v1& raw, const std::string& path) {
  PluginManifest m;
  m.path = path;
  m.name = raw.name ? raw.name : "";
  m.version = raw.version ? raw.version : "";
  m.description = raw.description ? raw.description : "";
  m.abi_major = raw.abi_major;
  m.abi_minor = raw.abi_minor;
  m.torch_major = raw.torch_major;
  m.torch_minor = raw.torch_minor;
  m.torch_patch = raw.torch_patch;
  m.cxx11_abi = raw.cxx11_abi;
  m.cuda = raw.cuda;
  return m;
}

// A plugin linked against a LibTorch whose libraries are named by version
// (Debian's libc10.so.1.13) that is not this runner's: its headers may say
// otherwise (built with another Torch_DIR's headers but the system's
// libraries), its libraries would still be loaded.
void check_needed(const std::string& path, const std::vector<std::string>& needed) {
  static const std::regex versioned(R"((libtorch[a-z_]*|libc10[a-z_]*)\.so\.([0-9]+)\.([0-9]+))");
  for (const auto& lib : needed) {
    std::smatch m;
    if (!std::regex_match(lib, m, versioned)) continue;
    if (std::stoi(m[2]) == TORCH_VERSION_MAJOR && std::stoi(m[3]) == TORCH_VERSION_MINOR) continue;
    throw PluginError("plugin " + path + " is linked against " + lib + " (LibTorch " + m[2].str() + "." + m[3].str() +
                      "), this runner uses " + torch_version(TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR) +
                      ": rebuild the plugin against this runner's LibTorch (headers and libraries)");
  }
}

}  // namespace

void check_plugin_file(const std::string& path, const ElfPlugin& elf) {
  if (elf.manifest && elf.manifest->struct_size >= kManifestV1Size) {
    check_against_runner(manifest_of(*elf.manifest, path));
  }
  check_needed(path, elf.needed);
}

std::string PluginManifest::summary() const {
  std::ostringstream s;
  s << name << " " << version << " (ABI " << abi_major << "." << abi_minor << ", LibTorch " << torch_major << "."
    << torch_minor << ", C++11 ABI " << cxx11_abi << ", " << (cuda ? "CUDA" : "CPU") << ")";
  return s.str();
}

PluginManifest runner_manifest() {
  PluginManifest m;
  m.name = "gantry";
  m.abi_major = GANTRY_ABI_VERSION_MAJOR;
  m.abi_minor = GANTRY_ABI_VERSION_MINOR;
  m.torch_major = TORCH_VERSION_MAJOR;
  m.torch_minor = TORCH_VERSION_MINOR;
  m.torch_patch = TORCH_VERSION_PATCH;
  m.cxx11_abi = GANTRY_DETAIL_CXX11_ABI;
  m.cuda = GANTRY_WITH_CUDA;
  return m;
}

std::shared_ptr<Plugin> Plugin::open(const std::string& path) {
  std::error_code ec_stat;
  const auto st = fs::status(path, ec_stat);
  if (!fs::exists(st)) throw PluginError("plugin " + path + ": no such file");
  // dlopen of a FIFO or a device would block or read forever.
  if (!fs::is_regular_file(st)) throw PluginError("plugin " + path + " is not a regular file (a shared library)");
  if (const std::string other = elf_of_another_machine(path); !other.empty())
    throw PluginError("plugin " + path + " is " + other + ": build it for this machine");
  // Refuse another LibTorch's (or ABI's) plugin before loading it: loading
  // would run its LibTorch's initializers in this process (plugin/elf_manifest.hpp).
  if (const auto elf = read_plugin_elf(path)) check_plugin_file(path, *elf);
  // dlopen once ourselves for dlerror()'s precise message (wrong ELF, missing
  // dependency); Boost.DLL then takes its own reference.
  void* probe = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!probe) {
    const char* err = ::dlerror();
    throw PluginError("plugin " + path + " is not a loadable shared library: " + (err ? err : "unknown dlopen error"));
  }
  auto lib = std::make_shared<boost::dll::shared_library>();
  boost::dll::fs::error_code ec;
  lib->load(path, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local, ec);
  ::dlclose(probe);
  if (ec) throw PluginError("plugin " + path + " cannot be loaded: " + ec.message());

  if (!lib->has("gantry_manifest"))
    throw PluginError("plugin " + path + " is not a gantry plugin: it exports no gantry_manifest (use GANTRY_PLUGIN)");
  const auto& raw = lib->get_alias<const gantry_manifest_v1>("gantry_manifest");
  if (raw.struct_size < kManifestV1Size)
    throw PluginError("plugin " + path + " has a truncated manifest (" + std::to_string(raw.struct_size) +
                      " bytes, at least " + std::to_string(kManifestV1Size) + " expected)");
  auto plugin = std::shared_ptr<Plugin>(new Plugin());
  PluginManifest& m = plugin->manifest_;
  m = manifest_of(raw, path);
  check_against_runner(m);
  if (!lib->has("gantry_create"))
    throw PluginError("plugin " + path + " (" + m.name + ") exports no factory gantry_create (use GANTRY_PLUGIN)");
  plugin->lib_ = std::move(lib);
  return plugin;
}

std::vector<std::string> Plugin::search_path() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("GANTRY_PLUGIN_PATH")) {
    std::stringstream ss(env);
    std::string d;
    while (std::getline(ss, d, ':'))
      if (!d.empty()) dirs.push_back(d);
  }
  const fs::path exe_dir = boost::dll::program_location().parent_path().string();
  dirs.push_back((exe_dir.parent_path() / "plugins").string());
  dirs.push_back((exe_dir.parent_path() / "lib" / "gantry" / "plugins").string());
  return dirs;
}

std::shared_ptr<Plugin> Plugin::find(const std::string& name_or_path) {
  const bool is_path = name_or_path.find('/') != std::string::npos || fs::path(name_or_path).extension() == ".so";
  if (is_path) return open(name_or_path);
  std::string searched;
  for (const auto& dir : search_path()) {
    const fs::path candidate = fs::path(dir) / ("lib" + name_or_path + ".so");
    if (fs::exists(candidate)) return open(candidate.string());
    searched += (searched.empty() ? "" : ", ") + dir;
  }
  throw PluginError("plugin '" + name_or_path + "' not found: no lib" + name_or_path + ".so in " + searched +
                    " (set GANTRY_PLUGIN_PATH or give a path)");
}

namespace {

// Opens `path` in a child process and returns its summary, or "error: ...":
// loading runs the library's static initializers, and one that crashes or
// hangs must not take `gantry plugins` with it.
std::string probe_in_child(const std::string& path) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return "";
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return "";
  }
  if (pid == 0) {
    ::close(fds[0]);
    std::string out;
    try {
      out = Plugin::open(path)->manifest().summary();
    } catch (const Error& e) {
      out = std::string("error: ") + e.what();
    } catch (...) {
      out = "error: loading it threw a non-standard exception";
    }
    for (size_t done = 0; done < out.size();) {
      const ssize_t n = ::write(fds[1], out.data() + done, out.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  bool timed_out = false;
  while (true) {
    pollfd p{fds[0], POLLIN, 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    if (::poll(&p, 1, static_cast<int>(left.count())) < 0 && errno != EINTR) break;
    char buf[4096];
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) return "error: loading it did not finish within 30 s (its static initializers hang)";
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = sigabbrev_np(sig);
    return "error: loading it crashed the process (signal " + std::to_string(sig) + ", SIG" + (name ? name : "?") +
           ", in its static initializers): gantry train with it would crash too";
  }
  return out.empty() ? "error: loading it ended the process (exit " + std::to_string(WEXITSTATUS(status)) + ")" : out;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> Plugin::list_all() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& dir : search_path()) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".so") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      if (std::string got = probe_in_child(f.string()); !got.empty()) {
        out.emplace_back(f.string(), std::move(got));
        continue;
      }
      try {  // no child process to be had: in this one
        out.emplace_back(f.string(), open(f.string())->manifest().summary());
      } catch (const Error& e) {
        out.emplace_back(f.string(), std::string("error: ") + e.what());
      }
    }
  }
  return out;
}

std::shared_ptr<System> Plugin::create(const Params& params) const {
  auto& factory = lib_->get_alias<SystemFactory>("gantry_create");
  System* raw = nullptr;
  const std::string who = "plugin " + manifest_.name;
  try {
    raw = factory(params);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(e.what());  // a Params getter: already names the key and where
  } catch (const std::exception& e) {
    throw PluginError(plugin_failure(manifest_.name, "constructor", -1, e));  // PluginSystem's line shape
  } catch (...) {
    throw PluginError(who + ": constructor threw a non-standard exception");
  }
  if (!raw) throw PluginError(who + ": factory returned null");
  // A plugin's code may still run after its System is gone (a thread it
  // started, a static destructor): never unmap it. The library stays loaded
  // until the process ends (dlclose of a NODELETE object keeps it mapped).
  ::dlopen(manifest_.path.c_str(), RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  auto lib = lib_;  // the deleter keeps the library loaded until the System is gone
  return std::shared_ptr<System>(raw, [lib](System* s) { delete s; });
}

std::string plugin_failure(const std::string& plugin, const std::string& hook, int64_t step, const std::exception& e) {
  std::string cause = error_text(e);  // a c10::Error's message without its backtrace
  // A LibTorch error the plugin caught and rethrew as another type keeps its
  // backtrace in what(): cut it there.
  if (const size_t at = cause.find("\nException raised from "); at != std::string::npos) cause.resize(at);
  return "plugin " + plugin + ": " + hook + " failed" + (step >= 0 ? " at step " + std::to_string(step) : "") + ": " +
         cause;
}

}  // namespace gantry
