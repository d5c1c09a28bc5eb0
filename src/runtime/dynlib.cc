#include "runtime/dynlib.h"

#include <dlfcn.h>
#include <link.h>

#include <utility>

#include "support/error.h"

namespace tegula::runtime {

DynLib DynLib::try_open(const std::vector<std::string>& candidates, std::string* why) {
  std::string reasons;
  for (const std::string& candidate : candidates) {
    if (candidate.empty()) continue;
    // RTLD_LOCAL keeps our copy's symbols from resolving someone else's references.
    void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle) {
      DynLib lib;
      lib.handle_ = handle;
      lib.name_ = candidate;
      return lib;
    }
    // dlerror's text names the file itself.
    const char* err = dlerror();
    reasons += "\n  " + (err ? std::string(err) : candidate + ": unknown dlopen failure");
  }
  if (why) *why = candidates.empty() ? std::string("\n  (no candidates)") : reasons;
  return DynLib();
}

DynLib DynLib::open(const std::vector<std::string>& candidates, const std::string& what) {
  std::string why;
  DynLib lib = try_open(candidates, &why);
  if (!lib.is_open()) throw CudaError("could not load " + what + "; tried:" + why);
  return lib;
}

DynLib::DynLib(DynLib&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), name_(std::move(other.name_)) {}

DynLib& DynLib::operator=(DynLib&& other) noexcept {
  if (this != &other) {
    if (handle_) dlclose(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    name_ = std::move(other.name_);
  }
  return *this;
}

DynLib::~DynLib() {
  if (handle_) dlclose(handle_);
}

std::string DynLib::file_path() const {
  if (!handle_) return "";
  // The loader's own record says which file a bare soname resolved to.
  struct link_map* map = nullptr;
  if (dlinfo(handle_, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && map->l_name[0]) return map->l_name;
  return name_;
}

void* DynLib::find(const char* symbol_name) const noexcept {
  if (!handle_) return nullptr;
  return dlsym(handle_, symbol_name);
}

void* DynLib::symbol(const char* symbol_name) const {
  void* addr = find(symbol_name);
  if (!addr) throw CudaError(std::string("symbol ") + symbol_name + " not found in " + name_);
  return addr;
}

}  // namespace tegula::runtime
