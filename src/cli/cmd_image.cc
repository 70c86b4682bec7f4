// `cloister image ...`: build, list, verify, import and remove base images; show and trust
// publisher keys. Thin over catalog::CatalogStore (the signed catalog) and image:: (the builders).
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "base/strings.h"
#include "catalog/names.h"
#include "catalog/signing.h"
#include "catalog/store.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/store_verbs.h"
#include "cli/devcontainer_image.h"
#include "cli/image_from_plan.h"
#include "image/builder.h"
#include "image/oci/build_plan.h"
#include "base/terminal_text.h"

namespace cloister::cli {
namespace {

using catalog::CatalogStore;

nlohmann::json EntryJson(const catalog::ImageEntry& e) {
  nlohmann::json arts = nlohmann::json::array();
  for (const auto& a : e.artifacts) {
    arts.push_back({{"role", a.role}, {"file", a.file}, {"size", a.size}, {"sha256", a.sha256}});
  }
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& s : e.post_install) steps.push_back(s.name);
  nlohmann::json prov = nlohmann::json::object();
  for (const auto& [k, v] : e.provenance) prov[k] = v;
  return {{"name", e.name},         {"version", e.version},     {"arch", e.arch},
          {"kernel_cmdline", e.kernel_cmdline}, {"artifacts", arts}, {"post_install", steps},
          {"provenance", prov}};
}

// The provenance value of `key` ("" when none).
std::string ProvenanceOf(const catalog::ImageEntry& e, const std::string& key) {
  for (const auto& [k, v] : e.provenance) {
    if (k == key) return v;
  }
  return "";
}

// `image build --from REF`: the OCI pipeline (cli/image_from_plan.h).
struct FromOpts {
  std::string from;
  std::string name;
  std::string disk_size;
  bool verbose = false;
  std::string accel = "auto";
  std::vector<std::string> run;  // --run CMD: a step each
};

// Ctrl-C, SIGTERM or SIGHUP during `image build --from`: the handler only writes to this pipe;
// a watcher thread cancels the build (its builder VM stops, nothing half-built is kept) and puts
// the default actions back, so a second signal ends the command at once.
int g_build_signal_pipe[2] = {-1, -1};

extern "C" void OnBuildSignal(int) {
  int saved = errno;
  (void)!write(g_build_signal_pipe[1], "x", 1);
  errno = saved;
}

// Runs `build` with the signals above turned into `cancel`.
template <typename F>
auto WithBuildInterrupt(vm::BuilderCancel& cancel, F build) -> decltype(build()) {
  if (pipe2(g_build_signal_pipe, O_CLOEXEC) != 0) return build();
  std::thread watcher([&cancel] {
    char c = 0;
    while (read(g_build_signal_pipe[0], &c, 1) < 0 && errno == EINTR) {
    }
    if (c != 'x') return;
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) signal(sig, SIG_DFL);
    cancel.Cancel();
  });
  struct sigaction sa{}, old[3]{};
  sa.sa_handler = OnBuildSignal;
  const int sigs[3] = {SIGINT, SIGTERM, SIGHUP};
  for (int i = 0; i < 3; ++i) sigaction(sigs[i], &sa, &old[i]);
  auto result = build();
  (void)!write(g_build_signal_pipe[1], "q", 1);
  watcher.join();
  for (int i = 0; i < 3; ++i) sigaction(sigs[i], &old[i], nullptr);
  close(g_build_signal_pipe[0]);
  close(g_build_signal_pipe[1]);
  return result;
}

void RunFromBuild(Cli& cli, const FromOpts& f) {
  char cwd[4096];
  std::string here = getcwd(cwd, sizeof cwd) ? cwd : "/";
  auto source = image::oci::ParseSourceRef(f.from, here);
  if (!source.ok()) {
    cli.Fail(source.error());
    return;
  }
  image::oci::BuildPlan plan;
  plan.source = *source;
  plan.name = f.name.empty() ? DefaultImageName(*source) : f.name;
  plan.show_step_output = f.verbose;
  for (size_t i = 0; i < f.run.size(); ++i) {
    image::oci::Step step;
    step.name = "run " + std::to_string(i + 1);
    step.command = f.run[i];
    plan.steps.push_back(std::move(step));
  }
  if (!f.disk_size.empty()) {
    auto size = ParseSize(f.disk_size);
    if (!size.ok()) {
      cli.Fail(size.error());
      return;
    }
    plan.disk_size_bytes = *size;
  }
  auto accel = vm::ParseAccelMode(f.accel);
  if (!accel.ok()) {
    cli.Fail(accel.error());
    return;
  }
  PlanBuildOptions po;
  po.store_root = cli.StoreRoot();
  po.verbose = f.verbose;
  po.accel = *accel;
  po.progress = [&cli](const std::string& line) { cli.err() << line << std::endl; };
  auto start = std::chrono::steady_clock::now();
  vm::BuilderCancel cancel;
  po.cancel = &cancel;
  auto entry = WithBuildInterrupt(cancel, [&] { return BuildImageFromPlan(cli, plan, po); });
  if (!entry.ok()) {
    cli.Fail(entry.error());
    return;
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  char t[32];
  std::snprintf(t, sizeof t, "%.1f s", secs);
  const catalog::Artifact* disk = entry->FindArtifact(catalog::kRoleDisk);
  cli.out() << "built " << entry->name << " from " << TerminalSafe(plan.source.ref) << " ("
            << ProvenanceOf(*entry, "manifest") << ") in " << t << "\n"
            << "  disk sha256:" << disk->sha256 << " (" << FormatSize(disk->size) << ")\n"
            << "  signed into the local catalog; use it with `cloister create NAME --image "
            << entry->name << "`\n";
}

// `image rm` / `image build` refused: the image's disk is the base (reflink source or qcow2
// backing file) of these workspaces. There is no flag around it.
Error ImageInUse(const std::string& name, const std::vector<std::string>& users,
                 const std::string& why) {
  std::string list;
  for (const auto& u : users) list += (list.empty() ? "" : ", ") + u;
  return Error(ErrorCode::kFailedPrecondition,
               "image \"" + name + "\" is used by " + CountNoun(users.size(), "workspace") +
                   " (" + list + "); " + why,
               "delete them first with `cloister rm NAME` (`cloister reset` is not enough: it "
               "clones the same image again at the next start)");
}

Result<catalog::ImageEntry> RunBuild(bool test, bool browser, bool builder,
                                     const image::BuildOptions& b) {
  if (test) return image::BuildTestImage(b);
  if (browser) return image::BuildBrowserImage(b);
  if (builder) return image::BuildBuilderImage(b);
  return image::BuildFullImage(b);
}

// Writes DIR/catalog.json, DIR/catalog.json.sig for `entry` (artifacts already in DIR/<name>/),
// signed by this host's publisher key for `channel`, importable elsewhere with `image import`.
Status WriteExportCatalog(CatalogStore& store, const std::string& dir, const std::string& channel,
                          const catalog::ImageEntry& entry) {
  auto pub = store.LocalPublicKey();
  if (!pub.ok()) return pub.error();
  ASSIGN_OR_RETURN(auto key, catalog::PublisherKey::LoadOrCreate(store.PublisherKeyPath()));
  catalog::Catalog c;
  c.channel = channel;
  c.signed_at = static_cast<int64_t>(std::time(nullptr));
  c.sequence = static_cast<uint64_t>(c.signed_at);  // increases with every export
  c.images.push_back(entry);
  ASSIGN_OR_RETURN(std::string sig, key.Sign(catalog::CanonicalBytes(c)));
  RETURN_IF_ERROR(catalog::WriteFileAtomic(dir + "/" + catalog::names::kCatalogFile,
                                           catalog::SerializeCatalog(c), 0644));
  return catalog::WriteFileAtomic(dir + "/" + catalog::names::kSignatureFile,
                                  catalog::SerializeSignature({key.key_id(), sig}), 0644);
}

// The builder VM's flags, shared by --from and --devcontainer.
void AddBuilderVmFlags(CLI::App* cmd, FromOpts& from) {
  cmd->add_option("--name", from.name,
                  "With --from or --devcontainer: the image's name in the catalog (default: the "
                  "repository's or file's base name; dc-REPO for a devcontainer)");
  cmd->add_option("--disk-size", from.disk_size,
                  "With --from or --devcontainer: the image's disk size (e.g. 2G; default 8G, "
                  "sparse)");
  cmd->add_option("--run", from.run,
                  "With --from: a shell command run as root in the image's rootfs inside the "
                  "builder VM, after the source is unpacked (like a Dockerfile's RUN; repeat it "
                  "for several, in order); its egress goes through the builder's proxy");
  cmd->add_flag("--verbose", from.verbose,
                "With --from or --devcontainer: every line of the tools' output, the --run "
                "commands', the Dockerfile's steps' and the Features' install.sh");
  cmd->add_option("--accel", from.accel,
                  "With --from or --devcontainer: the builder VM's accelerator: auto, kvm or tcg")
      ->capture_default_str();
}

// `image build --devcontainer`: with --name, --verbose, --accel and --disk-size; another
// source's flags (`other`: --test, --browser, --builder, --out; --from, --run) are refused.
void RunDevcontainerBuild(Cli& cli, DevcontainerFlags flags, const FromOpts& from, bool other) {
  if (other || !from.from.empty() || !from.run.empty()) {
    cli.Fail(Error(ErrorCode::kInvalidArgument,
                   "--devcontainer builds the devcontainer's image into the local catalog",
                   "drop --from, --run, --test, --browser, --builder and --out"));
    return;
  }
  flags.name = from.name;
  flags.verbose = from.verbose;
  flags.accel = from.accel;
  flags.disk_size = from.disk_size;
  RunImageBuildDevcontainer(cli, flags);
}

void AddBuild(CLI::App& image, Cli& cli) {
  struct Opts {
    bool test = false;
    bool browser = false;
    bool builder = false;
    FromOpts from;
    DevcontainerFlags devcontainer;
    std::string out;
    std::string channel = "published";
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = image.add_subcommand(
      "build",
      "Build a base image and sign it into the local catalog: the default (debian-12) from "
      "Debian 12 packages; --from REF one whose userland is an OCI image, built in a throwaway "
      "VM; --test the tiny busybox test image in seconds; --browser the browser VM's image "
      "(Debian's chromium)");
  auto* test_flag = cmd->add_flag("--test", o->test, "Build the test image instead of debian-12");
  cmd->add_flag("--browser", o->browser,
                "Build the browser image (Debian 12's chromium on a busybox base, for "
                "`cloister browser`) instead of debian-12")
      ->excludes(test_flag);
  cmd->add_flag("--builder", o->builder,
                "Build the builder VM's image (Debian 12's skopeo, umoci and buildah on a busybox "
                "base, in which `--from` builds run; built on first use otherwise)")
      ->excludes(test_flag);
  cmd->add_option("--from", o->from.from,
                  "Build an image whose userland is an OCI image, inside a throwaway builder VM: "
                  "docker://NAME[:TAG|@DIGEST] (pulled through a cloister proxy), "
                  "oci-archive:PATH, docker-archive:PATH or oci:DIR[:REF]; cloister's kernel, "
                  "init, boot hook and agent are added")
      ->excludes(test_flag);
  AddDevcontainerFlags(cmd, o->devcontainer, false);
  AddBuilderVmFlags(cmd, o->from);
  cmd->add_option("--out", o->out,
                  "Publish to DIR instead of the store: DIR/<name>/ artifacts plus a catalog "
                  "signed by this host's key for --channel, for `image import` elsewhere");
  cmd->add_option("--channel", o->channel, "Channel of the catalog written with --out")
      ->capture_default_str();
  cmd->callback([&cli, o] {
    if (o->devcontainer.Given()) {
      bool other = o->test || o->browser || o->builder || !o->out.empty();
      return RunDevcontainerBuild(cli, o->devcontainer, o->from, other);
    }
    if (!o->from.from.empty()) {
      if (o->browser || o->builder || !o->out.empty()) {
        cli.Fail(Error(ErrorCode::kInvalidArgument,
                       "--from builds into the local catalog only",
                       "drop --browser, --builder and --out"));
        return;
      }
      RunFromBuild(cli, o->from);
      return;
    }
    std::string store_root = cli.StoreRoot();
    CatalogStore store(store_root);
    std::string name = o->test      ? image::kTestImageName
                       : o->browser ? image::kBrowserImageName
                       : o->builder ? image::kBuilderImageName
                                    : image::kFullImageName;
    image::BuildOptions b;
    b.cache_dir = store_root + "/" + catalog::names::kDebCacheDir;
    b.progress = [&cli](const std::string& line) { cli.err() << line << std::endl; };
    std::string images = store_root + "/" + catalog::names::kImagesDir;
    if (!o->out.empty()) {
      if (!catalog::IsValidName(o->channel) || o->channel == catalog::kLocalChannel) {
        cli.Fail(Error(ErrorCode::kInvalidArgument, "invalid --channel \"" + o->channel + "\"",
                       "use a name like build-host (\"local\" is this host's own channel)"));
        return;
      }
      b.out_dir = o->out + "/" + name;
      b.work_dir = o->out + "/" + catalog::names::kWorkPrefix + name;
    } else {
      b.out_dir = images + "/" + catalog::names::kBuildPrefix + name;
      b.work_dir = images + "/" + catalog::names::kWorkPrefix + name;
    }
    auto start = std::chrono::steady_clock::now();
    auto entry = RunBuild(o->test, o->browser, o->builder, b);
    if (!entry.ok()) {
      cli.Fail(entry.error());
      return;
    }
    Status s;
    if (!o->out.empty()) {
      s = WriteExportCatalog(store, o->out, o->channel, *entry);
    } else {
      auto ws = OpenStore(cli);
      if (!ws.ok()) {
        cli.Fail(ws.error());
        return;
      }
      auto users = (*ws)->IfImageUnused(store.ImageDir(name),
                                        [&] { return store.PublishLocal(*entry, b.out_dir); });
      if (!users.ok()) {
        cli.Fail(users.error());
        return;
      }
      if (!users->empty()) {
        // In use: only a byte-identical rebuild may be published (PublishLocal then keeps the
        // files the workspaces read). Anything else would change their base under them.
        auto current = store.Resolve(name, catalog::Rehash::kIfChanged);
        bool identical = false;
        if (current.ok()) {
          auto listed = store.ListImages();
          if (listed.ok()) {
            for (const auto& l : *listed) {
              if (l.entry.name == name) identical = l.entry.artifacts == entry->artifacts;
            }
          }
        }
        if (!identical) {
          std::error_code ec;
          std::filesystem::remove_all(b.out_dir, ec);
          cli.Fail(ImageInUse(name, *users,
                              "this build differs from it, and replacing it would change their "
                              "base image under them"));
          return;
        }
        s = store.PublishLocal(*entry, b.out_dir);
      }
    }
    if (!s.ok()) {
      cli.Fail(s.error());
      return;
    }
    double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const catalog::Artifact* disk = entry->FindArtifact(catalog::kRoleDisk);
    char t[32];
    std::snprintf(t, sizeof t, "%.1f s", secs);
    cli.out() << "built " << entry->name << " " << entry->version << " in " << t << "\n"
              << "  disk sha256:" << disk->sha256 << " (" << FormatSize(disk->size) << ")\n"
              << (o->out.empty() ? "  signed into the local catalog; use it with "
                                   "`cloister create --image " + entry->name + "`\n"
                                 : "  published to " + o->out + " (channel " + o->channel +
                                       "); import it with `cloister image import " + o->out +
                                       "`\n");
  });
}

void AddLs(CLI::App& image, Cli& cli) {
  auto json = std::make_shared<bool>(false);
  auto* cmd = image.add_subcommand("ls", "List the images of every verified catalog");
  cmd->add_flag("--json", *json, "Print as JSON");
  cmd->callback([&cli, json] {
    CatalogStore store(cli.StoreRoot());
    auto list = store.ListImages();
    if (!list.ok()) {
      cli.Fail(list.error());
      return;
    }
    if (*json) {
      nlohmann::json arr = nlohmann::json::array();
      for (const auto& l : *list) {
        nlohmann::json j = EntryJson(l.entry);
        j["channel"] = l.channel;
        j["present"] = l.present;
        arr.push_back(j);
      }
      cli.PrintJson(arr);
      return;
    }
    if (list->empty()) {
      cli.out() << "no images (build one: `cloister image build`, or `cloister image build "
                   "--test`)\n";
      return;
    }
    char line[512];
    std::snprintf(line, sizeof line, "%-12s %-10s %-44s %-10s %-16s %s\n", "NAME", "CHANNEL",
                  "VERSION", "DISK", "SHA256", "SOURCE");
    cli.out() << line;
    for (const auto& l : *list) {
      const catalog::Artifact* disk = l.entry.FindArtifact(catalog::kRoleDisk);
      std::string source = ProvenanceOf(l.entry, "source");
      std::snprintf(line, sizeof line, "%-12s %-10s %-44s %-10s %-16s %s%s\n", l.entry.name.c_str(),
                    l.channel.c_str(), l.entry.version.c_str(),
                    FormatSize(disk ? disk->size : 0).c_str(),
                    disk ? disk->sha256.substr(0, 16).c_str() : "-",
                    source.empty() ? "-" : TerminalSafe(source).c_str(),
                    l.present ? "" : "  (artifacts missing)");
      cli.out() << line;
    }
  });
}

void AddDescribe(CLI::App& image, Cli& cli) {
  struct Opts {
    std::string name;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = image.add_subcommand(
      "describe", "Show an image's catalog entry: version, artifacts, where it came from");
  cmd->add_option("name", o->name, "Image name")->required();
  cmd->add_flag("--json", o->json, "Print as JSON");
  cmd->callback([&cli, o] {
    CatalogStore store(cli.StoreRoot());
    auto list = store.ListImages();
    if (!list.ok()) {
      cli.Fail(list.error());
      return;
    }
    for (const auto& l : *list) {
      if (l.entry.name != o->name) continue;
      if (o->json) {
        nlohmann::json j = EntryJson(l.entry);
        j["channel"] = l.channel;
        j["present"] = l.present;
        cli.PrintJson(j);
        return;
      }
      cli.out() << "name:     " << l.entry.name << "\n"
                << "channel:  " << l.channel << "\n"
                << "version:  " << l.entry.version << "\n";
      for (const auto& a : l.entry.artifacts) {
        cli.out() << a.role << ":" << std::string(9 - std::min<size_t>(8, a.role.size()), ' ')
                  << a.file << " " << FormatSize(a.size) << " sha256:" << a.sha256 << "\n";
      }
      cli.out() << "steps:    ";
      for (const auto& s : l.entry.post_install) cli.out() << s.name << " ";
      cli.out() << "\n";
      if (!l.entry.provenance.empty()) cli.out() << "provenance:\n";
      for (const auto& [k, v] : l.entry.provenance) {
        cli.out() << "  " << k << ": " << TerminalSafe(v) << "\n";
      }
      return;
    }
    cli.Fail(Error(ErrorCode::kNotFound, "no image \"" + o->name + "\" in the catalogs",
                   "`cloister image ls` lists them"));
  });
}

void AddVerify(CLI::App& image, Cli& cli) {
  auto name = std::make_shared<std::string>();
  auto* cmd = image.add_subcommand(
      "verify", "Re-hash image artifacts against the signed catalog (all images without NAME)");
  cmd->add_option("name", *name, "Image name");
  cmd->callback([&cli, name] {
    CatalogStore store(cli.StoreRoot());
    std::vector<std::string> names;
    if (!name->empty()) {
      names.push_back(*name);
    } else {
      auto list = store.ListImages();
      if (!list.ok()) {
        cli.Fail(list.error());
        return;
      }
      for (const auto& l : *list) names.push_back(l.entry.name);
    }
    if (names.empty()) {
      cli.Fail(Error(ErrorCode::kNotFound, "no images to verify", "build one: `cloister image build`"));
      return;
    }
    for (const auto& n : names) {
      auto start = std::chrono::steady_clock::now();
      auto r = store.Resolve(n, catalog::Rehash::kYes);
      if (!r.ok()) {
        cli.Fail(r.error());
        return;
      }
      double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      char t[32];
      std::snprintf(t, sizeof t, "%.1f s", secs);
      cli.out() << "ok " << r->name << " " << r->version << " (channel " << r->channel
                << ", disk sha256:" << r->sha256.substr(0, 16) << "..., " << t << ")\n";
    }
  });
}

void AddImport(CLI::App& image, Cli& cli) {
  struct Opts {
    std::string dir;
    std::string channel;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = image.add_subcommand(
      "import", "Import a catalog, its signature and its artifacts published elsewhere");
  cmd->add_option("dir", o->dir, "Directory with catalog.json, catalog.json.sig, <name>/...")
      ->required();
  cmd->add_option("--channel", o->channel,
                  "Channel the catalog must be for (default: the one it names; its key must be "
                  "trusted for it)");
  cmd->callback([&cli, o] {
    CatalogStore store(cli.StoreRoot());
    auto c = store.Import(o->dir, o->channel,
                          [&cli](const std::string& l) { cli.err() << l << std::endl; });
    if (!c.ok()) {
      cli.Fail(c.error());
      return;
    }
    cli.out() << "imported channel " << c->channel << " sequence " << c->sequence << ":";
    for (const auto& e : c->images) cli.out() << " " << e.name;
    cli.out() << "\n";
  });
}

void AddRm(CLI::App& image, Cli& cli) {
  struct Opts {
    std::string name;
    bool yes = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = image.add_subcommand("rm", "Remove an image's artifacts (refused while in use)");
  cmd->add_option("name", o->name, "Image name")->required();
  cmd->add_flag("-f,--yes", o->yes, "Do not ask for confirmation");
  cmd->callback([&cli, o] {
    CatalogStore catalogs(cli.StoreRoot());
    auto store = OpenStore(cli);
    if (!store.ok()) {
      cli.Fail(store.error());
      return;
    }
    std::string dir = catalogs.ImageDir(o->name);
    // Asked before confirming, and again under the store lock while removing (a `create` may
    // have started meanwhile).
    auto users = (*store)->IfImageUnused(dir, [] { return OkStatus(); });
    if (users.ok() && users->empty()) {
      Status ok = cli.Confirm("Remove image " + o->name + "?", o->yes);
      if (!ok.ok()) {
        cli.Fail(ok.error());
        return;
      }
      users = (*store)->IfImageUnused(dir, [&] { return catalogs.Remove(o->name); });
    }
    if (!users.ok()) {
      cli.Fail(users.error());
      return;
    }
    if (!users->empty()) {
      cli.Fail(ImageInUse(o->name, *users, "removing it would break them"));
      return;
    }
    cli.out() << "removed image " << o->name << "\n";
  });
}

void AddKey(CLI::App& image, Cli& cli) {
  auto* cmd = image.add_subcommand(
      "key", "Print this host's publisher public key (give it to machines that import from here)");
  cmd->callback([&cli] {
    CatalogStore store(cli.StoreRoot());
    auto line = store.LocalPublicKey();
    if (!line.ok()) {
      cli.Fail(line.error());
      return;
    }
    cli.out() << *line;
  });
}

void AddTrust(CLI::App& image, Cli& cli) {
  struct Opts {
    std::string file;
    std::string channel;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = image.add_subcommand("trust", "Trust a publisher key (from `image key`) for a channel");
  cmd->add_option("keyfile", o->file, "File holding the publisher key line")->required();
  cmd->add_option("--channel", o->channel, "Channel the key may sign")->required();
  cmd->callback([&cli, o] {
    std::ifstream in(o->file);
    if (!in) {
      cli.Fail(Error(ErrorCode::kNotFound, "cannot read " + o->file));
      return;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    CatalogStore store(cli.StoreRoot());
    Status s = store.TrustKey(ss.str(), o->channel);
    if (!s.ok()) {
      cli.Fail(s.error());
      return;
    }
    cli.out() << "trusted key for channel " << o->channel << "\n";
  });
}

}  // namespace

void AddImageCommand(CLI::App& app, Cli& cli) {
  auto* image = app.add_subcommand("image", "Build, list, verify, import and remove base images");
  image->require_subcommand(1);
  AddBuild(*image, cli);
  AddLs(*image, cli);
  AddDescribe(*image, cli);
  AddVerify(*image, cli);
  AddImport(*image, cli);
  AddRm(*image, cli);
  AddKey(*image, cli);
  AddTrust(*image, cli);
}

}  // namespace cloister::cli
