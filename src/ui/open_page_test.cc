#include "ui/open_page.h"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace cloister::ui {
namespace {

// SECURITY (issue 37 item 2): what `ui --open` hands the browser is a path; the token is in a
// file only the user can read, gone once removed.
TEST(OpenPageTest, APrivateFileThatRedirectsToTheUrl) {
  const std::string url = "http://0123456789abcdef0123456789abcdef.localhost:8123/?token=" +
                          std::string(64, 'a');
  for (bool runtime : {true, false}) {
    char tmpl[] = "/tmp/cloister-open-test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    if (runtime) setenv("XDG_RUNTIME_DIR", tmpl, 1);
    else unsetenv("XDG_RUNTIME_DIR");
    auto page = OpenPage::Write(url);
    ASSERT_TRUE(page.ok()) << page.error().ToString();
    const std::string path = page->path();
    EXPECT_EQ(path.find("token"), std::string::npos) << path;
    struct stat st;
    ASSERT_EQ(lstat(path.c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    ASSERT_EQ(stat(std::filesystem::path(path).parent_path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0077, 0u) << "the page's directory is open to others";
    std::ifstream in(path);
    std::string html((std::istreambuf_iterator<char>(in)), {});
    EXPECT_NE(html.find("http-equiv=\"refresh\" content=\"0;url=" + url + "\""), std::string::npos)
        << html;
    page->Remove();
    EXPECT_FALSE(std::filesystem::exists(path));
    std::filesystem::remove_all(tmpl);
  }
  unsetenv("XDG_RUNTIME_DIR");
  EXPECT_FALSE(OpenPage::Write("javascript:alert(1)").ok());
  EXPECT_FALSE(OpenPage::Write("http://x/\"><script>").ok());
}

}  // namespace
}  // namespace cloister::ui
