// What `gantry serve` reads from a client, parsed without LibTorch (so that
// the libFuzzer target, tests/fuzz_serve.sh, builds in seconds): a .npy
// header, a JSON body of numbers, a query string. Every parser throws
// std::invalid_argument with one line naming what is wrong; none reads past
// its input or allocates more than its input justifies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace gantry::serve {

/// A .npy file (NumPy's format 1.0-3.0) of little-endian float32 in C order:
/// its shape and where its data starts; the data's size is checked.
struct Npy {
  std::vector<int64_t> shape;
  size_t data_at = 0;
  size_t count = 0;  ///< elements
};
Npy parse_npy(std::string_view body);
/// The .npy file of `count` float32 of `shape` (format 1.0, header padded to 64).
std::string npy_bytes(const std::vector<int64_t>& shape, const float* data, size_t count);

/// A JSON body of numbers: a (nested, rectangular) array, or an object
/// {"input": array}. At most `max_values` numbers; UTF-8 checked first.
struct JsonRows {
  std::vector<int64_t> shape;
  std::vector<float> values;
};
JsonRows parse_json_rows(std::string_view body, size_t max_values);
/// {"shape": [...], "output": nested arrays} of `count` floats (each the shortest text that reads back as the same
/// float32; NaN and infinities, which JSON lacks, as null).
std::string json_rows(const std::vector<int64_t>& shape, const float* data, size_t count);

/// "a=1&b=x%20y" -> {a: 1, b: "x y"} (percent escapes and '+' decoded; a
/// key given twice, a bad escape or a NUL is an error).
std::map<std::string, std::string> parse_query(std::string_view query);

/// Throws naming the first byte offset that is not UTF-8.
void check_utf8(std::string_view text, const char* what);
std::string json_escape(std::string_view s);
std::string shape_json(const std::vector<int64_t>& shape);

}  // namespace gantry::serve
