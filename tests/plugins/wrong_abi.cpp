// A plugin built for a future gantry ABI: the loader must refuse it.
#include <gantry/gantry.hpp>

GANTRY_PLUGIN_MANIFEST("wrong_abi", "1.0.0", "test: ABI major 99", 99, TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR,
                       GANTRY_DETAIL_CXX11_ABI, GANTRY_WITH_CUDA)
