// A plugin's manifest read from its file, before it is loaded. dlopen runs
// the static initializers of every library the plugin needs: a plugin built
// against another LibTorch brings that LibTorch along, whose initializers
// register its operators into this process's dispatcher and crash it (seen:
// SIGBUS for a LibTorch 1.13 plugin in a 2.15 runner) before a manifest could
// be read the usual way. So the loader reads the manifest's numbers from the
// ELF file first and refuses a mismatch without loading anything.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <gantry/abi.hpp>

#include "gantry/core_export.hpp"

namespace gantry {

/// What the loader reads from a plugin file before loading it.
struct ElfPlugin {
  /// `gantry_manifest`: its numeric fields as the file holds them (the string
  /// pointers are null: only a loaded plugin has them); empty when it exports none.
  std::optional<gantry_manifest_v1> manifest;
  /// Its DT_NEEDED libraries, e.g. "libc10.so.1.13" (Debian's LibTorch names
  /// its libraries by version; the torch wheel's do not).
  std::vector<std::string> needed;
};

/// When `path` is an ELF file built for another machine than this process
/// (an aarch64 library on x86-64, a 32-bit one): "an ELF for aarch64" (what
/// dlopen reports as "No such file or directory"). "" otherwise.
GANTRY_CORE_EXPORT std::string elf_of_another_machine(const std::string& path);

/// Reads the 64-bit little-endian x86-64 ELF shared object at `path`; empty
/// when it is not one (loading it then says why).
GANTRY_CORE_EXPORT std::optional<ElfPlugin> read_plugin_elf(const std::string& path);

}  // namespace gantry
