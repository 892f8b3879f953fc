// The loader against real plugins built by this tree: a good one and one for
// each way a plugin can be wrong. Each wrong one is one clear PluginError.
#include "config/config.hpp"
#include "gantry/engine.hpp"
#include "gantry/errors.hpp"
#include "plugin/elf_manifest.hpp"
#include "plugin/plugin_loader.hpp"
#include "plugin/plugin_system.hpp"
#include "support.hpp"
#include "wire/message.hpp"
#include "wire/record_log.hpp"
#include "train/trainer.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <sstream>
#include <filesystem>

namespace fs = std::filesystem;
using namespace gantry;
using gantry::test::plugin_path;

namespace {

std::string open_error(const std::string& path) {
  try {
    Plugin::open(path);
  } catch (const PluginError& e) {
    return e.what();
  }
  return "";
}

ExperimentConfig config_with(const std::string& plugin, const std::string& system_yaml = "") {
  return ExperimentConfig::parse("name: t\nsystem:\n  plugin: " + plugin + "\n" + system_yaml, "test.yaml");
}

}  // namespace

TEST(PluginLoader, GoodPluginManifestAndFactory) {
  auto plugin = Plugin::open(plugin_path("tiny"));
  EXPECT_EQ(plugin->manifest().name, "tiny");
  EXPECT_EQ(plugin->manifest().version, "1.0.0");
  EXPECT_EQ(plugin->manifest().abi_major, GANTRY_ABI_VERSION_MAJOR);
  EXPECT_EQ(plugin->manifest().torch_minor, TORCH_VERSION_MINOR);
  const auto cfg = config_with(plugin_path("tiny"));
  SystemParams params(cfg);
  auto system = plugin->create(params);
  ASSERT_TRUE(system);
  EXPECT_EQ(system->modules().size(), 1u);
  EXPECT_EQ(system->forward(torch::zeros({2, 784})).sizes(), (std::vector<int64_t>{2, 10}));
}

TEST(PluginLoader, SystemKeepsLibraryLoadedAfterPluginHandleIsGone) {
  std::shared_ptr<System> system;
  {
    auto plugin = Plugin::open(plugin_path("tiny"));
    const auto cfg = config_with(plugin_path("tiny"));
    SystemParams params(cfg);
    system = plugin->create(params);
  }
  // The plugin handle is gone; calling into the plugin's code must still work.
  EXPECT_EQ(system->sample_input(3).size(0), 3);
  system.reset();  // and deleting through the plugin's destructor too
}

TEST(PluginLoader, FindsPluginByNameInPluginPath) {
  ::setenv("GANTRY_PLUGIN_PATH", GANTRY_TEST_PLUGIN_DIR, 1);
  EXPECT_EQ(Plugin::find("tiny")->manifest().name, "tiny");
  ::unsetenv("GANTRY_PLUGIN_PATH");
  try {
    Plugin::find("nosuchplugin");
    FAIL() << "expected PluginError";
  } catch (const PluginError& e) {
    EXPECT_NE(std::string(e.what()).find("plugin 'nosuchplugin' not found"), std::string::npos);
  }
}

TEST(PluginLoader, WrongAbiVersionNamesBothSides) {
  const auto msg = open_error(plugin_path("wrong_abi"));
  EXPECT_NE(msg.find(plugin_path("wrong_abi")), std::string::npos) << msg;
  const std::string runner = std::to_string(GANTRY_ABI_VERSION_MAJOR) + "." + std::to_string(GANTRY_ABI_VERSION_MINOR);
  EXPECT_NE(msg.find("gantry ABI 99.x, this runner " + runner), std::string::npos) << msg;
}

TEST(PluginLoader, ANewerAbiMinorIsRefusedNamingBothSides) {
  const auto msg = open_error(plugin_path("newer_minor"));
  const std::string runner = std::to_string(GANTRY_ABI_VERSION_MAJOR) + "." + std::to_string(GANTRY_ABI_VERSION_MINOR);
  const std::string plugin =
      std::to_string(GANTRY_ABI_VERSION_MAJOR) + "." + std::to_string(GANTRY_ABI_VERSION_MINOR + 1);
  EXPECT_NE(
      msg.find(plugin_path("newer_minor") + " uses gantry ABI " + plugin + ", newer than this runner's " + runner),
      std::string::npos)
      << msg;
  // The plugins built by this tree (same minor) load.
  EXPECT_NO_THROW(Plugin::open(plugin_path("tiny")));
}

TEST(PluginLoader, APluginBuiltAgainstTheFrozenSdk10Trains) {
  // tests/sdk_1_0: the 1.0 headers, never edited; this runner must load and train it.
  const auto plugin = Plugin::open(plugin_path("tiny_sdk_1_0"));
  EXPECT_EQ(plugin->manifest().abi_major, 1u);
  EXPECT_EQ(plugin->manifest().abi_minor, 0u);
  gantry::test::TempDir dir;
  const auto r = gantry::test::run_gantry("train '" + gantry::test::source_path("tests/sdk_plugin/tiny.yaml") +
                                              "' trainer.max_steps=20 system.plugin=" + plugin_path("tiny_sdk_1_0"),
                                          dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("done at step 20"), std::string::npos) << r.out;
  // Resumed: the runner must not call the 1.1 hooks (extra_state at each
  // checkpoint, load_extra_state on resume) past the end of a 1.0 vtable,
  // nor 1.3's validation start/end hooks (a validation at the end).
  const auto resumed = gantry::test::run_gantry(
      "train '" + gantry::test::source_path("tests/sdk_plugin/tiny.yaml") +
          "' trainer.max_steps=30 trainer.resume=auto trainer.val_every_n_steps=100 data.val_prefix=t10k "
          "system.plugin=" +
          plugin_path("tiny_sdk_1_0"),
      dir.path());
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("done at step 30"), std::string::npos) << resumed.out;
  EXPECT_NE(resumed.out.find("validation at step 30"), std::string::npos) << resumed.out;
}

TEST(PluginLoader, OtherLibTorchVersionNamesBothSides) {
  const auto msg = open_error(plugin_path("other_torch"));
  EXPECT_NE(msg.find("was built against LibTorch 2.11, this runner uses " + std::to_string(TORCH_VERSION_MAJOR) + "." +
                     std::to_string(TORCH_VERSION_MINOR) + ": rebuild the plugin"),
            std::string::npos)
      << msg;
}

TEST(PluginLoader, MissingFactoryIsAnError) {
  const auto msg = open_error(plugin_path("no_factory"));
  EXPECT_NE(msg.find("exports no factory gantry_create"), std::string::npos) << msg;
}

TEST(PluginLoader, NotASharedLibrary) {
  const auto msg = open_error(plugin_path("notalib"));
  EXPECT_NE(msg.find("is not a loadable shared library"), std::string::npos) << msg;
  EXPECT_NE(msg.find("libnotalib.so"), std::string::npos) << msg;
}

TEST(PluginLoader, LibraryWithoutManifestIsNotAPlugin) {
  const auto msg = open_error("/lib/x86_64-linux-gnu/libz.so.1");
  EXPECT_NE(msg.find("is not a gantry plugin"), std::string::npos) << msg;
}

TEST(PluginLoader, MissingFile) {
  EXPECT_NE(open_error("/nonexistent/libx.so").find("no such file"), std::string::npos);
}

TEST(PluginLoader, ThrowingConstructorIsAPluginErrorNamingThePlugin) {
  auto plugin = Plugin::open(plugin_path("throws"));
  const auto cfg = config_with(plugin_path("throws"));
  SystemParams params(cfg);
  try {
    plugin->create(params);
    FAIL() << "expected PluginError";
  } catch (const PluginError& e) {
    EXPECT_STREQ(e.what(), "plugin throws: constructor failed: cannot build the model");
  }
}

TEST(PluginLoader, ListsEveryPluginWithManifestOrError) {
  ::setenv("GANTRY_PLUGIN_PATH", GANTRY_TEST_PLUGIN_DIR, 1);
  const auto all = Plugin::list_all();
  ::unsetenv("GANTRY_PLUGIN_PATH");
  int good = 0, bad = 0;
  for (const auto& [path, summary] : all) {
    if (path.find("test_plugins") == std::string::npos) continue;
    (summary.rfind("error:", 0) == 0 ? bad : good)++;
  }
  // tiny, tiny_sdk_1_0, throws (a good manifest; it fails only when constructed),
  // and in a CUDA build graph_probe (tests/plugins/graph_probe.cpp).
  EXPECT_EQ(good, 3 + GANTRY_WITH_CUDA);
  EXPECT_EQ(bad, 5);  // wrong_abi, newer_minor, other_torch, no_factory, notalib
}

TEST(PluginLoader, TheManifestIsReadFromTheFileWithoutLoadingIt) {
  // What the loader checks before dlopen (which would run a foreign LibTorch's
  // initializers in this process): the numbers, straight from the ELF file,
  // and the libraries it needs.
  const auto gan = gantry::read_plugin_elf(gantry::test::gan_plugin_path());
  ASSERT_TRUE(gan.has_value() && gan->manifest.has_value());
  const gantry_manifest_v1& m = *gan->manifest;
  EXPECT_EQ(m.struct_size, sizeof(gantry_manifest_v1));
  EXPECT_EQ(m.abi_major, uint32_t(GANTRY_ABI_VERSION_MAJOR));
  EXPECT_EQ(m.abi_minor, uint32_t(GANTRY_ABI_VERSION_MINOR));
  EXPECT_EQ(m.torch_major, uint32_t(TORCH_VERSION_MAJOR));
  EXPECT_EQ(m.torch_minor, uint32_t(TORCH_VERSION_MINOR));
  EXPECT_EQ(m.cuda, uint32_t(GANTRY_WITH_CUDA));
  EXPECT_EQ(m.name, nullptr);
  EXPECT_NE(std::find_if(gan->needed.begin(), gan->needed.end(),
                         [](const std::string& n) { return n.rfind("libc10", 0) == 0; }),
            gan->needed.end());
  const auto other = gantry::read_plugin_elf(gantry::test::plugin_path("other_torch"));
  ASSERT_TRUE(other.has_value() && other->manifest.has_value());
  EXPECT_EQ(other->manifest->torch_major, 2u);
  EXPECT_EQ(other->manifest->torch_minor, 11u);
  const auto wrong = gantry::read_plugin_elf(gantry::test::plugin_path("wrong_abi"));
  ASSERT_TRUE(wrong.has_value() && wrong->manifest.has_value());
  EXPECT_EQ(wrong->manifest->abi_major, 99u);
  EXPECT_TRUE(gantry::read_plugin_elf(gantry::test::plugin_path("no_factory"))->manifest.has_value());
  EXPECT_FALSE(gantry::read_plugin_elf(gantry::test::plugin_path("notalib")).has_value());
}

TEST(PluginLoader, APluginLinkedAgainstAnotherLibTorchsLibrariesIsRefusedBeforeLoading) {
  // Its manifest may say this runner's version (built with one LibTorch's
  // headers and the system's other libraries): the library names tell.
  gantry::ElfPlugin elf = *gantry::read_plugin_elf(gantry::test::gan_plugin_path());
  EXPECT_NO_THROW(gantry::check_plugin_file("libgan.so", elf));
  elf.needed.push_back("libc10.so.1.9");
  try {
    gantry::check_plugin_file("libgan.so", elf);
    FAIL() << "a plugin needing libc10.so.1.9 passed";
  } catch (const gantry::PluginError& e) {
    EXPECT_EQ(std::string(e.what()),
              "plugin libgan.so is linked against libc10.so.1.9 (LibTorch 1.9), this runner uses " +
                  std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) +
                  ": rebuild the plugin against this runner's LibTorch (headers and libraries)");
  }
}

// ---- PluginSystem: the one door into a plugin ----------------------------------

namespace {

const std::string kTinyConfig = gantry::test::source_path("tests/sdk_plugin/tiny.yaml");

std::vector<std::string> throws_in(const std::string& hook) {
  return {"system.plugin=" + plugin_path("throws"),
          "system.throw_in=" + hook,
          "data.batch_size=4",
          "trainer.val_every_n_epochs=1",
          "trainer.image_every_n_steps=1",
          "checkpoint.every_n_steps=1",
          "trainer.progress=none",
          "monitor.enabled=false",
          "trainer.threads=1"};
}

// Trains the throws plugin `steps` batches with system.throw_in=hook: the
// PluginError's line, or "" when nothing threw. `checkpoint`: the last one.
std::string train_throwing(const std::string& hook, int steps, std::vector<std::string> more = {},
                           std::string* checkpoint = nullptr) {
  gantry::test::TempDir dir;
  std::vector<std::string> o = throws_in(hook);
  o.push_back("trainer.max_steps=" + std::to_string(steps));
  o.insert(o.end(), more.begin(), more.end());
  try {
    const auto r = Trainer(Experiment::build(ExperimentConfig::load(kTinyConfig, o)), dir.path().string()).fit();
    if (checkpoint) {  // kept past the TempDir
      *checkpoint = (fs::temp_directory_path() / ("gantry-throws-" + hook + ".ckpt")).string();
      fs::copy_file(r.last_checkpoint, *checkpoint, fs::copy_options::overwrite_existing);
    }
  } catch (const PluginError& e) {
    return e.what();
  }
  return "";
}

void expect_line(const std::string& what, const std::string& head, const std::string& hook) {
  EXPECT_EQ(what.rfind(head, 0), 0u) << "expected '" << head << "...', got: " << what;
  EXPECT_NE(what.find("boom in " + hook), std::string::npos) << what;
  EXPECT_EQ(what.find('\n'), std::string::npos) << "not one line: " << what;
  EXPECT_EQ(what.find("Exception raised from"), std::string::npos) << "a C++ backtrace: " << what;
}

}  // namespace

// Every hook the engine calls, thrown from with TORCH_CHECK (a message with a
// C++ backtrace): one line of one shape, naming plugin and hook, with the
// step where there is one. Hooks of training, then those of inference on a
// trained checkpoint (gantry sample, the quality score, serving).
TEST(PluginSystem, EveryHookThatThrowsIsOneLineNamingPluginAndHook) {
  for (const std::string hook :
       {"modules", "configure_optimizers", "data_spec", "train_dataset", "val_dataset", "configure_schedulers"})
    expect_line(train_throwing(hook, 2), "plugin throws: " + hook + " failed: ", hook);
  expect_line(train_throwing("log_samples", 2), "plugin throws: log_samples failed at step 0: ", "log_samples");
  expect_line(train_throwing("training_step", 2), "plugin throws: training_step failed at step 0: ", "training_step");
  expect_line(train_throwing("extra_state", 2), "plugin throws: extra_state failed at step 1: ", "extra_state");
  expect_line(train_throwing("validation_step", 3),
              "plugin throws: validation_step failed at step 2: ", "validation_step");
  expect_line(train_throwing("lr_factor", 2),
              "plugin throws: the lr factor of optimizer sgd at t=1 failed: ", "lr_factor");
  // The plugin's own dataset, called on the loader's thread (its 20th get(): batch 5).
  expect_line(train_throwing("dataset_get", 10), "plugin throws: train_dataset get_batch failed: ", "dataset_get");
  std::string ckpt;
  ASSERT_EQ(train_throwing("none", 2, {}, &ckpt), "");
  expect_line(train_throwing("load_extra_state", 3, {"trainer.resume=" + ckpt}),
              "plugin throws: load_extra_state failed at step 2: ", "load_extra_state");
  for (const std::string hook : {"forward", "sample_input", "render_samples", "features"}) {
    ASSERT_EQ(train_throwing(hook, 1, {}, &ckpt), "") << hook << " is not a training hook";
    TrainedSystem t = Experiment::load_trained(ckpt, torch::kCPU);
    try {
      PluginSystem& s = *t.experiment.system;
      if (hook == "forward") s.forward(torch::zeros({2, 4}));
      if (hook == "sample_input") s.sample_input(2);
      if (hook == "render_samples") s.render_samples(torch::zeros({2, 1}));
      if (hook == "features") s.features(torch::zeros({2, 4}));
      ADD_FAILURE() << hook << " did not throw";
    } catch (const PluginError& e) {
      expect_line(e.what(), "plugin throws: " + hook + " failed: ", hook);
    }
  }
}

// The defaults of an older ABI minor live in the adapter: a 1.0 plugin (the
// frozen SDK's tiny) has no datasets, no extra state, no schedules, no
// render_samples, and is refused as a feature model in one line.
TEST(PluginSystem, A10PluginGetsTheDefaultsOfTheHooksItLacks) {
  const auto cfg = ExperimentConfig::load(kTinyConfig, {"system.plugin=" + plugin_path("tiny_sdk_1_0")});
  const Experiment e = Experiment::build(cfg);
  PluginSystem& s = *e.system;
  ASSERT_EQ(s.manifest().abi_minor, 0u);
  EXPECT_EQ(s.train_dataset(), nullptr);
  EXPECT_EQ(s.val_dataset(), nullptr);
  EXPECT_TRUE(s.extra_state(0).empty());
  EXPECT_NO_THROW(s.load_extra_state({{"x", torch::zeros({1})}}, 0));
  EXPECT_TRUE(s.configure_schedulers().empty());
  EXPECT_FALSE(s.render_samples(torch::zeros({2, 10})).defined());
  EXPECT_EQ(s.data_spec().struct_size, offsetof(DataSpec, struct_size));  // 1.1's fields absent
  try {
    s.check_features();
    ADD_FAILURE() << "a 1.0 plugin has no features()";
  } catch (const PluginError& e) {
    EXPECT_STREQ(e.what(),
                 "plugin tiny is built against SDK 1.0, which has no features(); a feature model needs "
                 "SDK 1.2 (plugins/classifier)");
  }
}

// A plugin thread still running when the run ends: the library stays mapped
// (it segfaulted in _dl_close_worker after "finished", losing the done lines,
// and the launcher reported signal 11).
// One data path: a plugin's own Dataset and the runner's images both become
// Experiment::train_data; a system with its own data takes no images, a fit
// with neither says so, and images of another shape are refused in one line.
TEST(PluginSystem, OwnDataAndImagesAreOneKindOfData) {
  gantry::test::TempDir dir;
  ImageDataset images;
  images.images = torch::zeros({8, 1, 2, 2}, torch::kUInt8);
  images.images_file = "/data/eight-idx3-ubyte";
  Experiment own = Experiment::build(ExperimentConfig::load(kTinyConfig, throws_in("nothing")));
  ASSERT_TRUE(own.own_data);
  EXPECT_EQ(own.data_name, "plugin throws's train_dataset()");
  try {
    own.use_images(images);
    ADD_FAILURE() << "a system with its own data took images";
  } catch (const PluginError& e) {
    EXPECT_NE(std::string(e.what()).find("plugin throws brings its own data"), std::string::npos) << e.what();
  }
  const std::vector<std::string> tiny_options = {"system.plugin=" + plugin_path("tiny"), "trainer.progress=none"};
  Experiment tiny = Experiment::build(ExperimentConfig::load(kTinyConfig, tiny_options));
  ASSERT_FALSE(tiny.own_data);
  try {
    Trainer(Experiment::build(ExperimentConfig::load(kTinyConfig, tiny_options)), dir.path().string()).fit();
    ADD_FAILURE() << "a fit without data ran";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("has no train_dataset() and no images were given"), std::string::npos)
        << e.what();
  }
  Experiment gan = Experiment::build(
      ExperimentConfig::load(gantry::test::kDemo, {"system.plugin=" + gantry::test::gan_plugin_path()}));
  try {
    gan.use_images(images);
    ADD_FAILURE() << "images of another shape were taken";
  } catch (const DataError& e) {
    EXPECT_NE(
        std::string(e.what()).find("/data/eight-idx3-ubyte: samples are [1, 2, 2], plugin gan expects [1, 28, 28]"),
        std::string::npos)
        << e.what();
  }
  tiny.use_images(images);  // tiny's DataSpec has no shape: any image is a sample
  EXPECT_EQ(tiny.data_name, "/data/eight-idx3-ubyte");
  EXPECT_EQ(tiny.train_data->size(), 8);
}

TEST(PluginSystem, APluginThreadRunningAtExitDoesNotCrashTheEnd) {
  gantry::test::TempDir dir;
  const auto r = gantry::test::run_gantry("train '" + kTinyConfig + "' system.plugin=" + plugin_path("throws") +
                                              " system.throw_in=none system.stray_thread=true data.batch_size=4 "
                                              "trainer.max_steps=5",
                                          dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("done at step 5"), std::string::npos) << r.out << r.err;
}

// A plugin's dataset ran outside the door, on the loader's thread: its `throw
// 42` reached the runner's top as an uncaught exception (std::terminate, 134,
// "not in a plugin hook"), its segfault named no plugin. Now both are the one
// line naming plugin and hook, and the run log's last record says failed.
TEST(PluginSystem, APluginDatasetThatThrows42OrCrashesOnTheLoaderThreadIsNamed) {
  struct Case {
    const char* how;
    int exit_code;
    std::string line;
  };
  for (const Case& c :
       {Case{"dataset_throw42", 1,
             "gantry: error: plugin throws: train_dataset get_batch failed: it threw something that is not a "
             "std::exception (no message)"},
        Case{"dataset_segv", 128 + SIGSEGV,
             "gantry: error: plugin throws crashed with SIGSEGV in train_dataset get_batch"}}) {
    gantry::test::TempDir dir;
    const auto r = gantry::test::run_gantry("train '" + kTinyConfig + "' system.plugin=" + plugin_path("throws") +
                                                " system.throw_in=none system.crash=" + c.how +
                                                " system.crash_after=1000 data.batch_size=4 trainer.max_steps=20",
                                            dir.path(), "ulimit -c 0;");
    EXPECT_EQ(r.exit_code, c.exit_code) << c.how << "\n" << r.out << r.err;
    int errors = 0;
    for (const auto& line : gantry::test::lines_of(r.err)) errors += line.rfind("gantry: error: ", 0) == 0;
    EXPECT_EQ(errors, 1) << c.how << "\n" << r.err;
    EXPECT_NE(r.err.find(c.line), std::string::npos) << c.how << "\n" << r.err;
    std::string last_kind;
    for (const auto& f : gantry::wire::replay((dir.path() / "runs/tiny/latest/stream.gantrylog").string()).frames) {
      const gantry::wire::Message m = gantry::wire::decode(f);
      if (const auto* e = std::get_if<gantry::wire::Event>(&m.payload)) last_kind = e->kind;
    }
    EXPECT_EQ(last_kind, "failed") << c.how;
  }
}

// Whatever reaches the top of a command, a std::exception or not, is one line.
TEST(PluginSystem, RunCommandTurnsAThrowOfAnyTypeIntoOneLine) {
  testing::internal::CaptureStderr();
  const int code = gantry::engine::run_command([]() -> int { throw 42; });
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 1);
  EXPECT_EQ(err,
            "gantry: error: something threw a value that is not a std::exception (no message): a bug; please "
            "report it with the command that ran\n");
}

// A segfault in training_step (exit 139), std::abort or `throw 42` (134)
// printed nothing and the run log never said the run failed (the monitor
// showed it running). Now: one line naming plugin, hook and step, and a last
// `failed` record; the exit status still says which signal.
TEST(PluginSystem, APluginCrashIsOneLineAndTheRunLogSaysFailed) {
  struct Case {
    const char* how;
    int exit_code;
    std::string line;
  };
  for (const Case& c :
       {Case{"segv", 128 + SIGSEGV, "gantry: error: plugin throws crashed with SIGSEGV in training_step at step 5"},
        Case{"abort", 128 + SIGABRT,
             "gantry: error: plugin throws crashed with SIGABRT (std::abort, or an exception nothing "
             "caught) in training_step at step 5"},
        Case{"throw42", 1,
             "gantry: error: plugin throws: training_step failed at step 5: it threw something that is "
             "not a std::exception (no message)"}}) {
    gantry::test::TempDir dir;
    const auto r = gantry::test::run_gantry("train '" + kTinyConfig + "' system.plugin=" + plugin_path("throws") +
                                                " system.throw_in=none system.crash=" + c.how +
                                                " data.batch_size=4 trainer.max_steps=20",
                                            dir.path(), "ulimit -c 0;");
    EXPECT_EQ(r.exit_code, c.exit_code) << c.how << "\n" << r.out << r.err;
    // The shell that ran it may add its own "Segmentation fault" after it.
    int errors = 0;
    for (const auto& line : gantry::test::lines_of(r.err)) errors += line.rfind("gantry: error: ", 0) == 0;
    EXPECT_EQ(errors, 1) << c.how << "\n" << r.err;
    EXPECT_NE(r.err.find(c.line + "\n"), std::string::npos) << c.how << "\n" << r.err;
    std::string last_kind, last_text;
    int64_t last_step = -1;
    for (const auto& f : gantry::wire::replay((dir.path() / "runs/tiny/latest/stream.gantrylog").string()).frames) {
      const gantry::wire::Message m = gantry::wire::decode(f);
      if (const auto* e = std::get_if<gantry::wire::Event>(&m.payload)) {
        last_kind = e->kind;
        last_text = e->text;
        last_step = e->step;
      }
    }
    EXPECT_EQ(last_kind, "failed") << c.how;
    EXPECT_EQ("gantry: error: " + last_text, c.line) << c.how;
    EXPECT_EQ(last_step, 5) << c.how;
  }
}

// Plugin author's second day (issue 28, items 1 and 4): a module the
// optimizer trains but modules() does not return was trained, never
// checkpointed and resumed from random weights, exit 0; and `gantry validate`
// said OK where train refused (ema.modules=generatr, optimizers.x.*).
TEST(PluginSystem, AParameterNoModuleHoldsAndWhatTrainRefusesAreRefusedByValidateToo) {
  gantry::test::TempDir dir;
  const std::string base = "'" + kTinyConfig + "' system.plugin=" + plugin_path("throws") +
                           " system.throw_in=none data.batch_size=4 trainer.max_steps=5";
  const std::string hidden =
      "plugin throws: optimizer sgd trains 2 parameters ([1, 4], [1]; 5 values) that no module of modules() holds "
      "(it returns: model): they would be trained but never checkpointed";
  for (const char* command : {"train ", "validate "}) {
    const auto r = gantry::test::run_gantry(command + base + " system.hide_module=true", dir.path());
    EXPECT_EQ(r.exit_code, 1) << command << r.out << r.err;
    EXPECT_NE(r.err.find(hidden), std::string::npos) << command << r.err;
  }
  auto r = gantry::test::run_gantry("validate " + base + " ema.decay=0.9 ema.modules=generatr", dir.path());
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("ema.modules names 'generatr', which modules() does not return (it returns: model)"),
            std::string::npos)
      << r.err;
  r = gantry::test::run_gantry("validate " + base + " optimizers.adam.gradient_clip_val=1", dir.path());
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("optimizers.adam: plugin throws has no optimizer 'adam'; configure_optimizers() returned: sgd"),
            std::string::npos)
      << r.err;
  gantry::test::TempDir clean;
  r = gantry::test::run_gantry("validate " + base, clean.path());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_FALSE(std::filesystem::exists(clean.path() / "runs")) << "validate wrote a run directory";
}

// Validation ignored ctx.log's Reduce: `ctx.log("val_n", b, Reduce::kSum, true)`
// printed 255.6 (a mean), not 10000 (issue 28, item 6). On 1 and 2 ranks.
TEST(PluginSystem, ValidationReducesAsCtxLogAsks) {
  for (const char* command : {"train", "launch -n 2"}) {
    gantry::test::TempDir dir;
    const auto r = gantry::test::run_gantry(
        std::string(command) + " '" + kTinyConfig + "' system.plugin=" + plugin_path("throws") +
            " system.throw_in=none system.log_val_n=true data.batch_size=4 trainer.max_steps=-1 trainer.max_epochs=1"
            " trainer.val_every_n_epochs=1 trainer.threads=1",
        dir.path());
    ASSERT_EQ(r.exit_code, 0) << command << "\n" << r.out << r.err;
    const auto rows = gantry::test::lines_of(gantry::test::read_text(dir.path() / "runs/tiny/latest/metrics.csv"));
    ASSERT_GE(rows.size(), 2u) << command;
    std::vector<std::string> header, last;
    auto split = [](const std::string& line) {
      std::vector<std::string> out;
      std::stringstream ss(line);
      for (std::string cell; std::getline(ss, cell, ',');) out.push_back(cell);
      return out;
    };
    header = split(rows.front());
    for (const auto& row : rows) {  // the validation row: the one with val_n
      const auto cells = split(row);
      const auto at = std::find(header.begin(), header.end(), "val_n") - header.begin();
      if (static_cast<size_t>(at) < cells.size() && !cells[at].empty() && row != rows.front()) last = cells;
    }
    ASSERT_FALSE(last.empty()) << command << ": no validation row\n"
                               << gantry::test::read_text(dir.path() / "runs/tiny/latest/metrics.csv");
    auto column = [&](const std::string& name) {
      const auto at = std::find(header.begin(), header.end(), name) - header.begin();
      return static_cast<size_t>(at) < last.size() ? std::atof(last[at].c_str()) : -1.0;
    };
    EXPECT_EQ(column("val_n"), 8.0) << command << ": the sum of the 8 validation samples";
    EXPECT_EQ(column("val_batch_max"), 4.0) << command << ": the largest batch";
  }
}
