#include "cli/testing.h"

#include <stdlib.h>

#include <filesystem>
#include <sstream>

#include "cli/cli.h"
#include "store/env.h"
#include "store/store.h"

namespace cloister::cli::testing {

Outcome RunIn(const std::string& store_root, const std::vector<std::string>& args,
              const std::string& input) {
  std::vector<const char*> argv = {"cloister", "--store", store_root.c_str()};
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  std::istringstream in(input);
  int code = RunCli(static_cast<int>(argv.size()), argv.data(), out, err, in);
  return {code, out.str(), err.str()};
}

TempStore::TempStore(const std::string& tag) {
  std::string tmpl = "/tmp/cloister-" + tag + "-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  const char* made = mkdtemp(buf.data());
  root_ = made ? made : "";
}

TempStore::~TempStore() {
  if (root_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(root_, ec);
}

std::string TempStore::CreateWorkspace(const std::string& name) {
  if (root_.empty()) return "mkdtemp failed";
  std::string base = root_ + "/base-" + name + ".raw";
  if (auto t = Env::Default()->Truncate(base, 16 << 20); !t.ok()) return t.error().ToString();
  auto store = Store::Open(root_);
  if (!store.ok()) return store.error().ToString();
  CreateRequest req;
  req.name = name;
  req.image = base;
  req.home_size = 64 << 20;
  auto created = (*store)->Create(req);
  return created.ok() ? "" : created.error().ToString();
}

void SparseBaseTest::SetUp() {
  std::string tmpl = prefix_ + "XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  const char* made = mkdtemp(buf.data());
  ASSERT_NE(made, nullptr) << "mkdtemp " << tmpl;
  dir_ = made;
  base_ = dir_ + "/base.raw";
  ASSERT_TRUE(Env::Default()->Truncate(base_, 64 << 20).ok());
  store_ = dir_ + "/store";
}

void SparseBaseTest::TearDown() {
  if (!dir_.empty()) (void)Env::Default()->RemoveAll(dir_);
}

Outcome SparseBaseTest::Create(const std::string& name) const {
  return Run({"create", name, "--image", base_, "--home-size", "64M"});
}

}  // namespace cloister::cli::testing
