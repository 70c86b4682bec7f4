// `cloister image ...`: build, list, verify, import and remove base images.
#include <iostream>
#include <memory>

#include "catalog/names.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "image/builder.h"

namespace cloister::cli {
namespace {

void AddImageBuild(CLI::App& image, Cli& cli) {
  struct Opts {
    bool test = false;
    std::string out;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = image.add_subcommand(
      "build", "Build the default base image from Debian 12 packages (--test: the tiny test image)");
  cmd->add_flag("--test", o->test, "Build the tiny busybox test image (seconds) instead of debian-12");
  cmd->add_option("--out", o->out, "Write the artifacts to DIR (default: the store's images dir)");
  cmd->callback([&cli, o] {
    std::string store = cli.StoreRoot();
    image::BuildOptions b;
    std::string name = o->test ? image::kTestImageName : image::kFullImageName;
    b.out_dir = o->out.empty() ? store + "/" + catalog::names::kImagesDir + "/" + name : o->out;
    b.cache_dir = store + "/" + catalog::names::kDebCacheDir;
    b.progress = [&cli](const std::string& line) { cli.err() << line << std::endl; };
    if (!o->test) {
      cli.Fail(Error(ErrorCode::kUnavailable, "the full debian-12 image build is not implemented yet",
                     "use `cloister image build --test`"));
      return;
    }
    auto entry = image::BuildTestImage(b);
    if (!entry.ok()) {
      cli.Fail(entry.error());
      return;
    }
    cli.out() << "built " << entry->name << " " << entry->version << " in " << b.out_dir << "\n";
    for (const auto& a : entry->artifacts) {
      cli.out() << "  " << a.file << "  " << a.size << " bytes  sha256:" << a.sha256 << "\n";
    }
  });
}

}  // namespace

void AddImageCommand(CLI::App& app, Cli& cli) {
  auto* image = app.add_subcommand("image", "Build, list, verify, import and remove base images");
  image->require_subcommand(1);
  AddImageBuild(*image, cli);
}

}  // namespace cloister::cli
