#include "data/cifar10.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <vector>

#include "gantry/errors.hpp"

namespace gantry {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kPixels = 3 * 32 * 32;
constexpr int64_t kRecord = 1 + kPixels;

// The split's files: <prefix>.bin, then <prefix>_<n>.bin by n.
std::vector<fs::path> split_files(const fs::path& dir, const std::string& prefix) {
  std::vector<std::pair<long, fs::path>> numbered;
  const std::regex pattern(std::regex_replace(prefix, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)") +
                           R"((_([0-9]+))?\.bin)");
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (!std::regex_match(name, m, pattern) || !e.is_regular_file(ec)) continue;
    numbered.emplace_back(m[2].matched ? std::stol(m[2].str()) : -1, e.path());
  }
  std::sort(numbered.begin(), numbered.end());
  std::vector<fs::path> files;
  for (auto& [n, p] : numbered) files.push_back(std::move(p));
  return files;
}

}  // namespace

ImageDataset load_cifar10(const std::string& dir_in, const std::string& prefix) {
  fs::path dir = dir_in;
  std::error_code ec;
  if (fs::is_directory(dir / "cifar-10-batches-bin", ec)) dir /= "cifar-10-batches-bin";
  if (!fs::is_directory(dir, ec))
    throw DataError(dir_in +
                    ": data.path is not a directory (data.format cifar10: unpack "
                    "cifar-10-binary.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html and give "
                    "its cifar-10-batches-bin folder)");
  const auto files = split_files(dir, prefix);
  if (files.empty())
    throw DataError(dir.string() + ": no " + prefix + ".bin or " + prefix +
                    "_<n>.bin (data.format cifar10: "
                    "data_batch_1.bin ... for training, test_batch.bin for validation)");
  int64_t records = 0;
  for (const auto& f : files) {
    const auto bytes = static_cast<int64_t>(fs::file_size(f, ec));
    if (ec || bytes == 0 || bytes % kRecord != 0)
      throw DataError(f.string() + ": " + std::to_string(bytes) +
                      " bytes is not a whole number of CIFAR-10 "
                      "records (1 label + 3072 pixel bytes each; truncated?)");
    records += bytes / kRecord;
  }
  ImageDataset ds;
  ds.images_file = files.size() == 1 ? files[0].string() : (dir / (prefix + "_*.bin")).string();
  ds.images = torch::empty({records, 3, 32, 32}, torch::kUInt8);
  ds.labels = torch::empty({records}, torch::kInt64);
  uint8_t* px = ds.images.data_ptr<uint8_t>();
  int64_t* label = ds.labels.data_ptr<int64_t>();
  std::vector<char> record(kRecord);
  int64_t i = 0;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    for (int64_t r = 0; in.read(record.data(), kRecord); ++r, ++i) {
      const auto l = static_cast<uint8_t>(record[0]);
      if (l > 9)
        throw DataError(f.string() + ": record " + std::to_string(r) + " has label " + std::to_string(l) +
                        ", CIFAR-10's are 0..9 (CIFAR-100's files have two label bytes: not this format)");
      label[i] = l;
      std::copy(record.begin() + 1, record.end(), reinterpret_cast<char*>(px + i * kPixels));
    }
  }
  if (i != records) throw DataError(ds.images_file + ": could not read every record (a file changed while read?)");
  return ds;
}

}  // namespace gantry
