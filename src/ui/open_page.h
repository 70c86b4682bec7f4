// `cloister ui --open`'s page, Jupyter's way: the browser is handed the path of a file that
// redirects to the dashboard's URL, so the one-use token is never in any process's argv or
// environment (every local user can read /proc/PID/cmdline and, for the desktop's own browser
// process, the URL it was started with).
//
// SECURITY: the file is created 0600 (O_CREAT | O_EXCL | O_NOFOLLOW) in a directory only the user
// can enter: $XDG_RUNTIME_DIR when it is the user's and 0700, else a fresh mkdtemp directory
// (0700) under /tmp. It is removed once the token bought its session and when `cloister ui` ends.
#pragma once

#include <string>

#include "base/result.h"

namespace cloister::ui {

class OpenPage {
 public:
  // Writes the page for `url` (the server's own URL: http, a *.localhost name, a port, a hex
  // token; nothing of it needs escaping, and anything else is refused).
  static Result<OpenPage> Write(const std::string& url);
  OpenPage(OpenPage&& o) noexcept;
  OpenPage& operator=(OpenPage&&) = delete;
  ~OpenPage();  // Remove()

  const std::string& path() const { return path_; }  // what the browser is handed
  void Remove();                                      // idempotent

 private:
  OpenPage(std::string path, std::string made_dir) : path_(std::move(path)), dir_(std::move(made_dir)) {}
  std::string path_;
  std::string dir_;  // the directory made for it ("" when $XDG_RUNTIME_DIR was used)
};

}  // namespace cloister::ui
