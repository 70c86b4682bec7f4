#include "ui/open_page.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace cloister::ui {
namespace {

bool PlainUrl(const std::string& url) {
  if (url.rfind("http://", 0) != 0 || url.size() > 512) return false;
  for (char c : url) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == ':' || c == '/' || c == '.' || c == '?' || c == '=' || c == '-' || c == '_';
    if (!ok) return false;
  }
  return true;
}

// $XDG_RUNTIME_DIR when it is the user's own 0700 directory.
bool PrivateDir(const char* dir) {
  struct stat st;
  return dir && *dir == '/' && lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) &&
         st.st_uid == getuid() && (st.st_mode & 0077) == 0;
}

}  // namespace

Result<OpenPage> OpenPage::Write(const std::string& url) {
  if (!PlainUrl(url)) return Error(ErrorCode::kInvalidArgument, "not the dashboard's URL");
  std::string dir, made;
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  if (PrivateDir(runtime)) {
    dir = runtime;
  } else {
    char tmpl[] = "/tmp/cloister-ui-XXXXXX";  // mkdtemp: 0700, a fresh name
    if (mkdtemp(tmpl) == nullptr) return ErrnoError("mkdtemp", errno);
    dir = made = tmpl;
  }
  std::string path = dir + "/cloister-ui-" + std::to_string(getpid()) + "-open.html";
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    int e = errno;
    if (!made.empty()) rmdir(made.c_str());
    return ErrnoError("create " + path, e);
  }
  const std::string html =
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">\n"
      "<meta http-equiv=\"refresh\" content=\"0;url=" + url + "\">\n"
      "<title>cloister ui</title></head>\n<body><p>Opening the cloister dashboard: <a href=\"" +
      url + "\">continue</a>.</p></body></html>\n";
  ssize_t n = write(fd, html.data(), html.size());
  int e = errno;
  close(fd);
  OpenPage page(path, made);
  if (n != static_cast<ssize_t>(html.size())) return ErrnoError("write " + path, n < 0 ? e : EIO);
  return page;
}

OpenPage::OpenPage(OpenPage&& o) noexcept : path_(std::move(o.path_)), dir_(std::move(o.dir_)) {
  o.path_.clear();
  o.dir_.clear();
}

OpenPage::~OpenPage() { Remove(); }

void OpenPage::Remove() {
  if (!path_.empty()) unlink(path_.c_str());
  if (!dir_.empty()) rmdir(dir_.c_str());
  path_.clear();
  dir_.clear();
}

}  // namespace cloister::ui
