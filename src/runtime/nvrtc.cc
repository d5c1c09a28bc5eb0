#include "runtime/nvrtc.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>

#include "runtime/dynlib.h"
#include "support/error.h"

namespace tegula::runtime {
namespace {

namespace fs = std::filesystem;

// The slice of nvrtc.h we call, declared here so the core builds without the toolkit's headers.
using Program = struct NvrtcProgramOpaque*;
struct NvrtcApi {
  DynLib lib;
  int version = 0;
  const char* (*GetErrorString)(int);
  int (*Version)(int*, int*);
  int (*CreateProgram)(Program*, const char*, const char*, int, const char* const*, const char* const*);
  int (*DestroyProgram)(Program*);
  int (*CompileProgram)(Program, int, const char* const*);
  int (*GetProgramLogSize)(Program, size_t*);
  int (*GetProgramLog)(Program, char*);
  int (*GetCUBINSize)(Program, size_t*);
  int (*GetCUBIN)(Program, char*);
  int (*GetPTXSize)(Program, size_t*);
  int (*GetPTX)(Program, char*);
};

std::mutex g_load_mutex;
std::string g_path_hint;                      // guarded by g_load_mutex
std::atomic<const NvrtcApi*> g_api{nullptr};  // published once, never freed: NVRTC lives as long as we do

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

const char* const kSonames[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};

// The sonames first, then any fully versioned file (libnvrtc.so.13.0.88) a packager left alone.
void add_library_dir(const std::string& dir, std::vector<std::string>* out) {
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(dir, ec)) return;
  for (const char* soname : kSonames) out->push_back((fs::path(dir) / soname).string());
  std::vector<std::string> versioned;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string file = entry.path().filename().string();
    if (file.rfind("libnvrtc.so.", 0) == 0 &&
        std::find(std::begin(kSonames), std::end(kSonames), file) == std::end(kSonames))
      versioned.push_back(entry.path().string());
  }
  std::sort(versioned.rbegin(), versioned.rend());
  out->insert(out->end(), versioned.begin(), versioned.end());
}

void add_hint(const std::string& hint, std::vector<std::string>* out) {
  std::error_code ec;
  if (hint.empty()) return;
  if (!fs::is_directory(hint, ec)) {
    out->push_back(hint);
    return;
  }
  for (const char* sub : {"", "lib", "lib64", "cu13/lib", "cuda_nvrtc/lib"})
    add_library_dir((fs::path(hint) / sub).string(), out);
}

std::vector<std::string> library_candidates(const std::string& hint) {
  std::vector<std::string> out;
  add_hint(env("TEGULA_NVRTC_PATH"), &out);
  add_hint(hint, &out);
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    std::string root = env(var);
    if (!root.empty()) add_library_dir(root + "/lib64", &out);
  }
  out.insert(out.end(), std::begin(kSonames), std::end(kSonames));
  add_library_dir("/usr/local/cuda/lib64", &out);
  return out;
}

std::unique_ptr<NvrtcApi> load_api(const std::string& hint) {
  auto api = std::make_unique<NvrtcApi>();
  api->lib = DynLib::open(library_candidates(hint), "NVRTC (set TEGULA_NVRTC_PATH to libnvrtc.so or its directory)");
  const DynLib& lib = api->lib;
  lib.bind(api->GetErrorString, "nvrtcGetErrorString");
  lib.bind(api->Version, "nvrtcVersion");
  lib.bind(api->CreateProgram, "nvrtcCreateProgram");
  lib.bind(api->DestroyProgram, "nvrtcDestroyProgram");
  lib.bind(api->CompileProgram, "nvrtcCompileProgram");
  lib.bind(api->GetProgramLogSize, "nvrtcGetProgramLogSize");
  lib.bind(api->GetProgramLog, "nvrtcGetProgramLog");
  lib.bind(api->GetCUBINSize, "nvrtcGetCUBINSize");
  lib.bind(api->GetCUBIN, "nvrtcGetCUBIN");
  lib.bind(api->GetPTXSize, "nvrtcGetPTXSize");
  lib.bind(api->GetPTX, "nvrtcGetPTX");
  int major = 0, minor = 0;
  if (api->Version(&major, &minor) != 0) throw CudaError("nvrtcVersion failed in " + lib.file_path());
  api->version = major * 1000 + minor * 10;
  return api;
}

const NvrtcApi& nvrtc() {
  if (const NvrtcApi* api = g_api.load(std::memory_order_acquire)) return *api;
  std::lock_guard<std::mutex> lock(g_load_mutex);
  if (const NvrtcApi* api = g_api.load(std::memory_order_relaxed)) return *api;
  const NvrtcApi* api = load_api(g_path_hint).release();
  g_api.store(api, std::memory_order_release);
  return *api;
}

bool is_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

bool has_file(const fs::path& dir, const char* file) {
  std::error_code ec;
  return fs::exists(dir / file, ec);
}

// libcu++ (<cuda/std/...>) sits in the include dir itself (CUDA 12), in include/cccl (CUDA 13), or in a
// pip package of its own (nvidia/cuda_cccl/include).
std::string find_cccl(const fs::path& root) {
  if (is_dir(root / "cuda/std")) return fs::weakly_canonical(root).string();
  for (const fs::path& dir : {root / "cccl", root.parent_path().parent_path() / "cuda_cccl/include"}) {
    if (is_dir(dir / "cuda/std")) return fs::weakly_canonical(dir).string();
  }
  return "";
}

std::vector<std::string> find_include_dirs() {
  std::vector<fs::path> roots;
  // Headers next to the NVRTC we loaded match its version; a toolkit elsewhere may not.
  if (nvrtc_available()) {
    fs::path lib_dir = fs::path(nvrtc_library_path()).parent_path();
    roots.push_back(lib_dir.parent_path() / "include");                             // toolkit, pip nvidia/cu13
    roots.push_back(lib_dir.parent_path().parent_path() / "cuda_runtime/include");  // pip cu12 layout
  }
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    std::string root = env(var);
    if (!root.empty()) roots.push_back(fs::path(root) / "include");
  }
  roots.push_back("/usr/local/cuda/include");
  roots.push_back("/usr/include");
  auto primary = std::find_if(roots.begin(), roots.end(), [](const fs::path& r) { return has_file(r, "cuda_fp16.h"); });
  if (primary == roots.end()) return {};
  std::vector<std::string> dirs = {fs::weakly_canonical(*primary).string()};
  // A pip install may lack libcu++; one from another toolkit beats none.
  for (auto it = primary; it != roots.end(); ++it) {
    std::string cccl = find_cccl(*it);
    if (cccl.empty()) continue;
    if (cccl != dirs.front()) dirs.push_back(cccl);
    break;
  }
  return dirs;
}

[[noreturn]] void fail(const NvrtcApi& api, const char* call, int rc, const std::string& name,
                       const CompileOptions& opts, const std::string& log, const std::string& source) {
  std::string msg = std::string(call) + " failed for " + name + " (" + opts.arch + "): " + api.GetErrorString(rc);
  if (!log.empty()) msg += "\n" + log;
  std::vector<int> lines = error_lines(log, name);
  if (!lines.empty()) msg += "\ngenerated source at the reported lines:";
  for (size_t i = 0; i < lines.size() && i < 8; ++i)
    msg += "\n  " + name + ":" + std::to_string(lines[i]) + " | " + line_of(source, lines[i]);
  throw CudaError(msg);
}

std::string program_log(const NvrtcApi& api, Program prog) {
  size_t size = 0;
  if (api.GetProgramLogSize(prog, &size) != 0 || size <= 1) return "";
  std::string log(size, '\0');
  if (api.GetProgramLog(prog, log.data()) != 0) return "";
  log.resize(size - 1);  // the size counts the NUL
  while (!log.empty() && (log.back() == '\n' || log.back() == '\0')) log.pop_back();
  return log;
}

}  // namespace

bool set_nvrtc_path(const std::string& file_or_dir) {
  std::lock_guard<std::mutex> lock(g_load_mutex);
  if (g_api.load(std::memory_order_relaxed)) return false;
  g_path_hint = file_or_dir;
  return true;
}

bool nvrtc_available() {
  try {
    nvrtc();
    return true;
  } catch (const CudaError&) {
    return false;
  }
}

std::string nvrtc_library_path() { return nvrtc().lib.file_path(); }

int nvrtc_version() { return nvrtc().version; }

std::vector<std::string> cuda_include_dirs() {
  static const std::vector<std::string> dirs = find_include_dirs();
  return dirs;
}

std::string cuda_include_dir() {
  std::vector<std::string> dirs = cuda_include_dirs();
  return dirs.empty() ? "" : dirs.front();
}

CompileResult compile(const std::string& source, const std::string& name, const CompileOptions& opts) {
  const NvrtcApi& api = nvrtc();
  const bool want_ptx = opts.arch.rfind("compute_", 0) == 0;

  std::vector<std::string> flags = {"-std=c++17", "--gpu-architecture=" + opts.arch};
  for (const std::string& dir : opts.include_dirs) flags.push_back("-I" + dir);
  for (const std::string& dir : cuda_include_dirs()) flags.push_back("-I" + dir);
  flags.insert(flags.end(), opts.extra_flags.begin(), opts.extra_flags.end());
  std::vector<const char*> flag_ptrs;
  for (const std::string& f : flags) flag_ptrs.push_back(f.c_str());
  std::vector<const char*> header_names, header_bodies;
  for (const auto& [header_name, body] : opts.headers) {
    header_names.push_back(header_name.c_str());
    header_bodies.push_back(body.c_str());
  }

  Program prog = nullptr;
  int rc = api.CreateProgram(&prog, source.c_str(), name.c_str(), static_cast<int>(header_names.size()),
                             header_bodies.data(), header_names.data());
  if (rc != 0) fail(api, "nvrtcCreateProgram", rc, name, opts, "", source);
  struct Destroy {  // runs on the throwing paths of fail() too
    const NvrtcApi& api;
    Program& prog;
    ~Destroy() { api.DestroyProgram(&prog); }
  } destroy{api, prog};

  CompileResult result;
  rc = api.CompileProgram(prog, static_cast<int>(flag_ptrs.size()), flag_ptrs.data());
  result.log = program_log(api, prog);
  if (rc != 0) fail(api, "nvrtcCompileProgram", rc, name, opts, result.log, source);

  size_t size = 0;
  if (want_ptx) {
    if ((rc = api.GetPTXSize(prog, &size)) != 0) fail(api, "nvrtcGetPTXSize", rc, name, opts, result.log, source);
    result.cubin.resize(size);
    if ((rc = api.GetPTX(prog, result.cubin.data())) != 0) fail(api, "nvrtcGetPTX", rc, name, opts, result.log, source);
    result.ptx.assign(result.cubin.data(), size > 0 ? size - 1 : 0);
  } else {
    if ((rc = api.GetCUBINSize(prog, &size)) != 0) fail(api, "nvrtcGetCUBINSize", rc, name, opts, result.log, source);
    result.cubin.resize(size);
    if ((rc = api.GetCUBIN(prog, result.cubin.data())) != 0)
      fail(api, "nvrtcGetCUBIN", rc, name, opts, result.log, source);
  }
  return result;
}

std::vector<int> error_lines(const std::string& log, const std::string& name) {
  std::vector<int> lines;
  size_t start = 0;
  while (start < log.size()) {
    size_t end = log.find('\n', start);
    if (end == std::string::npos) end = log.size();
    // "name(LINE): error: ..." or "name(LINE): catastrophic error: ..."
    const std::string row = log.substr(start, end - start);
    start = end + 1;
    size_t close = row.find("): ");
    if (close == std::string::npos) continue;
    size_t open = row.rfind('(', close);
    if (open == std::string::npos || open + 1 == close) continue;
    if (!name.empty() && row.compare(0, open, name) != 0) continue;
    std::string digits = row.substr(open + 1, close - open - 1);
    if (digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    std::string rest = row.substr(close + 3);
    if (rest.rfind("error", 0) != 0 && rest.rfind("catastrophic error", 0) != 0) continue;
    int line = std::stoi(digits);
    if (std::find(lines.begin(), lines.end(), line) == lines.end()) lines.push_back(line);
  }
  return lines;
}

std::string line_of(const std::string& source, int line) {
  if (line < 1) return "";
  size_t start = 0;
  for (int i = 1; i < line; ++i) {
    start = source.find('\n', start);
    if (start == std::string::npos) return "";
    ++start;
  }
  if (start > source.size()) return "";
  size_t end = source.find('\n', start);
  return source.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

}  // namespace tegula::runtime
