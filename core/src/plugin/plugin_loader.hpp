// Finding, checking and loading plugins. The manifest is read from the file
// and checked before the library is loaded (plugin/elf_manifest.hpp), and
// again from the loaded library; a System made by a plugin keeps the
// plugin's library loaded while it lives.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gantry/abi.hpp"
#include "gantry/core_export.hpp"
#include "gantry/system.hpp"
#include "plugin/elf_manifest.hpp"

namespace boost::dll {
class shared_library;
}

namespace gantry {

/// A copy of a plugin's manifest, owned by the runner.
struct GANTRY_CORE_EXPORT PluginManifest {
  std::string path;
  std::string name;
  std::string version;
  std::string description;
  uint32_t abi_major = 0, abi_minor = 0;
  uint32_t torch_major = 0, torch_minor = 0, torch_patch = 0;
  uint32_t cxx11_abi = 0;
  uint32_t cuda = 0;

  /// "gan 0.1.0 (ABI 1.0, LibTorch 1.13, C++11 ABI 1, CPU)"
  std::string summary() const;
};

/// A loaded, checked plugin library.
class GANTRY_CORE_EXPORT Plugin {
 public:
  /// Loads `path`, reads and checks the manifest. Throws PluginError with one
  /// line naming the file and both sides of any mismatch.
  static std::shared_ptr<Plugin> open(const std::string& path);
  /// Resolves a plugin name (searched, see search_path()) or a path, and opens it.
  static std::shared_ptr<Plugin> find(const std::string& name_or_path);
  /// Folders searched for lib<name>.so: $GANTRY_PLUGIN_PATH (':'-separated),
  /// then <exe>/../plugins (build tree), then <exe>/../lib/gantry/plugins (install).
  static std::vector<std::string> search_path();
  /// Every plugin in search_path(), as (path, manifest or error message).
  static std::vector<std::pair<std::string, std::string>> list_all();

  const PluginManifest& manifest() const { return manifest_; }

  /// Calls the plugin's factory. The returned System keeps this library loaded
  /// until it is destroyed. A throwing constructor is a PluginError naming the
  /// plugin; a config error it raised keeps its own message.
  std::shared_ptr<System> create(const Params& params) const;

 private:
  Plugin() = default;
  std::shared_ptr<boost::dll::shared_library> lib_;
  PluginManifest manifest_;
};

/// The runner's own build facts, compared against each plugin's manifest.
GANTRY_CORE_EXPORT PluginManifest runner_manifest();

/// What Plugin::open checks before loading `path`: the manifest read from the
/// file against runner_manifest(), and that no library it needs is named for
/// another LibTorch version (libc10.so.1.13 in a 2.x runner). Throws
/// PluginError with one line naming the file and both sides.
GANTRY_CORE_EXPORT void check_plugin_file(const std::string& path, const ElfPlugin& elf);

/// `plugin P: HOOK failed[ at step N]: CAUSE`, CAUSE the error's message
/// without LibTorch's C++ backtrace: the line shape of every plugin failure
/// (the constructor's, here, and every hook's, in PluginSystem).
GANTRY_CORE_EXPORT std::string plugin_failure(const std::string& plugin, const std::string& hook, int64_t step,
                                              const std::exception& e);

}  // namespace gantry
