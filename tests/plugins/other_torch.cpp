// A plugin whose manifest says LibTorch 2.11: the loader must refuse it.
#include <gantry/gantry.hpp>

GANTRY_PLUGIN_MANIFEST("other_torch", "1.0.0", "test: LibTorch 2.11", GANTRY_ABI_VERSION_MAJOR, 2, 11,
                       GANTRY_DETAIL_CXX11_ABI, GANTRY_WITH_CUDA)
