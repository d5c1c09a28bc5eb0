#include "runtime/nvrtc.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <shared_mutex>

#include "runtime/dynlib.h"
#include "runtime/hash.h"
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
  int (*GetPCHCreateStatus)(Program) = nullptr;  // NVRTC 12.8+; null before
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
  api->GetPCHCreateStatus = reinterpret_cast<int (*)(Program)>(lib.find("nvrtcGetPCHCreateStatus"));
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

namespace {

// One NVRTC compile with the given flags. rc != 0 leaves the log in result.log.
struct Attempt {
  int rc = 0;
  const char* call = "nvrtcCompileProgram";
  int pch_status = -1;  // nvrtcGetPCHCreateStatus after the compile, -1 when not asked
};

Attempt compile_once(const NvrtcApi& api, const std::string& source, const std::string& name,
                     const CompileOptions& opts, const std::vector<std::string>& flags, bool want_ptx,
                     CompileResult* result) {
  std::vector<const char*> flag_ptrs;
  for (const std::string& f : flags) flag_ptrs.push_back(f.c_str());
  std::vector<const char*> header_names, header_bodies;
  for (const auto& [header_name, body] : opts.headers) {
    header_names.push_back(header_name.c_str());
    header_bodies.push_back(body.c_str());
  }
  Attempt a;
  Program prog = nullptr;
  a.rc = api.CreateProgram(&prog, source.c_str(), name.c_str(), static_cast<int>(header_names.size()),
                           header_bodies.data(), header_names.data());
  if (a.rc != 0) {
    a.call = "nvrtcCreateProgram";
    return a;
  }
  struct Destroy {
    const NvrtcApi& api;
    Program& prog;
    ~Destroy() { api.DestroyProgram(&prog); }
  } destroy{api, prog};
  a.rc = api.CompileProgram(prog, static_cast<int>(flag_ptrs.size()), flag_ptrs.data());
  result->log = program_log(api, prog);
  if (api.GetPCHCreateStatus) a.pch_status = api.GetPCHCreateStatus(prog);
  if (a.rc != 0) return a;
  size_t size = 0;
  if (want_ptx) {
    if ((a.rc = api.GetPTXSize(prog, &size)) != 0) return a.call = "nvrtcGetPTXSize", a;
    result->cubin.resize(size);
    if ((a.rc = api.GetPTX(prog, result->cubin.data())) != 0) return a.call = "nvrtcGetPTX", a;
    result->ptx.assign(result->cubin.data(), size > 0 ? size - 1 : 0);
  } else {
    if ((a.rc = api.GetCUBINSize(prog, &size)) != 0) return a.call = "nvrtcGetCUBINSize", a;
    result->cubin.resize(size);
    if ((a.rc = api.GetCUBIN(prog, result->cubin.data())) != 0) return a.call = "nvrtcGetCUBIN", a;
  }
  return a;
}

// Precompiled headers of this process, by everything that must match for NVRTC to use one
// (the device library's text, the flags, the NVRTC version). Each is created once, by the
// second compile that could use it; see compile() in nvrtc.h.
struct PchFiles {
  std::mutex mu;
  struct Entry {
    int compiles = 0;
    bool creating = false, ready = false, failed = false;
    std::string path;
    pid_t owner = 0;  // the process that made it, and removes it
  };
  std::map<std::string, Entry> entries;
  ~PchFiles() { remove_own(); }
  void remove_own() {
    for (auto& [key, e] : entries) {
      if (!e.path.empty() && e.owner == ::getpid()) ::unlink(e.path.c_str());
    }
  }
};
PchFiles& pch_files() {
  static PchFiles files;
  return files;
}

bool starts_with_library_include(const std::string& source) {
  // Comment lines first (the generated "// Generated by Tegula for sm_90a."), then the include.
  size_t pos = 0;
  while (source.compare(pos, 2, "//") == 0) {
    pos = source.find('\n', pos);
    if (pos == std::string::npos) return false;
    ++pos;
  }
  return source.compare(pos, 26, "#include \"tegula/tegula.h\"") == 0;
}

std::string pch_key(const CompileOptions& opts, const std::vector<std::string>& flags, int version) {
  Hasher h;
  h.field("tegula pch v1").field(int64_t(version));
  for (const auto& [header_name, body] : opts.headers) h.field(header_name).field(body);
  for (const std::string& f : flags) h.field(f);
  return h.hex().substr(0, 24);
}

// "front end 120 ms, nvvm 540 ms, ptxas 330 ms" from the last rows of NVRTC's --time CSV
// ("file, phase name, metric, unit").
std::string read_phases(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::pair<std::string, std::string>> rows;
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::stringstream row(line);
    std::string cell;
    while (std::getline(row, cell, ',')) cells.push_back(cell.substr(cell.find_first_not_of(' ')));
    if (cells.size() >= 3 && cells[1] != "phase name") rows.push_back({cells[1], cells[2]});
  }
  ::unlink(path.c_str());
  std::string out;
  for (auto& [phase, ms] : rows) {
    std::string label = phase == "CUDA C++ Frontend" ? "front end" : phase == "NVVM Optimizer" ? "nvvm"
                        : phase == "PTX Translation" ? "ptxas" : phase;
    out += (out.empty() ? "" : ", ") + label + " " + ms + " ms";
  }
  return out;
}

}  // namespace

std::shared_mutex*& fork_guard_slot() {
  static std::shared_mutex* guard = new std::shared_mutex;  // never destroyed: a child replaces it
  return guard;
}

std::shared_mutex& compile_fork_guard() { return *fork_guard_slot(); }

void reset_after_fork() { fork_guard_slot() = new std::shared_mutex; }

void remove_own_pch() {
  PchFiles& files = pch_files();
  std::lock_guard<std::mutex> lock(files.mu);
  files.remove_own();
}

CompileResult compile(const std::string& source, const std::string& name, const CompileOptions& opts) {
  const NvrtcApi& api = nvrtc();
  std::shared_lock<std::shared_mutex> no_fork(compile_fork_guard());
  const bool want_ptx = opts.arch.rfind("compute_", 0) == 0;

  std::vector<std::string> flags = {"-std=c++17", "--gpu-architecture=" + opts.arch};
  for (const std::string& dir : opts.include_dirs) flags.push_back("-I" + dir);
  for (const std::string& dir : cuda_include_dirs()) flags.push_back("-I" + dir);
  flags.insert(flags.end(), opts.extra_flags.begin(), opts.extra_flags.end());
  std::vector<std::string> full = flags;  // the fallback: exactly the flags of old
  flags.push_back("-minimal");
  // One fixed file name per process, so the flags (which a PCH must match) do not vary.
  std::string time_file;
  if (opts.report_phases) {
    time_file = (fs::temp_directory_path() / ("tegula-nvrtc-time-" + std::to_string(::getpid()) + ".csv")).string();
    flags.push_back("--time=" + time_file);
  }

  // The precompiled header: use one this process made, or make one now.
  PchFiles::Entry* pch = nullptr;
  bool creating = false;
  if (!opts.pch_dir.empty() && api.GetPCHCreateStatus && api.version >= 12080 && starts_with_library_include(source)) {
    PchFiles& files = pch_files();
    std::lock_guard<std::mutex> lock(files.mu);
    pch = &files.entries[pch_key(opts, flags, api.version)];
    if (pch->ready) {
      flags.push_back("--use-pch=" + pch->path);
    } else if (!pch->failed && !pch->creating && ++pch->compiles >= 2) {
      std::error_code ec;
      fs::create_directories(opts.pch_dir, ec);
      pch->path = (fs::path(opts.pch_dir) / (pch_key(opts, flags, api.version) + "-" + std::to_string(::getpid()) +
                                             ".pch")).string();
      pch->creating = creating = true;
      pch->owner = ::getpid();
      flags.push_back("--create-pch=" + pch->path);
    } else {
      pch = nullptr;
    }
  }

  std::unique_lock<std::mutex> time_lock;
  static std::mutex time_mutex;  // the --time file is shared by the process's compiles
  if (opts.report_phases) time_lock = std::unique_lock<std::mutex>(time_mutex);

  CompileResult result;
  Attempt a = compile_once(api, source, name, opts, flags, want_ptx, &result);
  if (pch) {
    std::lock_guard<std::mutex> lock(pch_files().mu);
    if (creating) {
      pch->creating = false;
      pch->ready = a.rc == 0 && a.pch_status == 0;
      pch->failed = !pch->ready;
      result.pch = pch->ready ? "created" : "failed: status " + std::to_string(a.pch_status);
      if (pch->failed) ::unlink(pch->path.c_str());
    } else {
      result.pch = "used";
    }
  }
  if (a.rc != 0 && a.call == std::string("nvrtcCompileProgram")) {
    // -minimal or the PCH may be what failed: the plain compile decides, and reports.
    if (pch && !creating) {
      std::lock_guard<std::mutex> lock(pch_files().mu);
      pch->ready = false;
      pch->failed = true;
    }
    std::string pch_note = pch ? "failed: the compile using it failed" : result.pch;
    result = CompileResult();
    result.pch = pch_note;
    a = compile_once(api, source, name, opts, full, want_ptx, &result);
  }
  if (a.rc != 0) fail(api, a.call, a.rc, name, opts, result.log, source);
  if (opts.report_phases) result.phases = read_phases(time_file);
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
