// The runtime without a GPU: NVRTC compile-only, the kernel cache, hashing, and the driver's absence.
// On a machine with a driver the last tests load and launch a kernel instead.
#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <string>
#include <vector>

#include "runtime/cache.h"
#include "runtime/compile.h"
#include "runtime/compile_pool.h"
#include "runtime/driver.h"
#include "runtime/dynlib.h"
#include "runtime/hash.h"
#include "runtime/nvrtc.h"
#include "support/error.h"

namespace tegula::runtime {
namespace {

namespace fs = std::filesystem;

const char* kHalfKernel = R"(#include <cuda_fp16.h>
#include <cuda/std/cstdint>
extern "C" __global__ void add_one(__half* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = __hadd(x[i], __float2half(1.0f));
}
)";

bool is_elf(const std::vector<char>& image) {
  return image.size() > 4 && std::memcmp(image.data(),
                                         "\x7f"
                                         "ELF",
                                         4) == 0;
}

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "tegula_rt_XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  size_t file_count() const {
    std::error_code ec;
    if (!fs::exists(path_, ec)) return 0;
    return std::distance(fs::directory_iterator(path_), fs::directory_iterator());
  }

 private:
  std::string path_;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

TEST(Hash, KnownVectors) {
  EXPECT_EQ(hash_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hash_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hash_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Hasher().update(std::string(1000000, 'a')).hex(),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Hash, IncrementalMatchesOneShotAndFieldsAreUnambiguous) {
  std::string text(1000, 'x');
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>(i * 7);
  Hasher h;
  for (size_t i = 0; i < text.size(); i += 37) h.update(std::string_view(text).substr(i, 37));
  EXPECT_EQ(h.hex(), hash_hex(text));
  EXPECT_NE(Hasher().field("ab").field("c").hex(), Hasher().field("a").field("bc").hex());
  Hasher spent;
  spent.hex();
  EXPECT_THROW(spent.update("more"), InternalError);
}

TEST(DynLib, MissingLibraryNamesEveryCandidate) {
  try {
    DynLib::open({"libtegula_absent_a.so", "/nowhere/libtegula_absent_b.so"}, "a test library");
    FAIL() << "expected CudaError";
  } catch (const CudaError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("a test library"), std::string::npos) << msg;
    EXPECT_NE(msg.find("libtegula_absent_a.so"), std::string::npos) << msg;
    EXPECT_NE(msg.find("/nowhere/libtegula_absent_b.so"), std::string::npos) << msg;
  }
}

TEST(Nvrtc, VersionAndIncludeDir) {
  ASSERT_TRUE(nvrtc_available());
  EXPECT_GE(nvrtc_version(), 12000);
  EXPECT_EQ(nvrtc_version() % 10, 0);
  std::string inc = cuda_include_dir();
  ASSERT_FALSE(inc.empty());
  EXPECT_TRUE(fs::exists(fs::path(inc) / "cuda_fp16.h")) << inc;
  EXPECT_FALSE(nvrtc_library_path().empty());
}

TEST(Nvrtc, CompilesHalfKernelToCubinForEachArch) {
  for (const char* arch : {"sm_80", "sm_90a", "sm_100a"}) {
    CompileOptions opts;
    opts.arch = arch;
    CompileResult r = compile(kHalfKernel, "add_one.cu", opts);
    EXPECT_TRUE(is_elf(r.cubin)) << arch;
    EXPECT_TRUE(r.ptx.empty()) << arch;
  }
}

TEST(Nvrtc, ComputeArchGivesPtx) {
  CompileOptions opts;
  opts.arch = "compute_90";
  CompileResult r = compile(kHalfKernel, "add_one.cu", opts);
  EXPECT_NE(r.ptx.find(".entry add_one"), std::string::npos);
  ASSERT_FALSE(r.cubin.empty());
  EXPECT_EQ(r.cubin.back(), '\0');  // cuModuleLoadData reads PTX up to its NUL
}

TEST(Nvrtc, InMemoryHeadersFlagsAndIncludeDirs) {
  TempDir dir;
  write_file(dir.path() + "/on_disk.h", "#define ON_DISK 3\n");
  CompileOptions opts;
  opts.arch = "sm_90a";
  opts.headers = {{"tegula/scale.h", "#pragma once\n__device__ inline float scale(float v) { return v * FACTOR; }\n"}};
  opts.include_dirs = {dir.path()};
  opts.extra_flags = {"-use_fast_math", "-lineinfo", "-DFACTOR=2.0f"};
  const char* src = R"(#include <tegula/scale.h>
#include "on_disk.h"
extern "C" __global__ void k(float* x) { x[threadIdx.x] = scale(x[threadIdx.x]) + ON_DISK; }
)";
  EXPECT_TRUE(is_elf(compile(src, "k.cu", opts).cubin));
}

TEST(Nvrtc, BadSourceThrowsWithLogAndLine) {
  const std::string src = "extern \"C\" __global__ void k(float* x) {\n  x[0] = undefined_name + 1;\n}\n";
  CompileOptions opts;
  opts.arch = "sm_90a";
  try {
    compile(src, "bad_kernel.cu", opts);
    FAIL() << "expected CudaError";
  } catch (const CudaError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("nvrtcCompileProgram"), std::string::npos) << msg;
    EXPECT_NE(msg.find("NVRTC_ERROR_COMPILATION"), std::string::npos) << msg;
    EXPECT_NE(msg.find("bad_kernel.cu(2): error"), std::string::npos) << msg;
    EXPECT_NE(msg.find("undefined_name"), std::string::npos) << msg;
    EXPECT_NE(msg.find("bad_kernel.cu:2 |   x[0] = undefined_name + 1;"), std::string::npos) << msg;
  }
}

TEST(Nvrtc, BadArchThrows) {
  CompileOptions opts;
  opts.arch = "sm_7";
  EXPECT_THROW(compile(kHalfKernel, "a.cu", opts), CudaError);
}

TEST(Nvrtc, ErrorLinesAndLineOf) {
  const std::string log =
      "k.cu(12): error: identifier \"a\" is undefined\n"
      "k.cu(12): error: identifier \"b\" is undefined\n"
      "k.cu(3): warning #177-D: variable \"c\" was declared but never referenced\n"
      "tegula/x.h(40): error: expected a \";\"\n"
      "k.cu(7): catastrophic error: cannot open source file \"y.h\"\n"
      "3 errors detected in the compilation of \"k.cu\".\n";
  EXPECT_EQ(error_lines(log, "k.cu"), (std::vector<int>{12, 7}));
  EXPECT_EQ(error_lines(log), (std::vector<int>{12, 40, 7}));
  EXPECT_TRUE(error_lines("").empty());
  const std::string src = "first\nsecond\n\nfourth";
  EXPECT_EQ(line_of(src, 1), "first");
  EXPECT_EQ(line_of(src, 2), "second");
  EXPECT_EQ(line_of(src, 3), "");
  EXPECT_EQ(line_of(src, 4), "fourth");
  EXPECT_EQ(line_of(src, 5), "");
  EXPECT_EQ(line_of(src, 0), "");
}

TEST(Cache, KeyCoversEveryInput) {
  CompileOptions opts;
  opts.arch = "sm_90a";
  const std::string base = KernelCache::make_key("src", "k.cu", opts, 13000, "build1");
  EXPECT_EQ(base.size(), 64u);
  EXPECT_EQ(base, KernelCache::make_key("src", "k.cu", opts, 13000, "build1"));
  EXPECT_NE(base, KernelCache::make_key("src2", "k.cu", opts, 13000, "build1"));
  EXPECT_NE(base, KernelCache::make_key("src", "k.cu", opts, 13010, "build1"));
  EXPECT_NE(base, KernelCache::make_key("src", "k.cu", opts, 13000, "build2"));
  CompileOptions other = opts;
  other.arch = "sm_80";
  EXPECT_NE(base, KernelCache::make_key("src", "k.cu", other, 13000, "build1"));
  other = opts;
  other.extra_flags = {"-use_fast_math"};
  EXPECT_NE(base, KernelCache::make_key("src", "k.cu", other, 13000, "build1"));
  other = opts;
  other.headers = {{"h.h", "int x;"}};
  EXPECT_NE(base, KernelCache::make_key("src", "k.cu", other, 13000, "build1"));
}

TEST(Cache, RoundTripThroughDisk) {
  TempDir dir;
  const std::string cache_dir = dir.path() + "/nested/cache";  // created on demand
  const std::vector<char> image = {'\x7f', 'E', 'L', 'F', 0, 1, 2, 3};
  const std::string key = hash_hex("round trip");
  {
    KernelCache cache(cache_dir);
    EXPECT_FALSE(cache.lookup(key).has_value());
    cache.store(key, image);
    EXPECT_EQ(cache.lookup(key), image);
    EXPECT_EQ(cache.stats().memory_hits, 1u);
    EXPECT_EQ(cache.stats().misses, 1u);
    EXPECT_TRUE(fs::exists(cache.entry_path(key)));
  }
  KernelCache fresh(cache_dir);
  EXPECT_EQ(fresh.lookup(key), image);
  EXPECT_EQ(fresh.stats().disk_hits, 1u);
  EXPECT_EQ(fresh.lookup(key), image);
  EXPECT_EQ(fresh.stats().memory_hits, 1u);
  fresh.clear_memory();
  EXPECT_EQ(fresh.lookup(key), image);
  EXPECT_EQ(fresh.stats().disk_hits, 2u);
  // Only the published entry remains: no temporary files left behind.
  EXPECT_EQ(std::distance(fs::directory_iterator(cache_dir), fs::directory_iterator()), 1);
}

TEST(Cache, DamagedEntriesAreRejectedAndRebuilt) {
  TempDir dir;
  CompileOptions opts;
  opts.arch = "sm_90a";
  bool hit = true;
  std::vector<char> good;
  {
    KernelCache cache(dir.path());
    good = compile_cached(cache, kHalfKernel, "add_one.cu", opts, "build", &hit);
    EXPECT_FALSE(hit);
    ASSERT_TRUE(is_elf(good));
  }
  const std::string key = KernelCache::make_key(kHalfKernel, "add_one.cu", opts, nvrtc_version(), "build");
  const std::string path = KernelCache(dir.path()).entry_path(key);
  const std::string intact = read_file(path);
  ASSERT_GT(intact.size(), good.size());

  auto damaged = [&](const std::string& bytes, const char* what) {
    write_file(path, bytes);
    KernelCache cache(dir.path());
    EXPECT_FALSE(cache.lookup(key).has_value()) << what;
    EXPECT_EQ(cache.stats().rejected, 1u) << what;
    EXPECT_FALSE(fs::exists(path)) << what;
    bool rebuilt_hit = true;
    EXPECT_EQ(compile_cached(cache, kHalfKernel, "add_one.cu", opts, "build", &rebuilt_hit), good) << what;
    EXPECT_FALSE(rebuilt_hit) << what;
    EXPECT_EQ(read_file(path), intact) << what;
  };
  damaged(intact.substr(0, intact.size() / 2), "truncated payload");
  damaged(intact.substr(0, 20), "truncated header");
  std::string flipped = intact;
  flipped[flipped.size() - 100] ^= 0x10;
  damaged(flipped, "bit flip in the payload");
  flipped = intact;
  flipped[30] ^= 0x01;
  damaged(flipped, "bit flip in the checksum");
  damaged("", "empty file");

  KernelCache cache(dir.path());
  EXPECT_EQ(compile_cached(cache, kHalfKernel, "add_one.cu", opts, "build", &hit), good);
  EXPECT_TRUE(hit);
  EXPECT_EQ(cache.stats().disk_hits, 1u);
}

// Whatever sits at an entry's path that is not a regular file is a miss, read without ever
// blocking; the store then replaces it where rename can (a FIFO, a link) and otherwise
// leaves it (a directory), the memory cache working either way.
TEST(Cache, UnusableEntriesAreMissesNeverBlocking) {
  const std::vector<char> image = {'\x7f', 'E', 'L', 'F', 9};
  struct Case {
    const char* what;
    std::function<void(const std::string&)> make;
    bool replaced;  // a store can put a real entry in its place
  };
  const std::vector<Case> cases = {
      {"an empty directory", [](const std::string& p) { fs::create_directory(p); }, false},
      {"a directory with a file in it",
       [](const std::string& p) {
         fs::create_directory(p);
         write_file(p + "/inside", "x");
       },
       false},
      {"a FIFO", [](const std::string& p) { ASSERT_EQ(mkfifo(p.c_str(), 0644), 0); }, true},
      {"a link to a FIFO",
       [](const std::string& p) {
         ASSERT_EQ(mkfifo((p + ".fifo").c_str(), 0644), 0);
         fs::create_symlink(p + ".fifo", p);
       },
       true},
      {"a link to a device", [](const std::string& p) { fs::create_symlink("/dev/zero", p); }, true},
      {"a dangling link", [](const std::string& p) { fs::create_symlink(p + ".nowhere", p); }, true},
  };
  for (const Case& c : cases) {
    TempDir dir;
    const std::string key = hash_hex(c.what);
    const std::string path = KernelCache(dir.path()).entry_path(key);
    c.make(path);
    KernelCache cache(dir.path());
    auto looked_up = std::async(std::launch::async, [&] { return cache.lookup(key); });
    if (looked_up.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
      int fd = ::open(path.c_str(), O_RDWR | O_NONBLOCK);  // releases a reader stuck in open()
      looked_up.wait();
      if (fd >= 0) ::close(fd);
      FAIL() << c.what << ": the lookup blocked";
    }
    EXPECT_FALSE(looked_up.get().has_value()) << c.what;
    EXPECT_EQ(cache.stats().misses, 1u) << c.what;
    EXPECT_EQ(cache.stats().rejected, 0u) << c.what;
    cache.store(key, image);
    EXPECT_EQ(cache.lookup(key), image) << c.what;
    EXPECT_TRUE(cache.disk_enabled()) << c.what;
    KernelCache fresh(dir.path());
    auto again = fresh.lookup(key);
    if (c.replaced) {
      EXPECT_EQ(again, image) << c.what;
      EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(path))) << c.what;
    } else {
      EXPECT_FALSE(again.has_value()) << c.what;
      EXPECT_TRUE(fs::is_directory(path)) << c.what;
    }
    // No temporary file is left behind by a store that could not publish.
    for (auto& e : fs::directory_iterator(dir.path())) {
      EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << c.what << ": " << e.path();
    }
  }
}

TEST(Cache, DisabledDiskWritesNothing) {
  TempDir dir;
  const std::string key = hash_hex("disabled");
  KernelCache cache(dir.path());
  cache.set_disk_enabled(false);
  cache.store(key, {'a', 'b'});
  EXPECT_EQ(cache.lookup(key), (std::vector<char>{'a', 'b'}));
  EXPECT_EQ(dir.file_count(), 0u);

  setenv("TEGULA_DISABLE_CACHE", "1", 1);
  KernelCache from_env(dir.path());
  unsetenv("TEGULA_DISABLE_CACHE");
  EXPECT_FALSE(from_env.disk_enabled());
  from_env.store(key, {'c'});
  EXPECT_EQ(dir.file_count(), 0u);

  KernelCache memory_only("");
  memory_only.store(key, {'d'});
  EXPECT_EQ(memory_only.lookup(key), (std::vector<char>{'d'}));
}

TEST(Cache, UncreatableDirectoryFallsBackToMemory) {
  TempDir dir;
  write_file(dir.path() + "/a_file", "x");
  KernelCache cache(dir.path() + "/a_file/cache");  // a directory can't live under a file
  cache.store("k", {'z'});
  EXPECT_EQ(cache.lookup("k"), (std::vector<char>{'z'}));
  EXPECT_FALSE(cache.disk_enabled());
}

TEST(Cache, DefaultDirFollowsEnvironment) {
  setenv("TEGULA_CACHE_DIR", "/tmp/tegula_env_dir", 1);
  EXPECT_EQ(KernelCache::default_dir(), "/tmp/tegula_env_dir");
  unsetenv("TEGULA_CACHE_DIR");
  EXPECT_FALSE(KernelCache::default_dir().empty());
}

TEST(Cache, UnsafeKeysStayInsideTheDirectory) {
  TempDir dir;
  KernelCache cache(dir.path());
  const std::string key = "../../escape/attempt";
  EXPECT_EQ(fs::path(cache.entry_path(key)).parent_path(), fs::path(dir.path()));
  cache.store(key, {'q'});
  EXPECT_EQ(KernelCache(dir.path()).lookup(key), (std::vector<char>{'q'}));
}

TEST(Driver, AbsentDriverIsReportedNotThrown) {
  if (driver_available()) GTEST_SKIP() << "a CUDA driver is present";
  EXPECT_NO_THROW(driver_available());
  EXPECT_FALSE(driver_available());
  EXPECT_THROW(device_count(), CudaError);
  try {
    Module module(std::vector<char>{'x'}, 0);
    FAIL() << "expected CudaError";
  } catch (const CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("libcuda"), std::string::npos) << e.what();
  }
  Function empty;
  EXPECT_FALSE(empty.valid());
  EXPECT_THROW(empty.launch({1, 1, 1}, {1, 1, 1}, 0, nullptr, nullptr), CudaError);
}

// Device memory for the launch test, from libcuda directly: the runtime has no allocator (torch owns memory).
struct TestMemory {
  using Alloc = int (*)(unsigned long long*, size_t);
  using Free = int (*)(unsigned long long);
  using CopyDtoH = int (*)(void*, unsigned long long, size_t);
  using Sync = int (*)();
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  Alloc alloc = reinterpret_cast<Alloc>(dlsym(lib, "cuMemAlloc_v2"));
  Free free = reinterpret_cast<Free>(dlsym(lib, "cuMemFree_v2"));
  CopyDtoH copy = reinterpret_cast<CopyDtoH>(dlsym(lib, "cuMemcpyDtoH_v2"));
  Sync sync = reinterpret_cast<Sync>(dlsym(lib, "cuCtxSynchronize"));
};

TEST(Driver, DeviceFactsAndLaunch) {
  if (!driver_available()) GTEST_SKIP() << "no CUDA driver";
  const int cc = device_compute_capability(0);
  const std::string arch = device_arch(0);
  EXPECT_EQ(arch.rfind("sm_" + std::to_string(cc), 0), 0u) << arch;
  if (cc == 90) {
    EXPECT_EQ(arch, "sm_90a");
  }
  EXPECT_GT(device_sm_count(0), 0);
  EXPECT_GE(device_max_smem_optin(0), 48 * 1024);
  EXPECT_FALSE(device_name(0).empty());
  EXPECT_GE(driver_version(), 12000);

  // 64 KB of dynamic shared memory: over the default cap, so the opt-in at load must have happened.
  const char* src = R"(extern "C" __global__ void fill(float* out, int n, float v) {
  extern __shared__ float buf[];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  buf[16000 + threadIdx.x] = v + i;
  __syncthreads();
  if (i < n) out[i] = buf[16000 + threadIdx.x];
}
)";
  CompileOptions opts;
  opts.arch = arch;
  const std::vector<char> cubin = compile(src, "fill.cu", opts).cubin;
  Module module(cubin, 0);
  const int smem = 64 * 1024;
  Function fn = module.function("fill", smem);
  TestMemory mem;
  ASSERT_TRUE(mem.alloc && mem.copy && mem.free && mem.sync);
  const unsigned blocks = 4;
  int n = 1000;
  float v = 0.5f;
  unsigned long long out = 0;
  ASSERT_EQ(mem.alloc(&out, n * sizeof(float)), 0);
  void* args[] = {&out, &n, &v};
  fn.launch({blocks, 1, 1}, {256, 1, 1}, smem, nullptr, args);
  ASSERT_EQ(mem.sync(), 0);
  std::vector<float> host(n);
  ASSERT_EQ(mem.copy(host.data(), out, n * sizeof(float)), 0);
  mem.free(out);
  for (int i = 0; i < n; ++i) ASSERT_EQ(host[i], v + i) << i;

  // Without the opt-in the same launch must fail, and say which call and why. The limit is a property
  // of the loaded function, so this needs a module of its own.
  Module uncapped(cubin, 0);
  Function capped = uncapped.function("fill");
  try {
    capped.launch({1, 1, 1}, {256, 1, 1}, smem, nullptr, args);
    FAIL() << "expected CudaError";
  } catch (const CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("cuLaunchKernel"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("CUDA_ERROR_"), std::string::npos) << e.what();
  }
  EXPECT_THROW(module.function("no_such_kernel"), CudaError);

  // PTX loads through the same path (the driver JIT-compiles it).
  opts.arch = "compute_" + std::to_string(cc);
  Module from_ptx(compile(src, "fill.cu", opts).cubin, 0);
  EXPECT_TRUE(from_ptx.function("fill").valid());

  // A cubin for another architecture is refused with a hint.
  opts.arch = cc == 90 ? "sm_100a" : "sm_90a";
  try {
    Module wrong(compile(src, "fill.cu", opts).cubin, 0);
    FAIL() << "expected CudaError";
  } catch (const CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("cuModuleLoadData"), std::string::npos) << e.what();
  }
}

// compile_in_processes: forked workers give what a compile here gives, per job, errors as
// text; one worker or one job compiles here; an interruption kills and reaps the workers.
TEST(CompilePool, WorkersGiveWhatACompileHereGives) {
  CompileOptions opts;
  opts.arch = "sm_90a";
  std::vector<PoolJob> jobs;
  for (const char* name : {"add_one", "add_two", "add_three"}) {
    std::string src = kHalfKernel;
    src.replace(src.find("add_one"), 7, name);
    jobs.push_back({src, std::string(name) + ".cu", opts});
  }
  jobs.insert(jobs.begin() + 1, PoolJob{"extern \"C\" __global__ void k(float* x) { x[0] = undefined_name; }\n",
                                        "bad.cu", opts});
  for (int workers : {3, 1}) {
    std::vector<PoolResult> results = compile_in_processes(jobs, workers);
    ASSERT_EQ(results.size(), jobs.size());
    EXPECT_FALSE(results[1].ok);
    EXPECT_NE(results[1].error.find("undefined_name"), std::string::npos) << results[1].error;
    for (size_t i : {0, 2, 3}) {
      ASSERT_TRUE(results[i].ok) << workers << " " << results[i].error;
      EXPECT_EQ(results[i].image, compile(jobs[i].source, jobs[i].name, opts).cubin) << workers << " job " << i;
    }
  }
  EXPECT_TRUE(compile_in_processes({}, 4).empty());
  EXPECT_THROW(compile_in_processes(jobs, 2, [] { return true; }), PoolInterrupted);
  EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1);  // no worker left behind
}

}  // namespace
}  // namespace tegula::runtime
