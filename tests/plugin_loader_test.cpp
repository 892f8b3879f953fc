// The loader against real plugins built by this tree: a good one and one for
// each way a plugin can be wrong. Each wrong one is one clear PluginError.
#include "config/config.hpp"
#include "config/errors.hpp"
#include "plugin/elf_manifest.hpp"
#include "plugin/plugin_loader.hpp"
#include "support.hpp"

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
  return ExperimentConfig::parse("name: t\nsystem:\n  plugin: " + plugin + "\n" + system_yaml,
                                 "test.yaml");
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
  const std::string plugin = std::to_string(GANTRY_ABI_VERSION_MAJOR) + "." + std::to_string(GANTRY_ABI_VERSION_MINOR + 1);
  EXPECT_NE(msg.find(plugin_path("newer_minor") + " uses gantry ABI " + plugin + ", newer than this runner's " + runner),
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
  // checkpoint, load_extra_state on resume) past the end of a 1.0 vtable.
  const auto resumed = gantry::test::run_gantry(
      "train '" + gantry::test::source_path("tests/sdk_plugin/tiny.yaml") +
          "' trainer.max_steps=30 trainer.resume=auto system.plugin=" + plugin_path("tiny_sdk_1_0"),
      dir.path());
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("done at step 30"), std::string::npos) << resumed.out;
}

TEST(PluginLoader, OtherLibTorchVersionNamesBothSides) {
  const auto msg = open_error(plugin_path("other_torch"));
  EXPECT_NE(msg.find("was built against LibTorch 2.11, this runner uses " +
                     std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) +
                     ": rebuild the plugin"),
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
  EXPECT_EQ(good, 3);  // tiny, tiny_sdk_1_0, throws (a good manifest; it fails only when constructed)
  EXPECT_EQ(bad, 5);   // wrong_abi, newer_minor, other_torch, no_factory, notalib
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
    EXPECT_EQ(std::string(e.what()), "plugin libgan.so is linked against libc10.so.1.9 (LibTorch 1.9), this runner uses " +
                                         std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) +
                                         ": rebuild the plugin against this runner's LibTorch (headers and libraries)");
  }
}
