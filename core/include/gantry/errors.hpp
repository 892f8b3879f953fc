// Error types of the engine. Each carries one line meant for the user: it names
// the culprit (a config key and where it was set, a file, a plugin and its hook)
// and, where known, the fix. The runner prints what() and exits non-zero.
#pragma once

#include <stdexcept>
#include <string>

#include "gantry/core_export.hpp"

namespace gantry {

/// Base of every user-facing error.
class GANTRY_CORE_EXPORT Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A bad config file, key, value or command-line override.
class GANTRY_CORE_EXPORT ConfigError : public Error {
 public:
  using Error::Error;
};

/// A plugin that cannot be loaded, or whose code threw.
class GANTRY_CORE_EXPORT PluginError : public Error {
 public:
  using Error::Error;
};

/// Missing, truncated or malformed data files.
class GANTRY_CORE_EXPORT DataError : public Error {
 public:
  using Error::Error;
};

/// A checkpoint that cannot be written, read, or does not fit the model.
class GANTRY_CORE_EXPORT CheckpointError : public Error {
 public:
  using Error::Error;
};

/// Training stopped on a NaN/Inf metric or a failed step.
class GANTRY_CORE_EXPORT TrainingError : public Error {
 public:
  using Error::Error;
};

}  // namespace gantry
