// The stream: codec round trip for every message, malformed frames rejected,
// the run log's torn tail, and what a real run writes (run log + TensorBoard).
#include <filesystem>

#include "io/png.hpp"
#include "io/run_stream.hpp"
#include "strict_wire_1_0.hpp"
#include "support.hpp"
#include "io/tfevents.hpp"
#include "wire/crc.hpp"
#include "wire/message.hpp"
#include "wire/record_log.hpp"

using namespace gantry;
using gantry::test::TempDir;
namespace strict_1_0 = gantry::test::strict_1_0;

namespace {

std::vector<wire::Message> every_message() {
  wire::RunInfo info{"gan", "gan", "0.1.0", "gan 0.1.0 (ABI 1.0)", "name: gan\n", 2, 1, 1.7e9, 2814};
  wire::RankStatus status{1, "node2", 500, 1234.5, 812.25, 1.7e9 + 3};
  status.step_ms = 41.5;
  status.data_ms = 2.25;
  status.compute_ms = 30;
  status.comm_ms = 6.5;
  status.optimizer_ms = 1.75;
  status.other_ms = 1;
  status.cpu_pct = 97.5;
  status.gpu_util_pct = 88;
  status.gpu_mem_mib = 4096;
  status.gpu_power_w = 301.5;
  status.straggler = true;
  status.last_pct = 87.5;
  status.link_ms = 0.25;
  wire::Scalars scalars;
  scalars.points = {{10, 1.7e9 + 1, "g_loss", 0.75}, {10, 1.7e9 + 1, "d_loss", std::nan("")}};
  return {{0, wire::Hello{1, "s3cret", 41}},
          {0, wire::Welcome{1, "gan", 42, wire::kProtocolMinor, ""}},
          {1, info},
          {2, scalars},
          {3, wire::Image{"generated", 500, 1.7e9 + 2, 242, 242, std::string("\x89PNG\r\n\x1a\n...", 11)}},
          {4, status},
          {5, wire::Event{"checkpoint", 500, 1.7e9 + 4, "runs/x/checkpoints/step_0000500.ckpt"}}};
}

std::string wire_error(const std::string& frame) {
  try {
    wire::decode(frame);
  } catch (const wire::WireError& e) {
    return e.what();
  }
  return "";
}

std::vector<wire::Message> replay_messages(const std::string& path) {
  std::vector<wire::Message> out;
  for (const auto& f : wire::replay(path).frames) out.push_back(wire::decode(f));
  return out;
}

}  // namespace

TEST(Wire, EveryMessageRoundTripsExactly) {
  for (const auto& m : every_message()) {
    const std::string frame = wire::encode(m);
    const wire::Message back = wire::decode(frame);
    EXPECT_EQ(back.seq, m.seq);
    EXPECT_EQ(back.payload.index(), m.payload.index()) << wire::type_name(m.payload);
    EXPECT_EQ(wire::encode(back), frame) << wire::type_name(m.payload);
  }
  const auto s = std::get<wire::Scalars>(wire::decode(wire::encode(every_message()[3])).payload);
  ASSERT_EQ(s.points.size(), 2u);
  EXPECT_EQ(s.points[0].name, "g_loss");
  EXPECT_EQ(s.points[0].value, 0.75);
  EXPECT_TRUE(std::isnan(s.points[1].value));
}

TEST(Wire, AnAppendedFieldIsOptional) {
  // A RunInfo from before total_steps existed (1.0) and from before protocol_minor (1.1).
  const wire::Message m = every_message()[2];
  const auto now = std::get<wire::RunInfo>(wire::decode(wire::encode(m)).payload);
  EXPECT_EQ(now.total_steps, 2814);
  EXPECT_EQ(now.protocol_minor, wire::kProtocolMinor);
  const auto old = std::get<wire::RunInfo>(wire::decode(wire::encode(m, 0)).payload);
  EXPECT_EQ(old.total_steps, -1);
  EXPECT_EQ(old.protocol_minor, 0u) << "a writer before 1.5 does not say";
  EXPECT_EQ(old.start_time, 1.7e9);
  const auto one = std::get<wire::RunInfo>(wire::decode(wire::encode(m, 1)).payload);
  EXPECT_EQ(one.total_steps, 2814);
  EXPECT_EQ(one.protocol_minor, 0u);
  EXPECT_EQ(wire::encode(m, 0).size() + 8 + 4, wire::encode(m).size());
}

// docs/protocol.md#minors: each minor's layout is what that minor's text
// says, and a reader written to the first text (strict_wire_1_0.hpp: bytes
// left over are an error) decodes every message encoded for 1.0 whole, and
// refuses the current RankStatus: the layouts differ, so the server must
// encode per client.
TEST(Wire, EachMinorsLayoutAndAStrict10Reader) {
  const auto all = every_message();
  for (const auto& m : all) {
    const std::string frame = wire::encode(m, 0);
    EXPECT_NO_THROW(strict_1_0::decode(frame)) << wire::type_name(m.payload);
    EXPECT_EQ(wire::for_minor(wire::encode(m), 0), frame) << wire::type_name(m.payload);
    EXPECT_EQ(wire::for_minor(wire::encode(m), wire::kProtocolMinor), wire::encode(m));
  }
  const strict_1_0::Frame status = strict_1_0::decode(wire::encode(all[5], 0));
  EXPECT_EQ(status.type, 6);
  EXPECT_EQ(status.host, "node2");
  EXPECT_EQ(status.step, 500);
  try {
    strict_1_0::decode(wire::encode(all[5]));
    ADD_FAILURE() << "the strict 1.0 reader took a 1.5 RankStatus";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "1.0: 97 bytes left over after RankStatus");
  }
  // RankStatus by minor: 6 fields; + parts and straggler (1.2); + last_pct (1.3); + link_ms (1.4).
  const size_t base = wire::encode(all[5], 0).size();
  EXPECT_EQ(wire::encode(all[5], 1).size(), base);
  EXPECT_EQ(wire::encode(all[5], 2).size(), base + 81);
  EXPECT_EQ(wire::encode(all[5], 3).size(), base + 89);
  EXPECT_EQ(wire::encode(all[5], 4).size(), base + 97);
  EXPECT_EQ(wire::encode(all[5], 5).size(), base + 97);
  const auto at2 = std::get<wire::RankStatus>(wire::decode(wire::encode(all[5], 2)).payload);
  EXPECT_EQ(at2.comm_ms, 6.5);
  EXPECT_EQ(at2.last_pct, -1);
  // Hello and Welcome say their minor from 1.5; absent, it is 1.0.
  EXPECT_EQ(std::get<wire::Hello>(wire::decode(wire::encode(all[0])).payload).minor, wire::kProtocolMinor);
  EXPECT_EQ(std::get<wire::Hello>(wire::decode(wire::encode(all[0], 4)).payload).minor, 0u);
  EXPECT_EQ(std::get<wire::Welcome>(wire::decode(wire::encode(all[1], 0)).payload).minor, 0u);
  EXPECT_EQ(wire::encode(all[1], 0).size() + 4 + 4, wire::encode(all[1]).size()) << "minor, an empty run_dir";
}

TEST(Wire, ARankStatusWithoutItsStepPartsDecodesThemAsUnknown) {
  std::string frame = wire::encode(every_message()[5]);
  const auto full = std::get<wire::RankStatus>(wire::decode(frame).payload);
  EXPECT_EQ(full.comm_ms, 6.5);
  EXPECT_EQ(full.busy_ms(), 35);
  EXPECT_TRUE(full.straggler);
  EXPECT_EQ(full.last_pct, 87.5);
  EXPECT_EQ(full.link_ms, 0.25);
  auto cut = [](std::string& f, size_t bytes) {  // drops the last fields, as an older writer's frame
    f.resize(f.size() - bytes);
    const uint32_t len = static_cast<uint32_t>(f.size() - 16);
    std::memcpy(&f[12], &len, 4);
  };
  cut(frame, 8);  // a writer from before link_ms
  const auto no_link = std::get<wire::RankStatus>(wire::decode(frame).payload);
  EXPECT_EQ(no_link.link_ms, -1);
  EXPECT_EQ(no_link.last_pct, 87.5);
  cut(frame, 8);  // a writer from before last_pct
  const auto no_last = std::get<wire::RankStatus>(wire::decode(frame).payload);
  EXPECT_EQ(no_last.last_pct, -1);
  EXPECT_TRUE(no_last.straggler);
  std::string two = frame;  // the flag is 0 or 1: another value would not re-encode to itself
  two.back() = 2;
  EXPECT_EQ(wire_error(two), "RankStatus.straggler is 2 (0 or 1)") << wire_error(two);
  frame.resize(frame.size() - (10 * 8 + 1));  // a writer from before the parts
  const uint32_t n = static_cast<uint32_t>(frame.size() - 16);
  std::memcpy(&frame[12], &n, 4);
  const auto old = std::get<wire::RankStatus>(wire::decode(frame).payload);
  EXPECT_EQ(old.wall_time, 1.7e9 + 3);
  EXPECT_EQ(old.step_ms, -1);
  EXPECT_EQ(old.gpu_power_w, -1);
  EXPECT_EQ(old.busy_ms(), -1);
  EXPECT_FALSE(old.straggler);
  frame.resize(frame.size() - 3);  // and one cut inside wall_time is no frame
  const uint32_t m = static_cast<uint32_t>(frame.size() - 16);
  std::memcpy(&frame[12], &m, 4);
  EXPECT_NE(wire_error(frame).find("RankStatus.wall_time"), std::string::npos) << wire_error(frame);
}

TEST(Wire, FieldsAppendedByANewerWriterAreSkipped) {
  // A newer writer appended fields (a str and an i64) to Event and RunInfo:
  // this reader decodes what it knows and skips the rest (docs/protocol.md).
  for (size_t i : {2u, 6u}) {
    const std::string plain = wire::encode(every_message()[i]);
    std::string frame = plain;
    const std::string extra = std::string("\x05\0\0\0later", 9) + std::string(8, '\x07');
    frame += extra;
    const uint32_t n = static_cast<uint32_t>(frame.size() - 16);
    std::memcpy(&frame[12], &n, 4);
    const wire::Message back = wire::decode(frame);
    EXPECT_EQ(back.payload.index(), every_message()[i].payload.index());
    EXPECT_EQ(wire::encode(back), plain) << wire::type_name(back.payload);  // the known fields, exactly
  }
}

TEST(Wire, MalformedFramesAreRejectedWithAReason) {
  const std::string good = wire::encode(every_message()[2]);
  for (size_t n = 0; n < good.size(); ++n)  // every truncation
    EXPECT_FALSE(wire_error(good.substr(0, n)).empty()) << n;
  EXPECT_NE(wire_error("XW" + good.substr(2)).find("bad magic"), std::string::npos);
  std::string v = good;
  v[2] = 9;
  EXPECT_NE(wire_error(v).find("protocol version 9"), std::string::npos);
  std::string t = good;
  t[3] = 42;
  EXPECT_NE(wire_error(t).find("unknown message type 42"), std::string::npos);
  EXPECT_NE(wire_error(good + "x").find("length field"), std::string::npos);
  // A string length far beyond the frame.
  std::string huge = wire::encode({1, wire::Event{"k", 1, 1, "t"}});
  huge[16] = '\xff', huge[17] = '\xff', huge[18] = '\xff', huge[19] = '\x7f';
  EXPECT_FALSE(wire_error(huge).empty());
}

TEST(Wire, CrcsMatchKnownValues) {
  EXPECT_EQ(wire::crc32("123456789", 9), 0xCBF43926u);   // CRC-32 check value
  EXPECT_EQ(wire::crc32c("123456789", 9), 0xE3069283u);  // CRC-32C check value
}

TEST(Wire, RunLogReplayStopsAtATornTail) {
  TempDir dir;
  const std::string path = dir / RunStream::kLogName;
  {
    wire::RecordWriter w(path);
    for (const auto& m : every_message()) w.append(wire::encode(m));
  }
  auto r = wire::replay(path);
  EXPECT_EQ(r.frames.size(), every_message().size());
  EXPECT_FALSE(r.torn_tail);
  const std::string whole = gantry::test::read_text(path);
  gantry::test::write_text(path, whole.substr(0, whole.size() - 5));  // a crash mid-record
  r = wire::replay(path);
  EXPECT_EQ(r.frames.size(), every_message().size() - 1);
  EXPECT_TRUE(r.torn_tail);
  // Reopening the stream cuts the torn record and continues the sequence.
  {
    RunStream s(dir.path().string());
    EXPECT_EQ(s.last_seq(), 4u);
    s.event("resumed", 4, 0, "after a crash");
  }
  r = wire::replay(path);
  EXPECT_FALSE(r.torn_tail);
  ASSERT_EQ(r.frames.size(), every_message().size());
  EXPECT_EQ(wire::decode(r.frames.back()).seq, 5u);
}

// A bit flipped in the middle of the log (third fault campaign): the damaged
// record is skipped and every intact record after it is kept, by replay(), by
// the follower, and when a resumed run reopens the log. Before, replay()
// stopped at the damaged record and the resume cut the 47 records after it.
TEST(Wire, ADamagedRecordMidLogIsSkippedAndTheRecordsAfterItKept) {
  TempDir dir;
  const std::string path = dir / RunStream::kLogName;
  std::vector<size_t> starts;
  {
    wire::RecordWriter w(path);
    for (const auto& m : every_message()) {
      starts.push_back(std::filesystem::exists(path) ? std::filesystem::file_size(path) : 0);
      w.append(wire::encode(m));
    }
  }
  std::string bytes = gantry::test::read_text(path);
  const size_t hit = starts[3] + 8 + 5;  // inside the frame of the Scalars record (seq 2)
  bytes[hit] = static_cast<char>(bytes[hit] ^ 0x10);
  gantry::test::write_text(path, bytes);
  auto r = wire::replay(path);
  ASSERT_EQ(r.frames.size(), every_message().size() - 1);
  EXPECT_FALSE(r.torn_tail);
  ASSERT_EQ(r.corrupt.size(), 1u);
  EXPECT_EQ(r.corrupt[0].offset, starts[3]);
  EXPECT_EQ(r.corrupt[0].bytes, starts[4] - starts[3]);
  EXPECT_EQ(wire::decode(r.frames.back()).seq, 5u);  // the records after it are there
  EXPECT_NE(wire::describe(r.corrupt).find("1 damaged record skipped (" + std::to_string(starts[4] - starts[3]) +
                                           " bytes at offset " + std::to_string(starts[3]) + ")"),
            std::string::npos)
      << wire::describe(r.corrupt);
  wire::RecordFollower follow(path);
  EXPECT_EQ(follow.poll().size(), every_message().size() - 1);
  EXPECT_EQ(follow.corrupt().size(), 1u);
  // Damage and a torn tail together: the tail is cut, the middle kept, the
  // sequence continues after the newest intact record.
  gantry::test::write_text(path, bytes + std::string("\x30\0\0\0\x01\x02", 6));
  {
    RunStream s(dir.path().string());
    EXPECT_EQ(s.last_seq(), 5u);
    s.event("resumed", 500, 0, "after a crash");
  }
  r = wire::replay(path);
  EXPECT_FALSE(r.torn_tail);
  EXPECT_EQ(r.corrupt.size(), 1u);
  ASSERT_EQ(r.frames.size(), every_message().size());
  EXPECT_EQ(wire::decode(r.frames.back()).seq, 6u);
  // A run of zero bytes (a file system's crash leftovers) is no record.
  gantry::test::write_text(path, std::string(64, '\0') + bytes);
  r = wire::replay(path);
  EXPECT_EQ(r.frames.size(), every_message().size() - 1);
  ASSERT_EQ(r.corrupt.size(), 2u);
  EXPECT_EQ(r.corrupt[0].bytes, 64u);
}

// The crash handler encodes its `failed` record by hand (no allocation in a
// signal handler): it must stay byte for byte what the writer stores.
TEST(Wire, TheCrashHandlersRecordIsTheWritersRecord) {
  TempDir dir;
  const std::string text = "plugin gan crashed with SIGSEGV in training_step at step 120";
  {
    wire::RecordWriter w(dir / "log");
    w.append(wire::encode({7, wire::Event{"failed", 120, 1.7e9 + 0.25, text}}));
  }
  char record[1024];
  const size_t n = wire::encode_event_record(record, sizeof record, 7, "failed", 120, 1.7e9 + 0.25, text.c_str());
  EXPECT_EQ(std::string(record, n), gantry::test::read_text(dir / "log"));
  // Too little room: the text is cut, the record still whole; none at all: 0.
  const size_t cut = wire::encode_event_record(record, 60, 7, "failed", 120, 0, text.c_str());
  ASSERT_GT(cut, 0u);
  ASSERT_LE(cut, 60u);
  gantry::test::write_text(dir / "cut", std::string(record, cut));
  const auto r = wire::replay(dir / "cut");
  ASSERT_EQ(r.frames.size(), 1u);
  const auto e = std::get<wire::Event>(wire::decode(r.frames[0]).payload);
  EXPECT_EQ(text.rfind(e.text, 0), 0u);
  EXPECT_EQ(wire::encode_event_record(record, 20, 7, "failed", 120, 0, text.c_str()), 0u);
}

TEST(Wire, FollowerReadsRecordsAsTheyAreWrittenAndRestartsWhenCut) {
  TempDir dir;
  const std::string path = dir / RunStream::kLogName;
  wire::RecordFollower follow(path);
  EXPECT_TRUE(follow.poll().empty());  // no file yet
  std::string bytes;
  {
    TempDir tmp;
    wire::RecordWriter w(tmp / "log");
    for (const auto& m : every_message()) w.append(wire::encode(m));
    bytes = gantry::test::read_text(tmp / "log");
  }
  // The writer is mid-record: the follower returns only whole records.
  const size_t cut = bytes.size() - 7;
  gantry::test::write_text(path, bytes.substr(0, cut));
  auto got = follow.poll();
  ASSERT_EQ(got.size(), every_message().size() - 1);
  EXPECT_EQ(wire::decode(got.front()).seq, 0u);
  EXPECT_TRUE(follow.poll().empty());
  gantry::test::write_text(path, bytes);
  got = follow.poll();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(wire::decode(got[0]).seq, 5u);
  EXPECT_EQ(follow.offset(), bytes.size());
  // A resumed run cut the file: read from the start again.
  gantry::test::write_text(path, bytes.substr(0, 100));
  got = follow.poll();
  EXPECT_EQ(follow.restarts(), 1);
  EXPECT_LT(got.size(), every_message().size());
}

TEST(Wire, RealRunWritesAReplayableStreamAndTensorBoardFiles) {
  TempDir dir;
  const std::string args = "train '" + gantry::test::source_path("configs/gan_fashion_mnist.yaml") +
                           "' trainer.log_every_n_steps=10 "
                           "trainer.image_every_n_steps=50 checkpoint.every_n_steps=50";
  ASSERT_EQ(gantry::test::run_gantry(args + " trainer.max_steps=100", dir.path()).exit_code, 0);
  const auto run = dir.path() / "runs/gan_fashion_mnist/latest";
  auto msgs = replay_messages((run / RunStream::kLogName).string());
  ASSERT_GE(msgs.size(), 10u);
  ASSERT_TRUE(std::holds_alternative<wire::RunInfo>(msgs[0].payload));
  EXPECT_EQ(std::get<wire::RunInfo>(msgs[0].payload).plugin, "gan");
  for (size_t i = 0; i < msgs.size(); ++i) EXPECT_EQ(msgs[i].seq, i + 1);  // no gap, no duplicate
  int scalar_rows = 0, images = 0, checkpoints = 0;
  for (const auto& m : msgs) {
    if (auto* s = std::get_if<wire::Scalars>(&m.payload)) {
      ++scalar_rows;
      ASSERT_EQ(s->points.size(), 2u);
      EXPECT_EQ(s->points[0].name, "g_loss");
    } else if (auto* im = std::get_if<wire::Image>(&m.payload)) {
      ++images;
      const auto png = decode_png(im->png);
      EXPECT_EQ(png.width, int(im->width));
    } else if (auto* e = std::get_if<wire::Event>(&m.payload)) {
      if (e->kind == "checkpoint") {
        ++checkpoints;
        // The path is relative to the run directory, wherever the runner ran.
        EXPECT_EQ(e->text.rfind("checkpoints/step_", 0), 0u) << e->text;
        EXPECT_TRUE(std::filesystem::exists(run / e->text)) << e->text;
      }
    }
  }
  EXPECT_EQ(scalar_rows, 10);
  EXPECT_EQ(images, 3);  // steps 0, 50, 100
  EXPECT_EQ(checkpoints, 2);
  EXPECT_EQ(std::get<wire::Event>(msgs.back().payload).kind, "finished");

  // TensorBoard: valid TFRecord framing and CRCs; version record, the HParams
  // session's start and end, 20 scalars, 3 images. The event file is beside
  // the run directory, in <experiment>/tensorboard/<run> (issue 44.4), and
  // none is in the run directory (TensorBoard would list it twice, through latest).
  for (const auto& e : std::filesystem::directory_iterator(run))
    EXPECT_EQ(e.path().filename().string().find("tfevents"), std::string::npos) << e.path();
  const auto tb_dir = dir.path() / "runs/gan_fashion_mnist/tensorboard" / std::filesystem::canonical(run).filename();
  std::string tb;
  for (const auto& e : std::filesystem::directory_iterator(tb_dir))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) tb = e.path();
  ASSERT_FALSE(tb.empty());
  const auto records = read_tfrecords(tb);
  ASSERT_EQ(records.size(), 1u + 2u + 20u + 3u);
  EXPECT_NE(records[0].find("brain.Event:2"), std::string::npos);
  int with_png = 0, with_g_loss = 0;
  for (const auto& r : records) {
    with_png += r.find("\x89PNG") != std::string::npos;
    with_g_loss += r.find("g_loss") != std::string::npos;
  }
  EXPECT_EQ(with_png, 3);
  EXPECT_EQ(with_g_loss, 10);

  // Resuming continues the same log: sequence unbroken, a "resumed" event.
  ASSERT_EQ(gantry::test::run_gantry(args + " trainer.max_steps=120 trainer.resume=auto", dir.path()).exit_code, 0);
  msgs = replay_messages((run / RunStream::kLogName).string());
  for (size_t i = 0; i < msgs.size(); ++i) EXPECT_EQ(msgs[i].seq, i + 1);
  bool resumed = false;
  for (const auto& m : msgs)
    if (auto* e = std::get_if<wire::Event>(&m.payload)) resumed |= e->kind == "resumed" && e->step == 100;
  EXPECT_TRUE(resumed);
}
