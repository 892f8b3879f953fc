// libFuzzer target: what `gantry serve` reads from a client. The bytes go
// through Beast's request parser configured as the server's (header and body
// limits), then, as the server would, the target's query and the body as
// .npy and as JSON; and each parser on the raw bytes too. Every rejection must
// be std::invalid_argument (or Beast's error code): anything else escaping,
// a crash, a leak, or an over-allocation fails. What the JSON and .npy
// parsers accept must survive a round trip through the server's encoders:
// the same shape, the same float32 values.
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "serve/parse.hpp"

namespace http = boost::beast::http;
using namespace gantry::serve;

namespace {

void body_checks(std::string_view body) {
  try {
    const Npy npy = parse_npy(body);
    const std::string again = npy_bytes(npy.shape, reinterpret_cast<const float*>(body.data() + npy.data_at), 0);
    const Npy back = parse_npy(again + std::string(body.substr(npy.data_at)));
    if (back.shape != npy.shape || back.count != npy.count) std::abort();
  } catch (const std::invalid_argument&) {
  }
  try {
    const JsonRows rows = parse_json_rows(body, 1 << 16);
    const std::string text = json_rows(rows.shape, rows.values.data(), rows.values.size());
    // json_rows wraps the array in {"shape": ..., "output": ...}: take the array back out.
    const size_t at = text.find("\"output\": ") + 10;
    const JsonRows back = parse_json_rows(std::string_view(text).substr(at, text.size() - at - 1), 1 << 16);
    if (back.values.size() != rows.values.size() ||
        std::memcmp(back.values.data(), rows.values.data(), rows.values.size() * sizeof(float)) != 0)
      std::abort();
    if (!rows.values.empty() && back.shape != rows.shape) std::abort();
  } catch (const std::invalid_argument&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  http::request_parser<http::string_body> parser;
  parser.body_limit(1 << 20);
  parser.header_limit(16 * 1024);
  boost::beast::error_code ec;
  size_t used = 0;
  while (used < size && !ec && !parser.is_done()) {
    const size_t n = parser.put(boost::asio::buffer(data + used, size - used), ec);
    if (ec == http::error::need_more) break;
    if (n == 0 && !ec) break;
    used += n;
  }
  if (parser.got_some() && !parser.is_done() && (!ec || ec == http::error::need_more)) {  // put_eof needs bytes first
    ec = {};
    parser.put_eof(ec);
  }
  if (parser.is_done() && !ec) {
    const auto& req = parser.get();
    const std::string target(req.target());
    const size_t q = target.find('?');
    try {
      parse_query(q == std::string::npos ? "" : std::string_view(target).substr(q + 1));
    } catch (const std::invalid_argument&) {
    }
    body_checks(req.body());
  }
  body_checks(bytes);
  try {
    parse_query(bytes);
  } catch (const std::invalid_argument&) {
  }
  try {
    check_utf8(bytes, "the bytes");
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
