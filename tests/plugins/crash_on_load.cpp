// Not a plugin: a library whose static initializer crashes (SIGSEGV), as a
// broken library on the plugin search path would. `gantry plugins` loads each
// candidate in a child process and lists this one as an error instead of
// crashing (third fault campaign: it exited 139).
#include <csignal>

namespace {
struct CrashOnLoad {
  CrashOnLoad() { std::raise(SIGSEGV); }
};
const CrashOnLoad crash;
}  // namespace
