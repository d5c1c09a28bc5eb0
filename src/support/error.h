// Two families of errors.
//
//  * UserError: the kernel author's mistake. Carries the DSL location (file:line:col)
//    so the Python side can print the offending line with a caret.
//      user_error(loc) << "T.copy: shapes " << a << " and " << b << " differ";
//  * InternalError: ours. Carries the C++ file and line.
//      internal_assert(x > 0) << "x was " << x;
//
// Both are ordinary C++ exceptions; the bindings translate them into Python
// exceptions, so the interpreter never crashes on either.
#pragma once
#include <stdexcept>
#include <string>
#include <type_traits>

#include "support/text.h"

namespace tegula {

// A place in the user's Python source. line == 0 means "unknown".
struct SourceLoc {
  std::string file;
  int line = 0;
  int col = 0;
  bool known() const { return line > 0; }
  std::string str() const {
    return known() ? file + ":" + std::to_string(line) + ":" + std::to_string(col) : "<unknown>";
  }
};

class UserError : public std::runtime_error {
 public:
  UserError(const std::string& msg, SourceLoc loc) : std::runtime_error(msg), loc_(std::move(loc)) {}
  const SourceLoc& loc() const { return loc_; }

 private:
  SourceLoc loc_;
};

class InternalError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// CUDA driver / NVRTC failures: the API call, its error string and (for NVRTC) the log.
class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

// Collects a message with operator<< and throws from its destructor.
template <typename E>
class ErrorStream {
 public:
  explicit ErrorStream(SourceLoc loc) : loc_(std::move(loc)) {}
  ErrorStream(const char* file, int line) { os_ << "internal error at " << file << ":" << line << ": "; }
  ErrorStream(const ErrorStream&) = delete;
  template <typename T>
  ErrorStream& operator<<(const T& v) {
    os_ << v;
    return *this;
  }
  [[noreturn]] ~ErrorStream() noexcept(false) {
    if constexpr (std::is_same_v<E, UserError>) {
      throw UserError(os_.str(), loc_);
    } else {
      throw E(os_.str());
    }
  }

 private:
  Text os_;
  SourceLoc loc_;
};

}  // namespace detail
}  // namespace tegula

#define user_error(loc) ::tegula::detail::ErrorStream<::tegula::UserError>(loc)
#define internal_error ::tegula::detail::ErrorStream<::tegula::InternalError>(__FILE__, __LINE__)
#define internal_assert(cond) \
  if (cond) {                 \
  } else                      \
    internal_error << "assertion '" #cond "' failed: "
#define user_assert(cond, loc) \
  if (cond) {                  \
  } else                       \
    user_error(loc)
