// gantry::Params: typed, read-only access to the `system:` section of an
// experiment's config, handed to a plugin's constructor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gantry {

/// The `system:` section of the resolved config (overrides applied), keyed
/// without the `system.` prefix: `lr`, `latent_dim`, nested maps as `a.b`.
///
/// Ownership: the runner owns it; it is valid only during the plugin's
/// constructor: copy out what you need. Every key a plugin asks for (with
/// `has` or any getter) counts as known; a key in the config that the plugin
/// never asked for is reported by the runner as an unknown key, with the
/// nearest known one. Getters throw std::invalid_argument naming the key, where
/// it was set (file:line or command line) and the expected type.
///
/// ABI: pure virtuals are append-only; the inline helpers below are not part of
/// the ABI and may grow freely.
class Params {
 public:
  virtual ~Params() = default;

  /// True when `key` is set in the config (and marks it known).
  virtual bool has(const std::string& key) const = 0;
  /// The value of `key` as a number (an integer is accepted).
  virtual double get_double(const std::string& key) const = 0;
  /// The value of `key` as an integer (a number with a fraction is an error).
  virtual int64_t get_int(const std::string& key) const = 0;
  /// The value of `key` as a boolean (true/false).
  virtual bool get_bool(const std::string& key) const = 0;
  /// The value of `key` as a string (a scalar of any kind is accepted).
  virtual std::string get_string(const std::string& key) const = 0;
  /// The value of `key` as a list of numbers.
  virtual std::vector<double> get_double_list(const std::string& key) const = 0;
  /// The value of `key` as a list of integers.
  virtual std::vector<int64_t> get_int_list(const std::string& key) const = 0;
  /// ABI 1.3: the resolved value of any key of the run's config, by its full
  /// name (`trainer.seed`, `data.batch_size`, `optimizers.g.lr`) as YAML text
  /// (a list: `[1, 2]`; unset: ""). Throws std::invalid_argument naming an
  /// unknown key and the nearest one. Does not mark `system.` keys known.
  virtual std::string config_value(const std::string& key) const = 0;

  /// `key` as a number, or `fallback` when it is not set.
  double get(const std::string& key, double fallback) const { return has(key) ? get_double(key) : fallback; }
  /// `key` as an integer, or `fallback` when it is not set.
  int64_t get(const std::string& key, int64_t fallback) const { return has(key) ? get_int(key) : fallback; }
  /// `key` as an integer, or `fallback` when it is not set.
  int64_t get(const std::string& key, int fallback) const { return get(key, static_cast<int64_t>(fallback)); }
  /// `key` as a boolean, or `fallback` when it is not set.
  bool get(const std::string& key, bool fallback) const { return has(key) ? get_bool(key) : fallback; }
  /// `key` as a string, or `fallback` when it is not set.
  std::string get(const std::string& key, const std::string& fallback) const {
    return has(key) ? get_string(key) : fallback;
  }
  /// `key` as a string, or `fallback` when it is not set.
  std::string get(const std::string& key, const char* fallback) const { return get(key, std::string(fallback)); }
  /// `key` as a list of integers, or `fallback` when it is not set.
  std::vector<int64_t> get(const std::string& key, const std::vector<int64_t>& fallback) const {
    return has(key) ? get_int_list(key) : fallback;
  }
  /// `key` as a list of numbers, or `fallback` when it is not set.
  std::vector<double> get(const std::string& key, const std::vector<double>& fallback) const {
    return has(key) ? get_double_list(key) : fallback;
  }
};

}  // namespace gantry
