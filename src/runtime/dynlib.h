// A shared library opened with dlopen, so the core never links NVRTC or libcuda: the module
// imports, and compiles for any target, on a machine that has neither a driver nor a toolkit.
#pragma once
#include <string>
#include <vector>

namespace tegula::runtime {

class DynLib {
 public:
  // Opens the first candidate that loads (a bare soname goes through the loader's search path,
  // a path is taken as is). Throws CudaError naming `what`, every candidate and why each failed.
  static DynLib open(const std::vector<std::string>& candidates, const std::string& what);
  // Same, but returns an unopened DynLib instead of throwing; `why` receives the reasons.
  static DynLib try_open(const std::vector<std::string>& candidates, std::string* why = nullptr);

  DynLib() = default;
  DynLib(DynLib&& other) noexcept;
  DynLib& operator=(DynLib&& other) noexcept;
  DynLib(const DynLib&) = delete;
  DynLib& operator=(const DynLib&) = delete;
  ~DynLib();

  bool is_open() const { return handle_ != nullptr; }
  // The candidate that loaded, and the file the loader actually mapped (resolved through dladdr).
  const std::string& name() const { return name_; }
  std::string file_path() const;

  // nullptr when absent.
  void* find(const char* symbol) const noexcept;
  // Throws CudaError naming the symbol and the library.
  void* symbol(const char* symbol) const;

  template <typename Fn>
  void bind(Fn*& out, const char* symbol_name) const {
    out = reinterpret_cast<Fn*>(symbol(symbol_name));
  }

 private:
  void* handle_ = nullptr;
  std::string name_;
};

}  // namespace tegula::runtime
