// The IDX reader, PNG codec, image grid and data loader; data.format cifar10
// (CIFAR-10's binary batches) and image_folder (PNG/JPEG in class folders).
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <thread>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "data/data_loader.hpp"
#include "data/image_dataset.hpp"
#include "gantry/errors.hpp"
#include "data/idx_dataset.hpp"
#include "data/image_grid.hpp"
#include "io/png.hpp"
#include "support.hpp"

using namespace gantry;
using gantry::test::idx_bytes;
using gantry::test::TempDir;
using gantry::test::write_text;

namespace {

std::string data_error(const std::string& path) {
  try {
    read_idx(path);
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

void write_gz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

}  // namespace

TEST(Idx, ReadsRawAndGzip) {
  TempDir dir;
  std::string pixels;
  for (int i = 0; i < 2 * 3 * 4; ++i) pixels.push_back(static_cast<char>(i * 10));
  write_text(dir / "raw", idx_bytes({2, 3, 4}, pixels));
  write_gz(dir / "z.gz", idx_bytes({2, 3, 4}, pixels));
  for (const auto& name : {"raw", "z.gz"}) {
    const auto t = read_idx(dir / name);
    EXPECT_EQ(t.sizes(), (std::vector<int64_t>{2, 3, 4}));
    EXPECT_EQ(t[1][2][3].item<int>(), 230);
  }
}

// The ranks of a host decode an IDX file once: the first read (sharing on)
// writes /dev/shm/gantry_data_<...>, a later read maps that file instead of
// decoding (a byte changed in the file shows in the second tensor, which a
// fresh decode would not have), release removes the file and the tensors
// stay readable; a dead rank's lock is taken over and its half-written
// file removed; with
// sharing off nothing is written.
TEST(Idx, RanksOfAHostMapOneDecodedCopy) {
  TempDir dir;
  std::string pixels;
  for (int i = 0; i < 3 * 5 * 7; ++i) pixels.push_back(static_cast<char>(i));
  write_gz(dir / "shared.gz", idx_bytes({3, 5, 7}, pixels));
  const std::string path = dir / "shared.gz";
  const std::string file = shared_idx_file(path);
  ASSERT_EQ(file.rfind("/dev/shm/gantry_data_", 0), 0u) << file;
  ::unlink(file.c_str());

  share_decoded_idx_on_host(false);
  const torch::Tensor own = read_idx(path);
  EXPECT_FALSE(std::filesystem::exists(file));

  share_decoded_idx_on_host(true);
  const torch::Tensor first = read_idx(path);
  ASSERT_TRUE(std::filesystem::exists(file));
  EXPECT_TRUE(torch::equal(first, own));
  {  // another rank's read maps the file: change one byte of it and read again
    std::FILE* f = std::fopen(file.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, 64 + 2 * 35 + 6, SEEK_SET);  // the header, then [2][0][6]
    std::fputc(250, f);
    std::fclose(f);
  }
  const torch::Tensor second = read_idx(path);
  EXPECT_EQ(second[2][0][6].item<int>(), 250);  // mapped, not decoded again (the source says 76)
  release_shared_idx();
  EXPECT_FALSE(std::filesystem::exists(file));
  EXPECT_EQ(second.sum().item<int64_t>(), own.sum().item<int64_t>() - 76 + 250);  // still mapped, still readable

  // A lock held by a rank that died while decoding (here: a child process
  // that takes it and is killed) is the next reader's at once.
  share_decoded_idx_on_host(true);
  const pid_t holder = ::fork();
  if (holder == 0) {
    const int fd = ::open((file + ".lock").c_str(), O_CREAT | O_RDWR, 0600);
    ::flock(fd, LOCK_EX);
    std::FILE* half = std::fopen((file + "." + std::to_string(::getpid()) + ".tmp").c_str(), "wb");
    std::fputs("GANTRYIDX1", half);
    std::fclose(half);
    ::pause();
    ::_exit(0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  const auto started = std::chrono::steady_clock::now();
  EXPECT_TRUE(torch::equal(read_idx(path), own));
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
  EXPECT_TRUE(std::filesystem::exists(file));
  EXPECT_FALSE(std::filesystem::exists(file + ".lock"));
  EXPECT_FALSE(std::filesystem::exists(file + "." + std::to_string(holder) + ".tmp"));
  release_shared_idx();
  EXPECT_FALSE(std::filesystem::exists(file));
}

TEST(Idx, RealFashionMnist) {
  const auto ds = load_idx_images(gantry::test::fashion_mnist_dir(), "train");
  EXPECT_EQ(ds.images.sizes(), (std::vector<int64_t>{60000, 1, 28, 28}));
  ASSERT_TRUE(ds.labels.defined());
  EXPECT_EQ(ds.labels.max().item<int64_t>(), 9);
}

TEST(Idx, TruncatedFileNamesFileAndSizes) {
  TempDir dir;
  write_text(dir / "short", idx_bytes({10, 28, 28}, std::string(100, 'x')));
  const auto msg = data_error(dir / "short");
  EXPECT_NE(msg.find(dir / "short"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated: the header promises 7840 bytes of data, the file has 100"), std::string::npos) << msg;
}

TEST(Idx, TruncatedGzipIsAnError) {
  TempDir dir;
  write_gz(dir / "full.gz", idx_bytes({100, 28, 28}, std::string(78400, 'x')));
  std::string bytes = gantry::test::read_text(dir / "full.gz");
  write_text(dir / "cut.gz", bytes.substr(0, bytes.size() / 2));
  EXPECT_FALSE(data_error(dir / "cut.gz").empty());
}

TEST(Idx, WrongMagic) {
  TempDir dir;
  write_text(dir / "bad", std::string("\x00\x00\x0d\x03", 4) + std::string(100, '\0'));
  const auto msg = data_error(dir / "bad");
  EXPECT_NE(msg.find("not an unsigned-byte IDX file (magic 0x00000d03"), std::string::npos) << msg;
  write_text(dir / "text", "hello, world, this is not IDX");
  EXPECT_NE(data_error(dir / "text").find("magic"), std::string::npos);
}

TEST(Idx, MissingFileAndFolder) {
  EXPECT_NE(data_error("/nonexistent/x-images-idx3-ubyte").find("no such file"), std::string::npos);
  try {
    load_idx_images("/nonexistent", "train");
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent: data.path is not a directory"), std::string::npos);
  }
}

TEST(Png, RoundTrip) {
  Image8 img;
  img.width = 5;
  img.height = 3;
  img.channels = 3;
  for (int i = 0; i < 45; ++i) img.pixels.push_back(static_cast<uint8_t>(i * 5));
  const Image8 back = decode_png(encode_png(img));
  EXPECT_EQ(back.width, 5);
  EXPECT_EQ(back.height, 3);
  EXPECT_EQ(back.channels, 3);
  EXPECT_EQ(back.pixels, img.pixels);
  std::string broken = encode_png(img);
  broken[40] ^= 1;
  EXPECT_THROW(decode_png(broken), std::runtime_error);
}

TEST(ImageGrid, LayoutAndScaling) {
  // 10 images of 2x3, value = image index scaled into [-1, 1]
  auto images = torch::empty({10, 1, 2, 3});
  for (int i = 0; i < 10; ++i) images[i].fill_(-1.0 + 2.0 * i / 9.0);
  const Image8 g = make_grid(images, 8, 2);
  EXPECT_EQ(g.width, 8 * (3 + 2) + 2);
  EXPECT_EQ(g.height, 2 * (2 + 2) + 2);
  auto at = [&](int y, int x) { return int(g.pixels[y * g.width + x]); };
  EXPECT_EQ(at(0, 0), 0);            // padding
  EXPECT_EQ(at(2, 2), 0);            // image 0: -1 -> 0
  EXPECT_EQ(at(2 + 4, 2 + 5), 255);  // image 9 (row 1, col 1): 1 -> 255
  EXPECT_EQ(at(2, 2 + 5 * 7), 198);  // image 7: -1 + 14/9 -> 198
}

namespace {

// The runner's images as the loader's one kind of data, scaled to [-1, 1].
std::shared_ptr<const Dataset> as_dataset(const ImageDataset& d) {
  return std::make_shared<ImageTensorDataset>(d, -1.0, 1.0);
}

}  // namespace

// Images are a Dataset like a plugin's: get() and the default stacking of
// get_batch agree with the loader's gather, scaled to the plugin's range.
TEST(DataLoader, ImagesAreADatasetLikeAPlugins) {
  ImageDataset ds;
  ds.images = torch::arange(2 * 3 * 4, torch::kUInt8).view({4, 1, 2, 3}) * 10;
  ds.labels = torch::tensor({3, 1, 4, 1}, torch::kInt64);
  const ImageTensorDataset images(ds, 0.0, 1.0);
  EXPECT_EQ(images.size(), 4);
  const Batch one = images.get(2);
  EXPECT_EQ(one.input.sizes(), torch::IntArrayRef({1, 2, 3}));
  EXPECT_EQ(one.target.item<int64_t>(), 4);
  EXPECT_TRUE(torch::allclose(one.input, ds.images[2].to(torch::kFloat32) / 255.0));
  const Batch two = images.get_batch({3, 0});
  const Batch stacked = images.Dataset::get_batch({3, 0});  // the SDK's default: get() stacked
  EXPECT_TRUE(torch::equal(two.input, stacked.input));
  EXPECT_TRUE(torch::equal(two.target, stacked.target));
  // Through the loader: the same batches as the dataset gives.
  LoaderOptions o;
  o.batch_size = 4;
  o.shuffle = false;
  DataLoader loader(std::make_shared<ImageTensorDataset>(ds, 0.0, 1.0), o);
  loader.start_epoch(0);
  const auto b = loader.next();
  ASSERT_TRUE(b.has_value());
  EXPECT_TRUE(torch::equal(b->input, images.get_batch({0, 1, 2, 3}).input));
  EXPECT_TRUE(torch::equal(b->target, ds.labels));
}

TEST(DataLoader, EpochCoversEveryIndexOnceInASeededOrder) {
  ImageDataset ds;
  ds.images = torch::arange(100, torch::kUInt8).view({100, 1, 1, 1});
  LoaderOptions o;
  o.batch_size = 16;
  o.seed = 7;
  DataLoader a(as_dataset(ds), o), b(as_dataset(ds), o);
  EXPECT_EQ(a.batches_per_epoch(), 7);
  EXPECT_TRUE(torch::equal(a.indices(3), b.indices(3)));
  EXPECT_FALSE(torch::equal(a.indices(3), a.indices(4)));
  a.start_epoch(0);
  std::vector<int> seen;
  while (auto batch = a.next())
    for (int64_t i = 0; i < batch->input.size(0); ++i)
      seen.push_back(static_cast<int>(std::lround((batch->input[i].item<float>() + 1) * 127.5)));
  std::sort(seen.begin(), seen.end());
  ASSERT_EQ(seen.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(seen[i], i);
}

TEST(DataLoader, ResumeMidEpochContinuesTheSameOrder) {
  ImageDataset ds;
  ds.images = torch::arange(64, torch::kUInt8).view({64, 1, 1, 1});
  LoaderOptions o;
  o.batch_size = 8;
  DataLoader full(as_dataset(ds), o), resumed(as_dataset(ds), o);
  full.start_epoch(2);
  resumed.start_epoch(2, 5);
  std::vector<torch::Tensor> a, b;
  while (auto x = full.next()) a.push_back(x->input);
  while (auto x = resumed.next()) b.push_back(x->input);
  ASSERT_EQ(a.size(), 8u);
  ASSERT_EQ(b.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(torch::equal(a[5 + i], b[i]));
}

// A resume at another world size or batch (data.keep_batch, trainer's
// kEpochFromKey): k steps of W ranks x B trained the permutation's first
// k x W x B samples; the rest of the epoch from there, sharded over W' ranks
// with batches of B', holds every other sample once (plus the padding to a
// multiple of W', taken from the permutation's start as DistributedSampler
// pads). From k x W x B at the same W it is exactly a skip of k batches.
TEST(DataLoader, TheRestOfAnEpochFromASampleIsEverySampleNotTrainedYet) {
  ImageDataset ds;
  ds.images = torch::zeros({1000, 1, 1, 1}, torch::kUInt8);
  LoaderOptions o;
  o.seed = 11;
  auto shard = [&](int world, int rank, int64_t batch, int64_t from, int64_t skip = 0) {
    LoaderOptions x = o;
    x.world_size = world;
    x.rank = rank;
    x.batch_size = batch;
    DataLoader l(as_dataset(ds), x);
    const auto idx = l.indices(3, from);
    EXPECT_EQ(idx.numel(), l.samples_per_rank(from));
    const int64_t first = std::min(skip * batch, idx.numel());
    return std::vector<int64_t>(idx.data_ptr<int64_t>() + first, idx.data_ptr<int64_t>() + idx.numel());
  };
  // 4 ranks x 16 trained 5 batches each: 320 samples.
  std::vector<int64_t> before;
  for (int r = 0; r < 4; ++r) {
    const auto all = shard(4, r, 16, 0);
    before.insert(before.end(), all.begin(), all.begin() + 5 * 16);
  }
  const DataLoader whole(as_dataset(ds), o);
  const auto perm = whole.indices(3);
  std::vector<int64_t> prefix(perm.data_ptr<int64_t>(), perm.data_ptr<int64_t>() + 320);
  std::sort(before.begin(), before.end());
  std::sort(prefix.begin(), prefix.end());
  EXPECT_EQ(before, prefix) << "the trained samples are the permutation's first 320";
  for (const auto& [world, batch] : std::vector<std::pair<int, int64_t>>{{2, 32}, {3, 16}, {7, 5}, {1, 64}}) {
    std::vector<int64_t> after;
    for (int r = 0; r < world; ++r) {
      const auto rest = shard(world, r, batch, 320);
      EXPECT_EQ(rest.size(), size_t((680 + world - 1) / world)) << world;
      after.insert(after.end(), rest.begin(), rest.end());
    }
    std::vector<int> count(1000, 0);
    for (int64_t i : before) ++count[i];
    for (int64_t i : after) ++count[i];
    const int64_t pad = int64_t(after.size()) - 680;
    EXPECT_EQ(pad, (world - 680 % world) % world);
    for (int i = 0; i < 1000; ++i) {
      const bool padded =
          std::find(perm.data_ptr<int64_t>(), perm.data_ptr<int64_t>() + pad, i) != perm.data_ptr<int64_t>() + pad;
      EXPECT_EQ(count[i], padded ? 2 : 1) << "sample " << i << " at " << world << " ranks x " << batch;
    }
  }
  // The same world and batch: from sample k x W x B is the skip of k batches.
  for (int r = 0; r < 4; ++r) EXPECT_EQ(shard(4, r, 16, 320), shard(4, r, 16, 0, 5)) << "rank " << r;
  // drop_last: the rest is cut to a multiple of the ranks, never padded.
  o.drop_last = true;
  EXPECT_EQ(shard(3, 0, 8, 320).size(), 680u / 3);
  // Past the epoch's end (a checkpoint in its padding): nothing is left.
  o.drop_last = false;
  EXPECT_TRUE(shard(3, 1, 8, 1000).empty());
}

TEST(DataLoader, RanksGetDisjointPaddedShards) {
  ImageDataset ds;
  ds.images = torch::zeros({10, 1, 1, 1}, torch::kUInt8);
  LoaderOptions o;
  o.world_size = 3;
  std::vector<int64_t> all;
  for (int r = 0; r < 3; ++r) {
    o.rank = r;
    DataLoader l(as_dataset(ds), o);
    EXPECT_EQ(l.samples_per_rank(), 4);
    auto idx = l.indices(0);
    all.insert(all.end(), idx.data_ptr<int64_t>(), idx.data_ptr<int64_t>() + idx.numel());
  }
  std::sort(all.begin(), all.end());
  // 12 slots: all 10 samples, 2 of them twice (padding)
  EXPECT_EQ(std::unique(all.begin(), all.end()) - all.begin(), 10);
}

// ---- data.format cifar10 and image_folder --------------------------------

#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wunused-function"
#include <stb/stb_image_write.h>
#pragma GCC diagnostic pop

#include "config/config.hpp"
#include "data/cifar10.hpp"
#include "data/image_folder.hpp"
#include "data/load_images.hpp"

namespace {

// `n` CIFAR-10 records; record k (counting from `first`) has label k % 10 and
// pixel byte j = (j + k) % 256 (channel-major: 1024 red, 1024 green, 1024 blue).
std::string cifar_records(int first, int n) {
  std::string b;
  for (int k = first; k < first + n; ++k) {
    b.push_back(static_cast<char>(k % 10));
    for (int j = 0; j < 3072; ++j) b.push_back(static_cast<char>((j + k) % 256));
  }
  return b;
}

Image8 solid(int w, int h, std::vector<uint8_t> rgb_or_gray) {
  Image8 img;
  img.width = w;
  img.height = h;
  img.channels = int(rgb_or_gray.size());
  for (int i = 0; i < w * h; ++i) img.pixels.insert(img.pixels.end(), rgb_or_gray.begin(), rgb_or_gray.end());
  return img;
}

void write_png(const std::string& path, const Image8& img) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  write_text(path, encode_png(img));
}

std::string load_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Cifar10, ReadsTheOfficialLayoutInFileNumberOrder) {
  TempDir dir;
  const std::string bin = dir / "cifar-10-batches-bin";
  std::filesystem::create_directories(bin);
  write_text(bin + "/data_batch_1.bin", cifar_records(0, 3));
  write_text(bin + "/data_batch_2.bin", cifar_records(3, 2));
  write_text(bin + "/data_batch_10.bin", cifar_records(5, 1));  // after _2: numbers, not text order
  write_text(bin + "/test_batch.bin", cifar_records(100, 2));
  write_text(bin + "/batches.meta.txt", "airplane\n");
  // The config's defaults for this format: data_batch / test_batch, the parent folder found.
  const ExperimentConfig cfg =
      ExperimentConfig::load(gantry::test::kDemo, {"data.format=cifar10", "data.path=" + dir.path().string()});
  EXPECT_EQ(cfg.data.train_prefix, "data_batch");
  EXPECT_EQ(cfg.data.val_prefix, "test_batch");
  const ImageDataset train = load_split(cfg.data, Split::kTrain, {3, 32, 32});
  ASSERT_EQ(train.images.sizes(), (std::vector<int64_t>{6, 3, 32, 32}));
  for (int k = 0; k < 6; ++k) {
    EXPECT_EQ(train.labels[k].item<int64_t>(), k % 10);
    // red (0, 0), green (5, 7), blue (31, 31)
    EXPECT_EQ(train.images[k][0][0][0].item<int>(), k % 256);
    EXPECT_EQ(train.images[k][1][5][7].item<int>(), (1024 + 5 * 32 + 7 + k) % 256);
    EXPECT_EQ(train.images[k][2][31][31].item<int>(), (3071 + k) % 256);
  }
  const ImageDataset val = load_split(cfg.data, Split::kVal, {});
  ASSERT_EQ(val.size(), 2);
  EXPECT_EQ(val.labels[1].item<int64_t>(), 101 % 10);
}

TEST(Cifar10, ATruncatedFileOrAnotherFormatIsOneLineNamingTheFile) {
  TempDir dir;
  write_text(dir / "data_batch_1.bin", cifar_records(0, 2).substr(0, 3073 + 100));
  auto msg = load_error([&] { load_cifar10(dir.path().string(), "data_batch"); });
  EXPECT_NE(msg.find(dir / "data_batch_1.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("3173 bytes is not a whole number of CIFAR-10 records"), std::string::npos) << msg;
  std::string labels = cifar_records(0, 2);
  labels[3073] = 57;  // a CIFAR-100 coarse label where CIFAR-10 has 0..9
  write_text(dir / "data_batch_1.bin", labels);
  msg = load_error([&] { load_cifar10(dir.path().string(), "data_batch"); });
  EXPECT_NE(msg.find("record 1 has label 57, CIFAR-10's are 0..9"), std::string::npos) << msg;
  msg = load_error([&] { load_cifar10(dir.path().string(), "test_batch"); });
  EXPECT_NE(msg.find("no test_batch.bin or test_batch_<n>.bin"), std::string::npos) << msg;
}

TEST(ImageFolder, ClassFoldersAreLabelsAndEveryImageIsConvertedAndResized) {
  TempDir dir;
  const std::string train = dir / "train";
  write_png(train + "/cat/a.png", solid(4, 4, {255, 0, 0}));  // red RGB
  std::filesystem::create_directories(train + "/cat/sub");
  const std::vector<uint8_t> gray128(8 * 8, 128);
  ASSERT_TRUE(stbi_write_jpg((train + "/cat/sub/b.jpg").c_str(), 8, 8, 1, gray128.data(), 95));
  write_png(train + "/dog/c.PNG", solid(2, 2, {200}));  // gray, upscaled
  write_text(train + "/dog/notes.txt", "not an image: ignored");
  const ExperimentConfig cfg =
      ExperimentConfig::load(gantry::test::kDemo, {"data.format=image_folder", "data.path=" + dir.path().string()});
  EXPECT_EQ(cfg.data.val_prefix, "val");
  // Gray 4x4, as the basic GAN would ask (shape [1, 4, 4]).
  ImageDataset ds = load_split(cfg.data, Split::kTrain, {1, 4, 4});
  ASSERT_EQ(ds.images.sizes(), (std::vector<int64_t>{3, 1, 4, 4}));
  EXPECT_TRUE(torch::equal(ds.labels, torch::tensor({0, 0, 1}, torch::kInt64)));  // cat/a, cat/sub/b, dog/c
  EXPECT_EQ(ds.images[0].min().item<int>(), (255 * 77) >> 8);                     // stb's luma of pure red: 76
  EXPECT_EQ(ds.images[0].max().item<int>(), 76);
  EXPECT_NEAR(ds.images[1].to(torch::kFloat).mean().item<float>(), 128, 2);  // a JPEG, shrunk 8 -> 4
  EXPECT_NEAR(ds.images[2].min().item<int>(), 200, 1);                       // a constant, enlarged 2 -> 4
  EXPECT_NEAR(ds.images[2].max().item<int>(), 200, 1);
  // RGB 3x2 (W 2, H 3): red stays (255, 0, 0), gray repeats into every channel.
  ds = load_split(cfg.data, Split::kTrain, {3, 3, 2});
  ASSERT_EQ(ds.images.sizes(), (std::vector<int64_t>{3, 3, 3, 2}));
  EXPECT_EQ(ds.images[0][0].min().item<int>(), 255);
  EXPECT_EQ(ds.images[0][1].max().item<int>(), 0);
  EXPECT_EQ(ds.images[0][2].max().item<int>(), 0);
  EXPECT_TRUE(torch::equal(ds.images[2][0], ds.images[2][2]));
  // No validation folder: one line naming the key.
  const auto msg = load_error([&] { load_split(cfg.data, Split::kVal, {1, 4, 4}); });
  EXPECT_NE(msg.find("no validation folder val/ (data.val_prefix"), std::string::npos) << msg;
}

TEST(ImageFolder, WithoutAShapeEveryImageMustMatchTheFirstAndBadFilesAreNamed) {
  TempDir dir;
  write_png(dir / "a.png", solid(6, 5, {10}));
  write_png(dir / "b.png", solid(6, 5, {20}));
  ImageDataset ds = load_image_folder(dir.path().string(), {});
  ASSERT_EQ(ds.images.sizes(), (std::vector<int64_t>{2, 1, 5, 6}));
  EXPECT_FALSE(ds.labels.defined());  // images directly in the folder: unlabelled
  EXPECT_EQ(ds.images[1][0][4][5].item<int>(), 20);
  write_png(dir / "c.png", solid(7, 5, {30}));
  auto msg = load_error([&] { load_image_folder(dir.path().string(), {}); });
  EXPECT_NE(msg.find(dir / "c.png" + ": 1x5x7, but " + dir / "a.png" + " is 1x5x6"), std::string::npos) << msg;
  std::filesystem::remove(dir / "c.png");
  write_text(dir / "d.jpg", "this is not a JPEG");
  msg = load_error([&] { load_image_folder(dir.path().string(), {}); });
  EXPECT_NE(msg.find(dir / "d.jpg" + ": not an image stb can read"), std::string::npos) << msg;
  std::filesystem::remove(dir / "d.jpg");
  std::filesystem::create_directories(dir / "class0");
  msg = load_error([&] { load_image_folder(dir.path().string(), {}); });
  EXPECT_NE(msg.find("holds both images (a.png) and class folders (class0/)"), std::string::npos) << msg;
}

// trainer.limit_*_batches / overfit_batches reach the loader as a limit: the
// epoch ends after that many of its batches, a fraction of them rounded down.
TEST(DataLoader, ALimitEndsTheEpochAfterItsBatches) {
  ImageDataset ds;
  ds.images = torch::arange(100, torch::kUInt8).view({100, 1, 1, 1});
  LoaderOptions o;
  o.batch_size = 16;  // 7 batches
  o.limit.count = 3;
  DataLoader three(as_dataset(ds), o);
  EXPECT_EQ(three.batches_per_epoch(), 3);
  three.start_epoch(0);
  int batches = 0;
  while (three.next()) ++batches;
  EXPECT_EQ(batches, 3);
  o.limit = BatchCount{};
  o.limit.fraction = 0.5;
  EXPECT_EQ(DataLoader(as_dataset(ds), o).batches_per_epoch(), 3) << "half of 7";
  o.limit.fraction = 0.01;
  EXPECT_EQ(DataLoader(as_dataset(ds), o).batches_per_epoch(), 1) << "never 0 for a fraction > 0";
  o.limit.count = 50;
  EXPECT_EQ(DataLoader(as_dataset(ds), o).batches_per_epoch(), 7) << "a count above the epoch's is all of it";
}
