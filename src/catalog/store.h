// The catalog store: adopted catalogs per channel, the keyring, the local publisher, and the image
// artifacts they vouch for. The one gate between "a file on disk" and "an image a workspace may
// be cloned from".
//
// Layout (docs/layout.md): <store>/catalogs/<channel>/{catalog.json,catalog.json.sig},
// <store>/keys/{keyring.json,publisher.key,publisher.pub}, <store>/images/<name>/<artifacts>.
// Image names are unique across channels.
//
// Concurrency: mutating calls (Adopt, PublishLocal, Import, Remove) hold an exclusive flock on
// <store>/catalogs/.lock.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "catalog/catalog.h"
#include "catalog/keyring.h"

namespace cloister::catalog {

// What `cloister create --image NAME` clones from, after verification.
struct ResolvedImage {
  std::string name;
  std::string version;
  std::string arch;
  std::string channel;
  std::string sha256;       // of the disk artifact (the identity a workspace records)
  uint64_t disk_size = 0;
  std::string disk_path;    // raw ext4, read-only for callers: clone it, never write it
  std::string kernel_path;
  std::string initrd_path;
  std::string kernel_cmdline;
};

struct ListedImage {
  std::string channel;
  ImageEntry entry;
  bool present = false;  // artifact files exist with the signed sizes
};

// How much of an artifact's bytes is checked against the signed catalog:
//   kNo        sizes only (listing);
//   kIfChanged the SHA-256 recorded in images/<name>/verified.json when the file's identity
//              (device, inode, size, mtime, ctime) is what it was when those bytes were last
//              hashed, else a full re-hash (then recorded). Any write to the file changes its
//              ctime, which no userspace call can set back, so tampered bytes are always
//              re-hashed and refused; an untouched image costs a stat. `create` uses this.
//   kYes       always a full re-hash (`image verify`), recorded on success.
enum class Rehash { kNo, kIfChanged, kYes };

class CatalogStore {
 public:
  explicit CatalogStore(std::string store_root) : root_(std::move(store_root)) {}

  std::string ImageDir(const std::string& name) const;
  std::string CatalogDir(const std::string& channel) const;
  std::string KeyringPath() const;
  std::string PublisherKeyPath() const;

  // Verifies a catalog document and its signature (nullopt: no .sig file) for adoption into
  // `channel` (empty: the catalog's own channel): signature present, well-formed, by a key in the
  // keyring allowed for the channel, channel matches, sequence not below the adopted one (equal
  // only with identical content). Does not check artifacts.
  Result<Catalog> VerifyDocument(const std::string& catalog_text,
                                 const std::optional<std::string>& signature_text,
                                 const std::string& channel) const;

  // The adopted catalog of `channel`, re-verified against the keyring (nullopt: none adopted).
  Result<std::optional<Catalog>> LoadAdopted(const std::string& channel) const;
  Result<std::vector<std::string>> Channels() const;
  // Every image of every adopted catalog. Fails if any adopted catalog fails verification.
  Result<std::vector<ListedImage>> ListImages() const;

  // Checks the artifact files of `entry` in ImageDir(entry.name): sizes always, SHA-256 as
  // `rehash` says. `progress` receives bytes hashed so far.
  Status VerifyArtifacts(const ImageEntry& entry, Rehash rehash,
                         const std::function<void(uint64_t)>& progress = {}) const;

  // The image called `name` from a verified catalog, with its artifacts checked as `rehash`
  // says. Anything not in a verified catalog is refused: there is no way around this. kNotFound
  // (hint: image ls / image build) for a name no verified catalog lists.
  Result<ResolvedImage> Resolve(const std::string& name,
                                Rehash rehash = Rehash::kIfChanged) const;

  // Local build: moves the artifacts in `built_dir` to ImageDir(entry.name), then signs and adopts
  // a new local-channel catalog (sequence + 1) listing `entry` (replacing an image of that name).
  // If the image in place has identical artifacts (a reproducible rebuild) whose files still
  // verify, those files are kept and `built_dir` is deleted. Replacing an image with different
  // bytes while a workspace uses it breaks that workspace: the CLI refuses it (Store::IfImageUnused).
  // Creates the publisher key and trusts it for "local" on first use.
  Status PublishLocal(const ImageEntry& entry, const std::string& built_dir);

  // `cloister image import DIR`: DIR holds catalog.json, catalog.json.sig and each image's
  // artifacts in DIR/<name>/ (or directly in DIR when the catalog lists one image). Verifies the
  // document, copies and hashes every artifact, and only then installs them and adopts the
  // catalog. On any failure nothing is adopted or left behind.
  Result<Catalog> Import(const std::string& dir, const std::string& channel,
                         const std::function<void(const std::string&)>& progress = {});

  // Removes an image's artifacts. For the local channel the entry is also dropped (re-signed);
  // another publisher's catalog stays adopted (rollback protection) and lists it as absent.
  Status Remove(const std::string& name);

  // The local publisher key as a shareable line (creates the key on first use).
  Result<std::string> LocalPublicKey();
  // Trusts a publisher key (from FormatPublicKey) for `channel`; "local" is reserved.
  Status TrustKey(const std::string& key_text, const std::string& channel);

 private:
  // Records in ImageDir(entry.name)/verified.json that each artifact file, as it is now, has
  // the entry's SHA-256 (called right after those bytes were hashed: build, import, verify).
  Status RecordVerified(const ImageEntry& entry) const;
  Status AdoptVerified(const Catalog& c, const std::string& catalog_text,
                       const std::string& signature_text);
  Result<std::string> SignLocal(const Catalog& c);
  std::string root_;
};

}  // namespace cloister::catalog
