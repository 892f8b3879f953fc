#include "errors.hpp"

#include <c10/util/Exception.h>

namespace gantry {

std::string error_text(const std::exception& e) {
  if (const auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
  return e.what();
}

}  // namespace gantry
