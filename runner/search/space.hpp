// A search space: the overrides of `gantry search` whose value is a
// distribution (docs/search.md):
//
//   system.lr=loguniform(1e-5,1e-3)   log-uniform on [low, high], low > 0
//   system.b1=uniform(0,0.9)          uniform on [low, high]
//   trainer.seed=int(1,100)           an integer in [low, high], both included
//   data.batch_size=choice(32,64,128) one of the listed values
//
// Values are drawn from a counter-based generator (the search's seed and the
// trial's number), so trial N's values do not depend on what ran before it,
// and are written with 6 significant digits: the text a trial's config gets
// is the value (a journal, a summary and `gantry train` read the same one).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace gantry::search {

struct Dimension {
  enum class Kind { kUniform, kLogUniform, kInt, kChoice };
  std::string key;  ///< "system.lr"
  Kind kind = Kind::kUniform;
  double low = 0, high = 0;         ///< uniform, loguniform, int
  std::vector<std::string> values;  ///< choice
  std::string text;                 ///< as written: "loguniform(1e-5,1e-3)"

  /// A value drawn with `rng`, as the text a config gets.
  std::string sample(std::mt19937_64& rng) const;
  /// PBT's explore: x0.8 or x1.2 (a neighbouring choice), kept within the
  /// bounds; with `resample`, a fresh draw instead.
  std::string perturb(const std::string& value, std::mt19937_64& rng, bool resample) const;
  /// Where `value` lies in [0, 1] (TPE's kernels work there): the uniform
  /// position, the log position, the middle of an integer's or a choice's
  /// equal share of [0, 1].
  double unit(const std::string& value) const;
  /// The inverse of unit() (clamped into [0, 1]), as the text a config gets.
  std::string from_unit(double u) const;
  /// The values whose key checks the space before any trial runs: the two
  /// bounds, or every choice.
  std::vector<std::string> extremes() const;
};

/// Whether `value` is written as a distribution: name(...).
bool is_distribution(const std::string& value);

/// Parses `key=name(args)`; throws ConfigError naming the override and what
/// is wrong (an unknown name, a bound that is no number, low >= high, ...).
/// `where`: the message's start ("" : "gantry search: 'key=value': ").
Dimension parse_dimension(const std::string& key, const std::string& value, const std::string& where = "");

/// The text of `v` with 6 significant digits ("0.0003", "1.5e-05").
std::string format_value(double v);

/// A generator for trial `trial` of a search seeded `seed`, for `purpose`
/// (0: its values, 1: PBT's explore, ...): independent streams.
std::mt19937_64 trial_rng(uint64_t seed, uint64_t trial, uint64_t purpose);

}  // namespace gantry::search
