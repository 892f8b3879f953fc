#include "data/idx_dataset.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "gantry/errors.hpp"

namespace gantry {

namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// Reads up to `n` bytes; returns how many were read.
size_t read_some(gzFile f, void* dst, size_t n, const std::string& path) {
  size_t total = 0;
  auto* out = static_cast<unsigned char*>(dst);
  while (total < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - total, 1u << 30));
    const int got = gzread(f, out + total, chunk);
    if (got < 0) {
      int errnum = 0;
      const char* msg = gzerror(f, &errnum);
      throw DataError(path + ": cannot read: " + (msg ? msg : "gzip error") + " (a corrupt or truncated .gz file?)");
    }
    if (got == 0) break;
    total += static_cast<size_t>(got);
  }
  return total;
}

torch::Tensor decode_idx(const std::string& path);
torch::Tensor read_idx_shared(const std::string& path);

struct Sharing {
  std::mutex m;
  bool on = false;
  std::set<std::string> files;  // the /dev/shm files this process mapped
};
Sharing& sharing() {
  static Sharing s;
  return s;
}

}  // namespace

void share_decoded_idx_on_host(bool on) {
  const char* env = std::getenv("GANTRY_SHARE_DATA");  // 0: every rank decodes its own copy
  std::lock_guard lock(sharing().m);
  sharing().on = on && !(env && std::string(env) == "0");
}

void release_shared_idx() {
  std::lock_guard lock(sharing().m);
  for (const std::string& f : sharing().files) ::unlink(f.c_str());  // the mappings stay valid
  sharing().files.clear();
  sharing().on = false;
}

torch::Tensor read_idx(const std::string& path) {
  bool shared;
  {
    std::lock_guard lock(sharing().m);
    shared = sharing().on;
  }
  if (shared)
    if (torch::Tensor t = read_idx_shared(path); t.defined()) return t;
  return decode_idx(path);
}

namespace {

torch::Tensor decode_idx(const std::string& path) {
  if (!std::filesystem::exists(path)) throw DataError(path + ": no such file");
  GzFile f(gzopen(path.c_str(), "rb"));  // reads raw files as they are, too
  if (!f) throw DataError(path + ": cannot open");
  unsigned char magic[4];
  if (read_some(f.get(), magic, 4, path) != 4) throw DataError(path + ": too short for an IDX header");
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08 || magic[3] < 1 || magic[3] > 4) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "%02x%02x%02x%02x", magic[0], magic[1], magic[2], magic[3]);
    throw DataError(path + ": not an unsigned-byte IDX file (magic 0x" + hex + ", expected 0x00000801..0x00000804)");
  }
  const int ndim = magic[3];
  std::vector<int64_t> dims(ndim);
  size_t count = 1;
  for (int i = 0; i < ndim; ++i) {
    unsigned char b[4];
    if (read_some(f.get(), b, 4, path) != 4) throw DataError(path + ": truncated IDX header");
    dims[i] = (int64_t(b[0]) << 24) | (int64_t(b[1]) << 16) | (int64_t(b[2]) << 8) | int64_t(b[3]);
    if (dims[i] <= 0 || dims[i] > (1 << 28))
      throw DataError(path + ": IDX header has an implausible dimension " + std::to_string(dims[i]));
    count *= static_cast<size_t>(dims[i]);
    if (count > (size_t(1) << 36)) throw DataError(path + ": IDX header describes over 64 GiB");
  }
  auto data = torch::empty(dims, torch::kUInt8);
  const size_t got = read_some(f.get(), data.data_ptr<uint8_t>(), count, path);
  if (got != count)
    throw DataError(path + ": truncated: the header promises " + std::to_string(count) +
                    " bytes of data, the file has " + std::to_string(got));
  return data;
}

// ---- One decoded copy for the ranks of a host ----
//
// /dev/shm/gantry_data_<hash of the file's path, size, mtime, owner>: a
// 64-byte header ("GANTRYIDX1", the rank and dims as int64) and the bytes.
// The rank that holds the flock on <name>.lock decodes and renames the file
// into place; the others wait for it (a holder that dies drops the lock, and
// the next takes over). Every rank maps it copy-on-write: the pages are
// shared until someone writes, which nobody does. Any failure (no /dev/shm,
// no space) leaves the caller decoding its own copy.

constexpr char kMagic[] = "GANTRYIDX1";
constexpr size_t kHeader = 64;

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// The mapped file's tensor, or undefined when it is missing or not whole.
torch::Tensor map_shared(const std::string& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  struct stat st {};
  unsigned char header[kHeader] = {};
  torch::Tensor out;
  if (::fstat(fd, &st) == 0 && size_t(st.st_size) >= kHeader && ::pread(fd, header, kHeader, 0) == ssize_t(kHeader) &&
      std::memcmp(header, kMagic, sizeof kMagic) == 0) {
    int64_t ndim = 0;
    std::memcpy(&ndim, header + 16, 8);
    std::vector<int64_t> dims;
    size_t count = 1;
    for (int64_t i = 0; i < ndim && ndim <= 5; ++i) {
      int64_t d = 0;
      std::memcpy(&d, header + 24 + 8 * i, 8);
      dims.push_back(d);
      count *= size_t(std::max<int64_t>(d, 0));
    }
    if (ndim >= 1 && ndim <= 5 && size_t(st.st_size) == kHeader + count) {
      void* base = ::mmap(nullptr, size_t(st.st_size), PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
      if (base != MAP_FAILED) {
        const size_t length = size_t(st.st_size);
        out = torch::from_blob(
            static_cast<uint8_t*>(base) + kHeader, dims, [base, length](void*) { ::munmap(base, length); },
            torch::kUInt8);
      }
    }
  }
  ::close(fd);
  return out;
}

bool write_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= size_t(w);
  }
  return true;
}

torch::Tensor read_idx_shared(const std::string& path) {
  const std::string file = shared_idx_file(path), lock = file + ".lock";
  if (file.empty()) return {};
  auto mapped = [&](torch::Tensor t) {
    if (t.defined()) {
      std::lock_guard guard(sharing().m);
      sharing().files.insert(file);
    }
    return t;
  };
  // The lock is an flock on <file>.lock: the kernel drops it when its holder
  // dies, so a killed rank never leaves the others waiting.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(10);
  while (std::chrono::steady_clock::now() < give_up) {
    if (torch::Tensor t = map_shared(file); t.defined()) return mapped(t);
    const int fd = ::open(lock.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) return {};                      // no /dev/shm here: each rank its own copy
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {  // another rank decodes: wait for its file
      ::close(fd);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    struct Unlock {  // removed while held: a rank that opens it later finds the file first
      int fd;
      std::string f;
      ~Unlock() {
        ::unlink(f.c_str());
        ::close(fd);
      }
    } unlock{fd, lock};
    if (torch::Tensor t = map_shared(file); t.defined()) return mapped(t);  // written meanwhile
    // A holder killed while writing left its <file>.<pid>.tmp: nobody else writes now.
    std::error_code ec;
    const std::string prefix = std::filesystem::path(file).filename().string() + ".";
    for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(file).parent_path(), ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(prefix, 0) == 0 && name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0)
        std::filesystem::remove(e.path(), ec);
    }
    const torch::Tensor data = decode_idx(path);  // a DataError goes to the caller
    const std::string tmp = file + "." + std::to_string(::getpid()) + ".tmp";
    const int out = ::open(tmp.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
    if (out < 0) return data;
    unsigned char header[kHeader] = {};
    std::memcpy(header, kMagic, sizeof kMagic);
    const int64_t ndim = data.dim();
    std::memcpy(header + 16, &ndim, 8);
    for (int64_t i = 0; i < ndim; ++i) {
      const int64_t d = data.size(i);
      std::memcpy(header + 24 + 8 * i, &d, 8);
    }
    const bool ok = write_all(out, header, kHeader) && write_all(out, data.data_ptr(), size_t(data.numel()));
    ::close(out);
    if (!ok || ::rename(tmp.c_str(), file.c_str()) != 0) {  // no space in /dev/shm: this rank's own copy
      ::unlink(tmp.c_str());
      return data;
    }
    if (torch::Tensor t = map_shared(file); t.defined()) return mapped(t);
    return data;
  }
  return {};
}

}  // namespace

std::string shared_idx_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  std::error_code ec;
  const std::string canonical = std::filesystem::canonical(path, ec).string();
  char name[64];
  std::snprintf(name, sizeof name, "gantry_data_%016llx",
                static_cast<unsigned long long>(
                    fnv1a(canonical + ":" + std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
                          std::to_string(st.st_mtim.tv_nsec) + ":" + std::to_string(::getuid()))));
  return std::string("/dev/shm/") + name;
}

std::string find_idx_file(const std::string& dir, const std::string& stem) {
  const auto base = std::filesystem::path(dir) / stem;
  if (std::filesystem::exists(base)) return base.string();
  if (std::filesystem::exists(base.string() + ".gz")) return base.string() + ".gz";
  return "";
}

ImageDataset load_idx_images(const std::string& dir, const std::string& prefix) {
  if (!std::filesystem::is_directory(dir))
    throw DataError(dir +
                    ": data.path is not a directory (Fashion-MNIST: apt-get install "
                    "dataset-fashion-mnist, at /usr/share/datasets/fashion-mnist)");
  const std::string stem = prefix + "-images-idx3-ubyte";
  const std::string images_file = find_idx_file(dir, stem);
  if (images_file.empty()) throw DataError(dir + ": no " + stem + " or " + stem + ".gz (data.path, data.train_prefix)");
  ImageDataset ds;
  ds.images_file = images_file;
  ds.images = read_idx(images_file);
  if (ds.images.dim() == 3)
    ds.images = ds.images.unsqueeze(1);
  else if (ds.images.dim() != 4)
    throw DataError(images_file + ": expected images as N x H x W or N x C x H x W, got " +
                    std::to_string(ds.images.dim()) + " dimensions");
  const std::string labels_file = find_idx_file(dir, prefix + "-labels-idx1-ubyte");
  if (!labels_file.empty()) {
    auto labels = read_idx(labels_file);
    if (labels.dim() != 1 || labels.size(0) != ds.images.size(0))
      throw DataError(labels_file + ": " + std::to_string(labels.numel()) + " labels for " +
                      std::to_string(ds.images.size(0)) + " images in " + images_file);
    ds.labels = labels.to(torch::kInt64);
  }
  return ds;
}

}  // namespace gantry
