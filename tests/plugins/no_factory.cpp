// A plugin with a good manifest but no gantry_create factory.
#include <gantry/gantry.hpp>

GANTRY_PLUGIN_MANIFEST("no_factory", "1.0.0", "test: no factory", GANTRY_ABI_VERSION_MAJOR, TORCH_VERSION_MAJOR,
                       TORCH_VERSION_MINOR, GANTRY_DETAIL_CXX11_ABI, GANTRY_WITH_CUDA)
