// A string builder with `<<`, used instead of std::ostringstream.
//
// Why: numbers inserted into a std::ostream go through the locale's num_put facet. When
// the extension is built by a newer g++ than the libstdc++ the host process loaded first
// (seen with Python 3.12 builds that bring their own), those facet lookups can crash.
// std::to_string does not touch locales.
#pragma once
#include <cstdio>
#include <string>
#include <type_traits>

namespace tegula {

class Text {
 public:
  Text& operator<<(const std::string& s) {
    s_ += s;
    return *this;
  }
  Text& operator<<(const char* s) {
    s_ += s;
    return *this;
  }
  Text& operator<<(char c) {
    s_ += c;
    return *this;
  }
  Text& operator<<(bool b) {
    s_ += b ? "true" : "false";
    return *this;
  }
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>
  Text& operator<<(T v) {
    if constexpr (std::is_floating_point_v<T>) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.9g", double(v));
      s_ += buf;
    } else {
      s_ += std::to_string(v);
    }
    return *this;
  }
  const std::string& str() const { return s_; }

 private:
  std::string s_;
};

}  // namespace tegula
