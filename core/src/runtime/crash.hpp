// What a crash leaves behind (a plugin's bug: SIGSEGV, SIGBUS, SIGFPE, SIGILL;
// std::abort or an uncaught exception: SIGABRT): one line on stderr naming the
// plugin, the hook and the step, and a final `failed` record in the run log,
// so that the monitor and gantry-view show the run failed instead of running.
// The handler uses write(2) and a record encoded without allocating; then the
// signal's default action ends the process (exit status 128 + signal, core
// dump as configured).
#pragma once

#include <cstdint>

#include "gantry/core_export.hpp"

namespace gantry {

/// Installs the handlers (on an alternate stack: a stack overflow is a
/// SIGSEGV too). Call once, in the process that trains.
GANTRY_CORE_EXPORT void install_crash_handlers();

/// The run log the `failed` record goes to: its descriptor (appended to) and
/// the sequence number of its newest record, read at the crash. fd -1: none.
GANTRY_CORE_EXPORT void crash_log_to(int fd, const uint64_t* last_seq);

/// While alive: the plugin hook that runs now on this thread (its plugin and
/// name: string literals or strings that outlive the scope) and the step, for
/// the line (the training's step: a hook on another thread passes -1).
class GANTRY_CORE_EXPORT CrashScope {
 public:
  CrashScope(const char* plugin, const char* hook, int64_t step);
  ~CrashScope();
  CrashScope(const CrashScope&) = delete;
  CrashScope& operator=(const CrashScope&) = delete;

 private:
  const char* previous_hook_;
};

/// The line the handler writes, for `sig` with the current scope (tests).
/// Writes at most `cap` bytes into `out`, NUL-terminated; returns its length.
GANTRY_CORE_EXPORT std::size_t crash_line(int sig, char* out, std::size_t cap);

}  // namespace gantry
