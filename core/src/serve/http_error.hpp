// A client's mistake (or the server's refusal): the HTTP status it is
// answered with and the message naming what was wrong.
#pragma once

#include <stdexcept>
#include <string>

namespace gantry::serve {

struct HttpError : std::runtime_error {
  HttpError(int status, const std::string& what) : std::runtime_error(what), status(status) {}
  int status;  ///< 400, 401, 404, 405, 413, 503, 504
};

}  // namespace gantry::serve
