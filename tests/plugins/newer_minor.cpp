// A plugin built against a newer minor of the gantry ABI (one ahead) than the
// runner has: it may call hooks the runner lacks, so the loader refuses it.
#include <gantry/gantry.hpp>

namespace gantry_plugin_detail {
const gantry_manifest_v1 gantry_manifest_data = {sizeof(gantry_manifest_v1),
                                                 GANTRY_ABI_VERSION_MAJOR,
                                                 GANTRY_ABI_VERSION_MINOR + 1,
                                                 "newer_minor",
                                                 "1.0.0",
                                                 "test: ABI minor 1 ahead of the runner",
                                                 TORCH_VERSION_MAJOR,
                                                 TORCH_VERSION_MINOR,
                                                 TORCH_VERSION_PATCH,
                                                 GANTRY_DETAIL_CXX11_ABI,
                                                 GANTRY_WITH_CUDA};
}
BOOST_DLL_ALIAS(gantry_plugin_detail::gantry_manifest_data, gantry_manifest)
