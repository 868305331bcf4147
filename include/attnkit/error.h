// attnkit::Error, the one exception the library throws, and the check macro that builds its message.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace attnkit {

// Every message names the field, the value and what was expected:
// "planned: head_dim must be 64, 128 or 256, got 96".
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

namespace detail {
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
}  // namespace detail

}  // namespace attnkit

// Always-on check: throws attnkit::Error with the streamed message parts.
#define ATTNKIT_CHECK(cond, ...)                                         \
  do {                                                                   \
    if (!(cond)) throw ::attnkit::Error(::attnkit::detail::concat(__VA_ARGS__)); \
  } while (0)
