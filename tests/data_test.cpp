// The IDX reader, PNG codec, image grid and data loader.
#include <zlib.h>

#include "data/data_loader.hpp"
#include "config/errors.hpp"
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
  EXPECT_NE(msg.find("truncated: the header promises 7840 bytes of data, the file has 100"),
            std::string::npos)
      << msg;
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
    EXPECT_NE(std::string(e.what()).find("/nonexistent: data.path is not a directory"),
              std::string::npos);
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
  EXPECT_EQ(at(0, 0), 0);                       // padding
  EXPECT_EQ(at(2, 2), 0);                       // image 0: -1 -> 0
  EXPECT_EQ(at(2 + 4, 2 + 5), 255);             // image 9 (row 1, col 1): 1 -> 255
  EXPECT_EQ(at(2, 2 + 5 * 7), 198);             // image 7: -1 + 14/9 -> 198
}

TEST(DataLoader, EpochCoversEveryIndexOnceInASeededOrder) {
  ImageDataset ds;
  ds.images = torch::arange(100, torch::kUInt8).view({100, 1, 1, 1});
  LoaderOptions o;
  o.batch_size = 16;
  o.seed = 7;
  DataLoader a(ds, o), b(ds, o);
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
  DataLoader full(ds, o), resumed(ds, o);
  full.start_epoch(2);
  resumed.start_epoch(2, 5);
  std::vector<torch::Tensor> a, b;
  while (auto x = full.next()) a.push_back(x->input);
  while (auto x = resumed.next()) b.push_back(x->input);
  ASSERT_EQ(a.size(), 8u);
  ASSERT_EQ(b.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(torch::equal(a[5 + i], b[i]));
}

TEST(DataLoader, RanksGetDisjointPaddedShards) {
  ImageDataset ds;
  ds.images = torch::zeros({10, 1, 1, 1}, torch::kUInt8);
  LoaderOptions o;
  o.world_size = 3;
  std::vector<int64_t> all;
  for (int r = 0; r < 3; ++r) {
    o.rank = r;
    DataLoader l(ds, o);
    EXPECT_EQ(l.samples_per_rank(), 4);
    auto idx = l.indices(0);
    all.insert(all.end(), idx.data_ptr<int64_t>(), idx.data_ptr<int64_t>() + idx.numel());
  }
  std::sort(all.begin(), all.end());
  // 12 slots: all 10 samples, 2 of them twice (padding)
  EXPECT_EQ(std::unique(all.begin(), all.end()) - all.begin(), 10);
}
