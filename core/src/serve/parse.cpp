#include "serve/parse.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace gantry::serve {

namespace {

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument(what); }

uint64_t checked_count(const std::vector<int64_t>& shape) {
  uint64_t count = 1;
  for (int64_t d : shape) {
    if (d < 0) bad("a negative dimension");
    if (d > 0 && count > (uint64_t(1) << 40) / uint64_t(d)) bad("the shape is too large");
    count *= uint64_t(d);
  }
  return count;
}

}  // namespace

// ---- .npy ----

Npy parse_npy(std::string_view b) {
  if (b.size() < 10 || b.compare(0, 6, "\x93NUMPY") != 0) bad("the body is not a .npy file (no \\x93NUMPY magic)");
  const int major = static_cast<unsigned char>(b[6]);
  size_t header_len = 0, at = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(b[8]) | size_t(static_cast<unsigned char>(b[9])) << 8;
    at = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12) bad(".npy header truncated");
    for (int i = 0; i < 4; ++i) header_len |= size_t(static_cast<unsigned char>(b[8 + i])) << (8 * i);
    at = 12;
  } else {
    bad(".npy version " + std::to_string(major) + " is not supported");
  }
  if (header_len > b.size() - at) bad(".npy header truncated");
  const std::string_view h = b.substr(at, header_len);
  auto field = [&](std::string_view key) {
    const size_t k = h.find(key);
    if (k == std::string_view::npos) bad(".npy header has no " + std::string(key));
    const size_t v = h.find(':', k + key.size());
    if (v == std::string_view::npos) bad(".npy header: " + std::string(key) + " has no value");
    std::string_view rest = h.substr(v + 1);
    const size_t start = rest.find_first_not_of(' ');
    return start == std::string_view::npos ? std::string_view() : rest.substr(start);
  };
  const std::string_view descr = field("'descr'");
  if (descr.substr(0, 5) != "'<f4'" && descr.substr(0, 9) != "'float32'") {
    const std::string shown(descr.substr(0, std::min(descr.find(','), size_t(20))));
    bad(".npy dtype " + shown + ": send little-endian float32 ('<f4')");
  }
  if (field("'fortran_order'").substr(0, 4) == "True") bad(".npy in Fortran order: send C order");
  const std::string_view shape_text = field("'shape'");
  const size_t open = shape_text.find('('), close = shape_text.find(')');
  if (open != 0 || close == std::string_view::npos) bad(".npy header: a malformed shape");
  Npy out;
  const std::string_view dims = shape_text.substr(1, close - 1);
  size_t i = 0;
  while (i < dims.size()) {
    while (i < dims.size() && dims[i] == ' ') ++i;
    if (i == dims.size()) break;
    if (dims[i] < '0' || dims[i] > '9') bad(".npy header: a malformed shape (" + std::string(dims) + ")");
    int64_t d = 0;
    while (i < dims.size() && dims[i] >= '0' && dims[i] <= '9') {
      d = d * 10 + (dims[i++] - '0');
      if (d > (int64_t(1) << 31)) bad(".npy header: a dimension over 2^31");
    }
    out.shape.push_back(d);
    if (out.shape.size() > 8) bad(".npy header: more than 8 dimensions");
    while (i < dims.size() && dims[i] == ' ') ++i;
    if (i < dims.size() && dims[i] != ',') bad(".npy header: a malformed shape (" + std::string(dims) + ")");
    ++i;
  }
  out.count = checked_count(out.shape);
  out.data_at = at + header_len;
  if (b.size() - out.data_at != out.count * sizeof(float))
    bad(".npy data is " + std::to_string(b.size() - out.data_at) + " bytes; its shape needs " +
        std::to_string(out.count * sizeof(float)));
  return out;
}

std::string npy_bytes(const std::vector<int64_t>& shape, const float* data, size_t count) {
  std::string dims;
  for (int64_t d : shape) dims += std::to_string(d) + ", ";
  if (shape.size() == 1)
    dims.pop_back();  // "(N,)"
  else if (shape.size() > 1)
    dims.resize(dims.size() - 2);
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += char(header.size() & 0xff);
  out += char(header.size() >> 8);
  out += header;
  out.append(reinterpret_cast<const char*>(data), count * sizeof(float));
  return out;
}

// ---- JSON ----

void check_utf8(std::string_view s, const char* what) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    int more = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : -1;
    if (more < 0 || (more == 1 && c < 0xc2) || (more == 3 && c > 0xf4) || i + more >= s.size() + (more == 0))
      bad(std::string(what) + " is not UTF-8 (byte " + std::to_string(i) + ")");
    for (int k = 1; k <= more; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80)
        bad(std::string(what) + " is not UTF-8 (byte " + std::to_string(i) + ")");
    const unsigned char c1 = more > 0 ? static_cast<unsigned char>(s[i + 1]) : 0;
    if ((c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 >= 0xa0) || (c == 0xf0 && c1 < 0x90) || (c == 0xf4 && c1 >= 0x90))
      bad(std::string(what) + " is not UTF-8 (byte " + std::to_string(i) + ": an overlong form or a surrogate)");
    i += more + 1;
  }
}

namespace {

// A recursive-descent reader of nested arrays of numbers (and one object
// level for {"input": ...}); depth at most 8.
struct JsonReader {
  std::string_view s;
  size_t i = 0;
  size_t max_values;
  JsonRows out;
  std::vector<int64_t> seen;  // the length of each depth's first array (the shape so far)
  int leaf_depth = -1;        // where numbers were found

  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  }
  [[noreturn]] void fail(const std::string& what) { bad("JSON body at byte " + std::to_string(i) + ": " + what); }
  bool eat(char c) {
    ws();
    if (i < s.size() && s[i] == c) {
      ++i;
      return true;
    }
    return false;
  }
  std::string string() {
    if (!eat('"')) fail("a string expected");
    std::string v;
    while (i < s.size() && s[i] != '"') {
      if (s[i] == '\\') fail("escapes are not taken in keys");
      if (static_cast<unsigned char>(s[i]) < 0x20) fail("a control character in a string");
      v += s[i++];
    }
    if (i == s.size()) fail("an unterminated string");
    ++i;
    return v;
  }
  void number() {
    ws();
    const size_t start = i;
    if (i < s.size() && s[i] == '-') ++i;
    if (i >= s.size() || s[i] < '0' || s[i] > '9') fail("a number expected");
    while (i < s.size() &&
           ((s[i] >= '0' && s[i] <= '9') || s[i] == '.' || s[i] == 'e' || s[i] == 'E' || s[i] == '+' || s[i] == '-'))
      ++i;
    if (i - start > 64) fail("a number of more than 64 characters");
    char buf[72];
    std::memcpy(buf, s.data() + start, i - start);
    buf[i - start] = 0;
    char* end = nullptr;
    const double v = std::strtod(buf, &end);
    if (end != buf + (i - start)) fail("a malformed number '" + std::string(buf) + "'");
    if (!std::isfinite(v) || std::fabs(v) > std::numeric_limits<float>::max())
      fail("the number " + std::string(buf) + " is not a finite float32");
    if (out.values.size() >= max_values) fail("more than " + std::to_string(max_values) + " numbers");
    out.values.push_back(float(v));
  }
  void array(size_t depth) {
    if (depth >= 8) fail("arrays nested deeper than 8");
    if (!eat('[')) fail("an array expected");
    int64_t n = 0;
    ws();
    if (i < s.size() && s[i] == ']') {
      ++i;
    } else {
      for (;;) {
        ws();
        if (i < s.size() && s[i] == '[') {
          if (leaf_depth >= 0 && int(depth) + 1 >= leaf_depth) fail("numbers and arrays mixed at one depth");
          array(depth + 1);
        } else {
          if (leaf_depth < 0) leaf_depth = int(depth) + 1;
          if (leaf_depth != int(depth) + 1) fail("the arrays are not rectangular (a number where an array was)");
          number();
        }
        ++n;
        if (eat(',')) continue;
        if (eat(']')) break;
        fail("',' or ']' expected");
      }
    }
    if (seen.size() <= depth) seen.resize(depth + 1, -1);  // an inner array closes before its outer one
    if (seen[depth] < 0) {
      seen[depth] = n;
    } else if (seen[depth] != n) {
      fail("the arrays are not rectangular (" + std::to_string(n) + " items where the first had " +
           std::to_string(seen[depth]) + ")");
    }
  }
};

}  // namespace

JsonRows parse_json_rows(std::string_view body, size_t max_values) {
  check_utf8(body, "the JSON body");
  JsonReader r{body, 0, max_values, {}, {}, -1};
  r.ws();
  if (r.i < body.size() && body[r.i] == '{') {
    ++r.i;
    bool got = false;
    if (!r.eat('}')) {
      for (;;) {
        const std::string key = r.string();
        if (!r.eat(':')) r.fail("':' expected");
        if (key != "input") r.fail("unknown key \"" + json_escape(key.substr(0, 40)) + "\" (send {\"input\": [...]})");
        if (got) r.fail("\"input\" given twice");
        r.array(0);
        got = true;
        if (r.eat(',')) continue;
        if (r.eat('}')) break;
        r.fail("',' or '}' expected");
      }
    }
    if (!got) r.fail("no \"input\" (send {\"input\": [...]})");
  } else {
    r.array(0);
  }
  r.ws();
  if (r.i != body.size()) r.fail("something after the value");
  // An empty array at the leaves' depth leaves a zero in the shape and no
  // numbers; a shape of the arrays seen is what was sent.
  r.out.shape = r.seen;
  if (checked_count(r.out.shape) != r.out.values.size()) r.fail("the arrays are not rectangular");
  return std::move(r.out);
}

namespace {
// The shortest text that reads back as the same float32 (std::to_chars);
// JSON has no NaN or infinity: null.
void append_float(std::string& out, float v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}
}  // namespace

std::string json_rows(const std::vector<int64_t>& shape, const float* data, size_t count) {
  std::string out = "{\"shape\": " + shape_json(shape) + ", \"output\": ";
  if (shape.empty()) {
    append_float(out, count ? data[0] : 0.0f);
    return out + "}";
  }
  // Strides of each depth, then one pass writing brackets where an index wraps.
  std::vector<size_t> stride(shape.size(), 1);
  for (size_t d = shape.size() - 1; d > 0; --d) stride[d - 1] = stride[d] * size_t(shape[d]);
  out.append(shape.size(), '[');
  out.reserve(out.size() + count * 12);
  for (size_t k = 0; k < count; ++k) {
    if (k > 0) {
      size_t closed = 0;
      for (size_t d = shape.size(); d-- > 0;)
        if (k % stride[d] == 0) ++closed;
      // `closed` counts the depths whose block ended (the innermost always)...
      out.append(closed - 1, ']');
      out += ", ";
      out.append(closed - 1, '[');
    }
    append_float(out, data[k]);
  }
  out.append(shape.size(), ']');
  return out + "}";
}

// ---- The query ----

std::map<std::string, std::string> parse_query(std::string_view q) {
  auto decode = [](std::string_view part) {
    std::string v;
    for (size_t i = 0; i < part.size(); ++i) {
      if (part[i] == '+') {
        v += ' ';
      } else if (part[i] == '%') {
        auto hex = [&](size_t k) -> int {
          if (k >= part.size()) return -1;
          const char c = part[k];
          return c >= '0' && c <= '9'   ? c - '0'
                 : c >= 'a' && c <= 'f' ? c - 'a' + 10
                 : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                        : -1;
        };
        const int hi = hex(i + 1), lo = hex(i + 2);
        if (hi < 0 || lo < 0) bad("a bad %-escape in the query");
        v += char(hi * 16 + lo);
        i += 2;
      } else {
        v += part[i];
      }
    }
    if (v.find('\0') != std::string::npos) bad("a NUL in the query");
    return v;
  };
  std::map<std::string, std::string> out;
  size_t at = 0;
  while (at <= q.size()) {
    size_t amp = q.find('&', at);
    if (amp == std::string_view::npos) amp = q.size();
    const std::string_view kv = q.substr(at, amp - at);
    if (!kv.empty()) {
      const size_t eq = kv.find('=');
      std::string key = decode(kv.substr(0, eq));
      std::string value = eq == std::string_view::npos ? "" : decode(kv.substr(eq + 1));
      if (out.count(key)) bad("the parameter '" + key.substr(0, 40) + "' is given twice");
      out.emplace(std::move(key), std::move(value));
    }
    at = amp + 1;
  }
  return out;
}

std::string json_escape(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20 || c >= 0x80) {  // non-ASCII escaped byte by byte: the answer stays valid JSON
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out;
}

std::string shape_json(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace gantry::serve
