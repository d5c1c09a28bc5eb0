#include "runtime/nvrtc_identity.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/nvrtc.h"

namespace tegula::runtime {

namespace {

std::string chooser_env() {
  std::string out;
  for (const char* name : {"TEGULA_NVRTC_PATH", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH"}) {
    const char* v = std::getenv(name);
    out += std::string(name) + "=" + (v ? v : "") + ";";
  }
  return out;
}

bool file_stamp(const std::string& path, int64_t* size, int64_t* mtime) {
  struct stat st;
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return false;
  *size = st.st_size;
  *mtime = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return true;
}

}  // namespace

int nvrtc_version_cached(const std::string& cache_dir) {
  static int memo = -1;
  if (memo >= 0) return memo;
  if (cache_dir.empty()) return memo = nvrtc_version();
  const std::string record = cache_dir + "/nvrtc-version.json";
  const std::string env = chooser_env();
  try {
    std::ifstream in(record);
    if (in) {
      nlohmann::json j = nlohmann::json::parse(in);
      int64_t size = 0, mtime = 0;
      if (j.at("env").get<std::string>() == env && file_stamp(j.at("path").get<std::string>(), &size, &mtime) &&
          j.at("size").get<int64_t>() == size && j.at("mtime").get<int64_t>() == mtime) {
        return memo = j.at("version").get<int>();
      }
    }
  } catch (const std::exception&) {
    // A damaged record is rewritten below.
  }
  memo = nvrtc_version();
  int64_t size = 0, mtime = 0;
  std::string path = nvrtc_library_path();
  if (!file_stamp(path, &size, &mtime)) return memo;
  nlohmann::json j = {{"env", env}, {"path", path}, {"size", size}, {"mtime", mtime}, {"version", memo}};
  std::string tmp = record + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    if (!out) return memo;
    out << j.dump();
  }
  if (std::rename(tmp.c_str(), record.c_str()) != 0) std::remove(tmp.c_str());
  return memo;
}

}  // namespace tegula::runtime
