// Compiled only so that CMake builds the shared <torch/torch.h> precompiled header.
