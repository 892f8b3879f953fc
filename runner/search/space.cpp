#include "search/space.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "gantry/errors.hpp"

namespace gantry::search {

namespace {

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

std::vector<std::string> split_args(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t comma; (comma = s.find(',', start)) != std::string::npos; start = comma + 1)
    out.push_back(trim(s.substr(start, comma - start)));
  out.push_back(trim(s.substr(start)));
  return out;
}

bool parse_number(const std::string& s, double& v) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  v = std::strtod(s.c_str(), &end);
  return *end == '\0' && errno == 0 && std::isfinite(v);
}

double uniform01(
    std::mt19937_64& rng) {  // 53 random bits: the same on every platform (unlike uniform_real_distribution)
  return double(rng() >> 11) * 0x1.0p-53;
}

}  // namespace

std::string format_value(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

bool is_distribution(const std::string& value) {
  const size_t open = value.find('(');
  return open != std::string::npos && open > 0 && value.back() == ')' &&
         std::all_of(value.begin(), value.begin() + long(open), [](char c) { return std::isalpha((unsigned char)c); });
}

Dimension parse_dimension(const std::string& key, const std::string& value, const std::string& where_given) {
  const std::string where = where_given.empty() ? "gantry search: '" + key + "=" + value + "': " : where_given;
  if (!is_distribution(value))
    throw ConfigError(where + "not a distribution (uniform(a,b), loguniform(a,b), int(a,b) or choice(x,y,...))");
  Dimension d;
  d.key = key;
  d.text = value;
  const size_t open = value.find('(');
  const std::string name = value.substr(0, open);
  const std::vector<std::string> args = split_args(value.substr(open + 1, value.size() - open - 2));
  if (name == "choice") {
    d.kind = Dimension::Kind::kChoice;
    for (const auto& a : args)
      if (a.empty()) throw ConfigError(where + "choice() has an empty value");
    d.values = args;
    if (d.values.size() < 2) throw ConfigError(where + "choice() needs two values or more (one value: key=value)");
    for (size_t i = 0; i < d.values.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (d.values[i] == d.values[j]) throw ConfigError(where + "choice() lists " + d.values[i] + " twice");
    return d;
  }
  if (name == "uniform")
    d.kind = Dimension::Kind::kUniform;
  else if (name == "loguniform")
    d.kind = Dimension::Kind::kLogUniform;
  else if (name == "int")
    d.kind = Dimension::Kind::kInt;
  else
    throw ConfigError(where + "unknown distribution '" + name +
                      "' (uniform(a,b), loguniform(a,b), int(a,b) or choice(x,y,...))");
  if (args.size() != 2) throw ConfigError(where + name + "() takes two bounds, low and high");
  if (!parse_number(args[0], d.low) || !parse_number(args[1], d.high))
    throw ConfigError(where + "the bounds must be finite numbers");
  if (!(d.low < d.high)) throw ConfigError(where + "low must be below high");
  if (d.kind == Dimension::Kind::kLogUniform && d.low <= 0) throw ConfigError(where + "loguniform() needs low > 0");
  if (d.kind == Dimension::Kind::kInt && (d.low != std::floor(d.low) || d.high != std::floor(d.high)))
    throw ConfigError(where + "int() takes integer bounds");
  return d;
}

std::string Dimension::from_unit(double u) const {
  u = std::clamp(u, 0.0, 1.0);
  switch (kind) {
    case Kind::kUniform:
      return format_value(low + u * (high - low));
    case Kind::kLogUniform:
      return format_value(std::exp(std::log(low) + u * (std::log(high) - std::log(low))));
    case Kind::kInt: {
      // Each integer owns an equal share of [0, 1].
      const double n = high - low + 1;
      return std::to_string((long long)(low + std::min(n - 1, std::floor(u * n))));
    }
    case Kind::kChoice:
      return values[std::min(values.size() - 1, size_t(u * double(values.size())))];
  }
  return "";
}

double Dimension::unit(const std::string& value) const {
  double v = 0;
  switch (kind) {
    case Kind::kUniform:
      parse_number(value, v);
      return std::clamp((v - low) / (high - low), 0.0, 1.0);
    case Kind::kLogUniform:
      parse_number(value, v);
      return v > 0 ? std::clamp((std::log(v) - std::log(low)) / (std::log(high) - std::log(low)), 0.0, 1.0) : 0.0;
    case Kind::kInt:
      parse_number(value, v);
      return std::clamp((v - low + 0.5) / (high - low + 1), 0.0, 1.0);
    case Kind::kChoice: {
      const auto it = std::find(values.begin(), values.end(), value);
      const size_t i = it == values.end() ? 0 : size_t(it - values.begin());
      return (double(i) + 0.5) / double(values.size());
    }
  }
  return 0;
}

std::string Dimension::sample(std::mt19937_64& rng) const { return from_unit(uniform01(rng)); }

std::string Dimension::perturb(const std::string& value, std::mt19937_64& rng, bool resample) const {
  if (resample) return sample(rng);
  const bool up = (rng() >> 63) != 0;
  if (kind == Kind::kChoice) {  // a neighbour in the list, as Ray's PBT does for categorical values
    const auto it = std::find(values.begin(), values.end(), value);
    size_t i = it == values.end() ? 0 : size_t(it - values.begin());
    if (up && i + 1 < values.size()) ++i;
    if (!up && i > 0) --i;
    return values[i];
  }
  double v = 0;
  parse_number(value, v);
  v = std::clamp(v * (up ? 1.2 : 0.8), low, high);
  if (kind == Kind::kInt) return std::to_string((long long)std::round(v));
  return format_value(v);
}

std::vector<std::string> Dimension::extremes() const {
  if (kind == Kind::kChoice) return values;
  if (kind == Kind::kInt) return {std::to_string((long long)low), std::to_string((long long)high)};
  return {format_value(low), format_value(high)};
}

std::mt19937_64 trial_rng(uint64_t seed, uint64_t trial, uint64_t purpose) {
  std::seed_seq seq{uint32_t(seed), uint32_t(seed >> 32), uint32_t(trial), uint32_t(trial >> 32), uint32_t(purpose)};
  return std::mt19937_64(seq);
}

}  // namespace gantry::search
