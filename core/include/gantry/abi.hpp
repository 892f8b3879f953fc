// The plugin ABI: the manifest a plugin exports, and the macro that exports it.
//
// A plugin is a shared library exporting two Boost.DLL aliases:
//   gantry_manifest  a `gantry_manifest_v1`: plain C data, read by the
//                    loader *before* anything else is called
//   gantry_create    `gantry::System* (const gantry::Params&)`: the factory
// GANTRY_PLUGIN(Class, "name", "version") writes both. The loader refuses a
// plugin whose ABI major, LibTorch major.minor, _GLIBCXX_USE_CXX11_ABI or CUDA
// flag differ from the runner's. Changes are listed in docs/abi.md.
#pragma once

#include <cstdint>

#include <boost/dll/alias.hpp>
#include <torch/version.h>

/// ABI major: bumped when an interface changes incompatibly (the loader refuses
/// a plugin of another major).
#define GANTRY_ABI_VERSION_MAJOR 1
/// ABI minor: bumped when virtuals are appended or manifest fields added.
#define GANTRY_ABI_VERSION_MINOR 3

#ifndef GANTRY_WITH_CUDA
#define GANTRY_WITH_CUDA 0
#endif

extern "C" {
/// The manifest, version 1. Versioned like PJRT's structs: `struct_size` first,
/// fields only ever appended; a reader checks `struct_size` before reading a
/// field added later. All strings are static, NUL-terminated, owned by the plugin
/// and valid while it is loaded.
struct gantry_manifest_v1 {
  uint32_t struct_size;     ///< sizeof(gantry_manifest_v1) as the plugin saw it
  uint32_t abi_major;       ///< GANTRY_ABI_VERSION_MAJOR the plugin was built with
  uint32_t abi_minor;       ///< GANTRY_ABI_VERSION_MINOR the plugin was built with
  const char* name;         ///< plugin name, e.g. "gan" (what `system.plugin` names)
  const char* version;      ///< the plugin's own version, e.g. "0.1.0"
  const char* description;  ///< one line for `gantry plugins`
  uint32_t torch_major;     ///< TORCH_VERSION_MAJOR of the LibTorch it was built against
  uint32_t torch_minor;     ///< TORCH_VERSION_MINOR
  uint32_t torch_patch;     ///< TORCH_VERSION_PATCH (informational, not checked)
  uint32_t cxx11_abi;       ///< _GLIBCXX_USE_CXX11_ABI (0 or 1)
  uint32_t cuda;            ///< 1 when built against a CUDA LibTorch
};
}

namespace gantry {
class System;
class Params;
/// Signature of the factory a plugin exports as `gantry_create`. Returns a new
/// System the caller owns (deleted through its virtual destructor while the
/// plugin is still loaded); throws to report a bad configuration.
using SystemFactory = System*(const Params&);
}  // namespace gantry

#ifdef _GLIBCXX_USE_CXX11_ABI
#define GANTRY_DETAIL_CXX11_ABI _GLIBCXX_USE_CXX11_ABI
#else
#define GANTRY_DETAIL_CXX11_ABI 0
#endif

/// Writes a manifest with explicit fields. GANTRY_PLUGIN is what plugins use;
/// this exists so tests can build plugins with deliberately wrong manifests.
#define GANTRY_PLUGIN_MANIFEST(NAME, VERSION, DESCRIPTION, ABI_MAJOR, TORCH_MAJOR, TORCH_MINOR, CXX11_ABI, CUDA) \
  namespace gantry_plugin_detail {                                                                               \
  const gantry_manifest_v1 gantry_manifest_data = {sizeof(gantry_manifest_v1),                                   \
                                                   ABI_MAJOR,                                                    \
                                                   GANTRY_ABI_VERSION_MINOR,                                     \
                                                   NAME,                                                         \
                                                   VERSION,                                                      \
                                                   DESCRIPTION,                                                  \
                                                   TORCH_MAJOR,                                                  \
                                                   TORCH_MINOR,                                                  \
                                                   TORCH_VERSION_PATCH,                                          \
                                                   CXX11_ABI,                                                    \
                                                   CUDA};                                                        \
  }                                                                                                              \
  BOOST_DLL_ALIAS(gantry_plugin_detail::gantry_manifest_data, gantry_manifest)

/// Writes the factory `gantry_create` for CLASS (constructible from
/// `const gantry::Params&`).
#define GANTRY_PLUGIN_FACTORY(CLASS)                                                             \
  namespace gantry_plugin_detail {                                                               \
  gantry::System* gantry_create_impl(const gantry::Params& params) { return new CLASS(params); } \
  }                                                                                              \
  BOOST_DLL_ALIAS(gantry_plugin_detail::gantry_create_impl, gantry_create)

/// Exports CLASS as a gantry plugin named NAME (a string literal) at VERSION,
/// with this build's ABI, LibTorch version, C++ ABI flag and CUDA flag.
/// Use once, at namespace scope, in one source file of the plugin.
#define GANTRY_PLUGIN(CLASS, NAME, VERSION, DESCRIPTION)                                            \
  GANTRY_PLUGIN_MANIFEST(NAME, VERSION, DESCRIPTION, GANTRY_ABI_VERSION_MAJOR, TORCH_VERSION_MAJOR, \
                         TORCH_VERSION_MINOR, GANTRY_DETAIL_CXX11_ABI, GANTRY_WITH_CUDA)            \
  GANTRY_PLUGIN_FACTORY(CLASS)
