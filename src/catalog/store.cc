#include "catalog/store.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/file_util.h"
#include "base/json_util.h"
#include "base/strings.h"
#include "catalog/names.h"
#include "catalog/sha256.h"
#include "catalog/signing.h"

namespace cloister::catalog {

namespace fs = std::filesystem;

namespace {

// Reads at most `max` bytes; nullopt if the file does not exist.
Result<std::optional<std::string>> ReadOptional(const std::string& path, size_t max) {
  auto data = ReadFileBounded(path, max);
  if (data.ok()) return std::optional<std::string>(std::move(*data));
  if (data.error().code() == ErrorCode::kNotFound) return std::optional<std::string>();
  if (data.error().code() == ErrorCode::kCorrupt) {
    return Rejected(Rejection::kMalformed, path + " is larger than " + FormatSize(max));
  }
  return data.error();
}

Status MkdirP(const std::string& path, unsigned mode = 0755) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return ErrnoError("mkdir " + path, ec.value());
  chmod(path.c_str(), mode);
  return OkStatus();
}

void RemoveAll(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
}


// Replaces directory `dst` with `src` atomically (exchange, then delete the old one).
Status SwapDirInto(const std::string& src, const std::string& dst) {
  if (renameat2(AT_FDCWD, src.c_str(), AT_FDCWD, dst.c_str(), RENAME_EXCHANGE) == 0) {
    RemoveAll(src);  // now holds the old contents
    return OkStatus();
  }
  if (errno != ENOENT) return ErrnoError("exchange " + src + " and " + dst, errno);
  if (rename(src.c_str(), dst.c_str()) != 0) return ErrnoError("rename " + src, errno);
  return OkStatus();
}

// Copies `from` to `to` (holes stay holes) while hashing what was read.
Result<FileDigest> CopyAndHash(const std::string& from, const std::string& to) {
  int in = open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return ErrnoError("open " + from, errno);
  int out = open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) {
    int e = errno;
    close(in);
    return ErrnoError("create " + to, e);
  }
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
  std::vector<char> buf(1 << 20);
  FileDigest d;
  Status status;
  for (;;) {
    ssize_t n = read(in, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      status = ErrnoError("read " + from, errno);
      break;
    }
    if (n == 0) break;
    EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(n));
    bool zero = std::all_of(buf.begin(), buf.begin() + n, [](char c) { return c == 0; });
    if (zero) {
      lseek(out, n, SEEK_CUR);
    } else {
      ssize_t off = 0;
      while (off < n) {
        ssize_t w = write(out, buf.data() + off, static_cast<size_t>(n - off));
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) break;
        off += w;
      }
      if (off < n) {
        status = ErrnoError("write " + to, errno);
        break;
      }
    }
    d.size += static_cast<uint64_t>(n);
  }
  if (status.ok() && ftruncate(out, static_cast<off_t>(d.size)) != 0) {
    status = ErrnoError("truncate " + to, errno);
  }
  if (status.ok() && fsync(out) != 0) status = ErrnoError("fsync " + to, errno);
  close(in);
  close(out);
  if (!status.ok()) return status.error();
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &len);
  d.sha256 = HexEncode(std::string_view(reinterpret_cast<char*>(md), len));
  return d;
}

// The identity of a file's current bytes as far as the kernel tells: a write changes mtime and
// ctime; ctime cannot be set from userspace; replacing the file changes the inode.
struct FileStamp {
  uint64_t dev = 0, inode = 0, size = 0;
  int64_t mtime_ns = 0, ctime_ns = 0;
  nlohmann::json ToJson(const std::string& sha256) const {
    return {{"sha256", sha256}, {"dev", dev},           {"inode", inode},
            {"size", size},     {"mtime_ns", mtime_ns}, {"ctime_ns", ctime_ns}};
  }
  bool Matches(const nlohmann::json& j) const {
    return j.is_object() && JsonInt<uint64_t>(j, "dev", 1) == dev &&
           JsonInt<uint64_t>(j, "inode", 0) == inode && JsonInt<uint64_t>(j, "size", 0) == size &&
           JsonInt<int64_t>(j, "mtime_ns", -1) == mtime_ns &&
           JsonInt<int64_t>(j, "ctime_ns", -1) == ctime_ns;
  }
};

Result<FileStamp> StampOf(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return ErrnoError("stat " + path, errno);
  FileStamp f;
  f.dev = static_cast<uint64_t>(st.st_dev);
  f.inode = static_cast<uint64_t>(st.st_ino);
  f.size = static_cast<uint64_t>(st.st_size);
  f.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  f.ctime_ns = static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
  return f;
}

// images/<name>/verified.json; a missing or damaged file only costs a re-hash.
nlohmann::json LoadVerified(const std::string& path) {
  auto text = ReadOptional(path, 1 << 20);
  if (!text.ok() || !*text) return nlohmann::json::object();
  nlohmann::json j = nlohmann::json::parse(**text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return nlohmann::json::object();
  return j;
}

std::string HostName() {
  char h[256] = {0};
  gethostname(h, sizeof h - 1);
  return h;
}

}  // namespace

std::string CatalogStore::ImageDir(const std::string& name) const {
  return root_ + "/" + names::kImagesDir + "/" + name;
}
std::string CatalogStore::CatalogDir(const std::string& channel) const {
  return root_ + "/" + names::kCatalogsDir + "/" + channel;
}
std::string CatalogStore::KeyringPath() const {
  return root_ + "/" + names::kKeysDir + "/" + names::kKeyringFile;
}
std::string CatalogStore::PublisherKeyPath() const {
  return root_ + "/" + names::kKeysDir + "/" + names::kPublisherKeyFile;
}

Result<Catalog> CatalogStore::VerifyDocument(const std::string& catalog_text,
                                             const std::optional<std::string>& signature_text,
                                             const std::string& channel) const {
  // SECURITY: both documents are untrusted until every check below has passed.
  ASSIGN_OR_RETURN(Catalog c, ParseCatalog(catalog_text));
  if (!signature_text) {
    return Rejected(Rejection::kMissingSignature,
                    "catalog for channel \"" + c.channel + "\" has no signature file");
  }
  ASSIGN_OR_RETURN(SignatureFile sig, ParseSignature(*signature_text));
  ASSIGN_OR_RETURN(Keyring keyring, Keyring::Load(KeyringPath()));
  const TrustedKey* key = keyring.Find(sig.key_id);
  if (!key) {
    return Rejected(Rejection::kUnknownKey, "signed by key " + sig.key_id +
                                                ", which is not in the keyring");
  }
  if (!VerifyEd25519(key->public_key, CanonicalBytes(c), sig.signature)) {
    return Rejected(Rejection::kBadSignature,
                    "signature by key " + sig.key_id + " does not match the catalog");
  }
  std::string expected = channel.empty() ? c.channel : channel;
  if (c.channel != expected) {
    return Rejected(Rejection::kWrongChannel, "catalog is for channel \"" + c.channel +
                                                  "\", not \"" + expected + "\"");
  }
  if (!key->AllowsChannel(c.channel)) {
    return Rejected(Rejection::kKeyNotForChannel,
                    "key " + sig.key_id + " is not trusted for channel \"" + c.channel + "\"");
  }
  ASSIGN_OR_RETURN(std::optional<Catalog> adopted, LoadAdopted(c.channel));
  if (adopted) {
    if (c.sequence < adopted->sequence) {
      return Rejected(Rejection::kRollback,
                      "catalog sequence " + std::to_string(c.sequence) + " is older than the " +
                          "adopted " + std::to_string(adopted->sequence) + " for channel \"" +
                          c.channel + "\"");
    }
    if (c.sequence == adopted->sequence && CanonicalBytes(c) != CanonicalBytes(*adopted)) {
      return Rejected(Rejection::kRollback,
                      "catalog reuses sequence " + std::to_string(c.sequence) +
                          " with different content");
    }
  }
  return c;
}

Result<std::optional<Catalog>> CatalogStore::LoadAdopted(const std::string& channel) const {
  std::string dir = CatalogDir(channel);
  ASSIGN_OR_RETURN(auto text, ReadOptional(dir + "/" + names::kCatalogFile, kMaxCatalogBytes));
  if (!text) return std::optional<Catalog>();
  ASSIGN_OR_RETURN(auto sig_text, ReadOptional(dir + "/" + names::kSignatureFile, 4096));
  ASSIGN_OR_RETURN(Catalog c, ParseCatalog(*text));
  if (!sig_text) {
    return Rejected(Rejection::kMissingSignature,
                    "adopted catalog " + dir + " has lost its signature file");
  }
  ASSIGN_OR_RETURN(SignatureFile sig, ParseSignature(*sig_text));
  ASSIGN_OR_RETURN(Keyring keyring, Keyring::Load(KeyringPath()));
  const TrustedKey* key = keyring.Find(sig.key_id);
  if (!key) return Rejected(Rejection::kUnknownKey, "adopted catalog " + dir + " key " + sig.key_id);
  if (!VerifyEd25519(key->public_key, CanonicalBytes(c), sig.signature)) {
    return Rejected(Rejection::kBadSignature, "adopted catalog " + dir + " was modified");
  }
  if (c.channel != channel) {
    return Rejected(Rejection::kWrongChannel, "adopted catalog in " + dir + " is for channel \"" +
                                                  c.channel + "\"");
  }
  if (!key->AllowsChannel(channel)) {
    return Rejected(Rejection::kKeyNotForChannel, "adopted catalog " + dir);
  }
  return std::optional<Catalog>(std::move(c));
}

Result<std::vector<std::string>> CatalogStore::Channels() const {
  std::vector<std::string> out;
  std::error_code ec;
  std::string dir = root_ + "/" + names::kCatalogsDir;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string n = e.path().filename().string();
    if (e.is_directory() && IsValidName(n)) out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<std::vector<ListedImage>> CatalogStore::ListImages() const {
  std::vector<ListedImage> out;
  ASSIGN_OR_RETURN(auto channels, Channels());
  for (const auto& ch : channels) {
    ASSIGN_OR_RETURN(auto c, LoadAdopted(ch));
    if (!c) continue;
    for (const auto& e : c->images) {
      out.push_back({ch, e, VerifyArtifacts(e, Rehash::kNo).ok()});
    }
  }
  return out;
}

Status CatalogStore::VerifyArtifacts(const ImageEntry& entry, Rehash rehash,
                                     const std::function<void(uint64_t)>& progress) const {
  uint64_t done = 0;
  std::string verified_path = ImageDir(entry.name) + "/" + names::kVerifiedFile;
  nlohmann::json verified = rehash == Rehash::kIfChanged ? LoadVerified(verified_path)
                                                         : nlohmann::json::object();
  bool record = false;
  for (const auto& a : entry.artifacts) {
    std::string path = ImageDir(entry.name) + "/" + a.file;
    struct stat st;
    if (stat(path.c_str(), &st) != 0) {
      return Rejected(Rejection::kMissingArtifact, entry.name + ": " + path + " is missing");
    }
    if (static_cast<uint64_t>(st.st_size) != a.size) {
      return Rejected(Rejection::kArtifactMismatch,
                      entry.name + ": " + a.file + " is " + std::to_string(st.st_size) +
                          " bytes, the catalog says " + std::to_string(a.size));
    }
    if (rehash == Rehash::kNo) continue;
    ASSIGN_OR_RETURN(FileStamp before, StampOf(path));
    if (rehash == Rehash::kIfChanged) {
      auto it = verified.find(a.file);
      if (it != verified.end() && before.Matches(*it) && it->is_object() &&
          it->value("sha256", std::string()) == a.sha256) {
        continue;  // these very bytes were hashed to the signed digest
      }
    }
    ASSIGN_OR_RETURN(FileDigest d, Sha256File(path));
    if (d.sha256 != a.sha256 || d.size != a.size) {
      return Rejected(Rejection::kArtifactMismatch,
                      entry.name + ": " + a.file + " has SHA-256 " + d.sha256 +
                          ", the catalog says " + a.sha256);
    }
    done += d.size;
    if (progress) progress(done);
    auto after = StampOf(path);
    if (after.ok() && after->Matches(before.ToJson(""))) {  // unchanged while it was hashed
      if (!record) verified = LoadVerified(verified_path);
      verified[a.file] = before.ToJson(a.sha256);
      record = true;
    }
  }
  if (record) {
    // Best effort: a stale or missing record only costs a re-hash next time.
    Status s = WriteFileAtomic(verified_path, verified.dump(2) + "\n", 0644);
    (void)s;
  }
  return OkStatus();
}

Status CatalogStore::RecordVerified(const ImageEntry& entry) const {
  nlohmann::json verified = nlohmann::json::object();
  for (const auto& a : entry.artifacts) {
    ASSIGN_OR_RETURN(FileStamp f, StampOf(ImageDir(entry.name) + "/" + a.file));
    verified[a.file] = f.ToJson(a.sha256);
  }
  return WriteFileAtomic(ImageDir(entry.name) + "/" + names::kVerifiedFile,
                         verified.dump(2) + "\n", 0644);
}

Result<ResolvedImage> CatalogStore::Resolve(const std::string& name, Rehash rehash) const {
  if (!IsValidName(name)) {
    return Error(ErrorCode::kInvalidArgument, "invalid image name \"" + name + "\"",
                 "image names are listed by `cloister image ls`");
  }
  ASSIGN_OR_RETURN(auto channels, Channels());
  for (const auto& ch : channels) {
    ASSIGN_OR_RETURN(auto c, LoadAdopted(ch));
    if (!c) continue;
    const ImageEntry* e = c->Find(name);
    if (!e) continue;
    RETURN_IF_ERROR(VerifyArtifacts(*e, rehash));
    ResolvedImage r;
    r.name = e->name;
    r.version = e->version;
    r.arch = e->arch;
    r.channel = ch;
    r.kernel_cmdline = e->kernel_cmdline;
    const Artifact* disk = e->FindArtifact(kRoleDisk);
    const Artifact* kernel = e->FindArtifact(kRoleKernel);
    const Artifact* initrd = e->FindArtifact(kRoleInitrd);
    if (!disk || !kernel || !initrd) {
      return Rejected(Rejection::kMalformed, name + " lacks a disk, kernel or initrd");
    }
    r.sha256 = disk->sha256;
    r.disk_size = disk->size;
    r.disk_path = ImageDir(name) + "/" + disk->file;
    r.kernel_path = ImageDir(name) + "/" + kernel->file;
    r.initrd_path = ImageDir(name) + "/" + initrd->file;
    return r;
  }
  return Error(ErrorCode::kNotFound, "image \"" + name + "\" is not in any verified catalog",
               std::string("see `cloister image ls`; ") +
                   (name == "test" ? "build it with `cloister image build --test`"
                                   : "build it (`cloister image build`) or import it "
                                     "(`cloister image import DIR`)"));
}

Result<std::string> CatalogStore::SignLocal(const Catalog& c) {
  ASSIGN_OR_RETURN(PublisherKey key, PublisherKey::LoadOrCreate(PublisherKeyPath()));
  ASSIGN_OR_RETURN(std::string sig, key.Sign(CanonicalBytes(c)));
  return SerializeSignature({key.key_id(), sig});
}

Result<std::string> CatalogStore::LocalPublicKey() {
  RETURN_IF_ERROR(MkdirP(root_ + "/" + names::kKeysDir, 0700));
  ASSIGN_OR_RETURN(PublisherKey key, PublisherKey::LoadOrCreate(PublisherKeyPath()));
  std::string line = FormatPublicKey(key.public_key(), "cloister local publisher on " + HostName());
  RETURN_IF_ERROR(WriteFileAtomic(root_ + "/" + names::kKeysDir + "/" + names::kPublisherPubFile,
                                  line, 0644));
  ASSIGN_OR_RETURN(Keyring keyring, Keyring::Load(KeyringPath()));
  const TrustedKey* t = keyring.Find(key.key_id());
  if (!t || !t->AllowsChannel(kLocalChannel)) {
    keyring.Trust(key.public_key(), kLocalChannel, "local publisher on " + HostName());
    RETURN_IF_ERROR(keyring.Save(KeyringPath()));
  }
  return line;
}

Status CatalogStore::TrustKey(const std::string& key_text, const std::string& channel) {
  if (!IsValidName(channel)) {
    return Error(ErrorCode::kInvalidArgument, "invalid channel name \"" + channel + "\"");
  }
  if (channel == kLocalChannel) {
    return Error(ErrorCode::kInvalidArgument,
                 "channel \"local\" is reserved for this host's own builds",
                 "trust another machine's key for its own channel, e.g. --channel build-host");
  }
  ASSIGN_OR_RETURN(std::string pub, ParsePublicKey(key_text));
  RETURN_IF_ERROR(MkdirP(root_ + "/" + names::kKeysDir, 0700));
  ASSIGN_OR_RETURN(auto lock, FlockGuard::Acquire(root_ + "/" + names::kKeysDir + "/" + names::kLockFile));
  ASSIGN_OR_RETURN(Keyring keyring, Keyring::Load(KeyringPath()));
  keyring.Trust(pub, channel, "trusted for " + channel);
  return keyring.Save(KeyringPath());
}

Status CatalogStore::AdoptVerified(const Catalog& c, const std::string& catalog_text,
                                   const std::string& signature_text) {
  std::string base = root_ + "/" + names::kCatalogsDir;
  std::string staging = base + "/" + names::kCatalogStagingPrefix + c.channel;
  RemoveAll(staging);
  RETURN_IF_ERROR(MkdirP(staging));
  RETURN_IF_ERROR(WriteFileAtomic(staging + "/" + names::kCatalogFile, catalog_text, 0644));
  RETURN_IF_ERROR(WriteFileAtomic(staging + "/" + names::kSignatureFile, signature_text, 0644));
  Status s = SwapDirInto(staging, CatalogDir(c.channel));
  if (!s.ok()) RemoveAll(staging);
  return s;
}

Status CatalogStore::PublishLocal(const ImageEntry& entry, const std::string& built_dir) {
  RETURN_IF_ERROR(MkdirP(root_ + "/" + names::kCatalogsDir));
  RETURN_IF_ERROR(MkdirP(root_ + "/" + names::kImagesDir));
  ASSIGN_OR_RETURN(auto lock, FlockGuard::Acquire(root_ + "/" + names::kCatalogsDir + "/" + names::kLockFile));
  {
    auto pub = LocalPublicKey();  // creates and trusts the publisher key on first use
    if (!pub.ok()) return pub.error();
  }
  ASSIGN_OR_RETURN(auto channels, Channels());
  for (const auto& ch : channels) {
    if (ch == kLocalChannel) continue;
    ASSIGN_OR_RETURN(auto other, LoadAdopted(ch));
    if (other && other->Find(entry.name)) {
      return Error(ErrorCode::kAlreadyExists,
                   "image \"" + entry.name + "\" already comes from channel \"" + ch + "\"",
                   "remove it first: `cloister image rm " + entry.name + "`");
    }
  }
  ASSIGN_OR_RETURN(auto existing, LoadAdopted(kLocalChannel));
  Catalog c;
  c.channel = kLocalChannel;
  c.sequence = existing ? existing->sequence + 1 : 1;
  c.signed_at = static_cast<int64_t>(std::time(nullptr));
  if (existing) {
    for (const auto& e : existing->images) {
      if (e.name != entry.name) c.images.push_back(e);
    }
  }
  c.images.push_back(entry);
  std::sort(c.images.begin(), c.images.end(),
            [](const ImageEntry& a, const ImageEntry& b) { return a.name < b.name; });
  std::string target = ImageDir(entry.name);
  const ImageEntry* old = existing ? existing->Find(entry.name) : nullptr;
  if (old && old->artifacts == entry.artifacts && VerifyArtifacts(*old, Rehash::kIfChanged).ok()) {
    // A reproducible rebuild: the files in place already hold exactly these bytes. Keep them
    // (same inodes and times), so workspaces cloned from or layered over them stay valid.
    RemoveAll(built_dir);
  } else {
    if (fs::path(built_dir).lexically_normal() != fs::path(target).lexically_normal()) {
      RETURN_IF_ERROR(SwapDirInto(built_dir, target));
    }
    RETURN_IF_ERROR(VerifyArtifacts(entry, Rehash::kNo));
    // The builder hashed these very files; later creates need only stat them.
    RETURN_IF_ERROR(RecordVerified(entry));
  }
  std::string text = SerializeCatalog(c);
  ASSIGN_OR_RETURN(std::string sig, SignLocal(c));
  // Verify exactly what will be adopted, as any other catalog (also checks rollback).
  ASSIGN_OR_RETURN(Catalog verified, VerifyDocument(text, sig, kLocalChannel));
  return AdoptVerified(verified, text, sig);
}

Result<Catalog> CatalogStore::Import(const std::string& dir, const std::string& channel,
                                     const std::function<void(const std::string&)>& progress) {
  ASSIGN_OR_RETURN(auto text, ReadOptional(dir + "/" + names::kCatalogFile, kMaxCatalogBytes));
  if (!text) {
    return Error(ErrorCode::kNotFound, dir + " has no " + names::kCatalogFile,
                 "import a directory holding catalog.json, catalog.json.sig and the artifacts");
  }
  ASSIGN_OR_RETURN(auto sig, ReadOptional(dir + "/" + names::kSignatureFile, 4096));
  RETURN_IF_ERROR(MkdirP(root_ + "/" + names::kCatalogsDir));
  RETURN_IF_ERROR(MkdirP(root_ + "/" + names::kImagesDir));
  ASSIGN_OR_RETURN(auto lock, FlockGuard::Acquire(root_ + "/" + names::kCatalogsDir + "/" + names::kLockFile));
  ASSIGN_OR_RETURN(Catalog c, VerifyDocument(*text, sig, channel));
  ASSIGN_OR_RETURN(auto channels, Channels());
  for (const auto& ch : channels) {
    if (ch == c.channel) continue;
    ASSIGN_OR_RETURN(auto other, LoadAdopted(ch));
    for (const auto& e : c.images) {
      if (other && other->Find(e.name)) {
        return Error(ErrorCode::kAlreadyExists,
                     "image \"" + e.name + "\" already comes from channel \"" + ch + "\"",
                     "remove it first: `cloister image rm " + e.name + "`");
      }
    }
  }
  // Copy and hash every artifact into staging dirs; install only when all match.
  std::vector<std::pair<std::string, std::string>> staged;  // staging dir, image name
  auto cleanup = [&] {
    for (const auto& [s, n] : staged) RemoveAll(s);
  };
  for (const auto& e : c.images) {
    std::string src = dir + "/" + e.name;
    if (!fs::is_directory(src)) {
      if (c.images.size() != 1) {
        cleanup();
        return Rejected(Rejection::kMissingArtifact, "no directory " + src);
      }
      src = dir;
    }
    std::string stage = root_ + "/" + names::kImagesDir + "/" + names::kImportPrefix + e.name;
    RemoveAll(stage);
    staged.push_back({stage, e.name});
    RETURN_IF_ERROR(MkdirP(stage));
    for (const auto& a : e.artifacts) {
      std::string from = src + "/" + a.file;
      struct stat st;
      if (stat(from.c_str(), &st) != 0) {
        cleanup();
        return Rejected(Rejection::kMissingArtifact, e.name + ": " + from + " is missing");
      }
      if (static_cast<uint64_t>(st.st_size) != a.size) {
        cleanup();
        return Rejected(Rejection::kArtifactMismatch,
                        e.name + ": " + a.file + " is " + std::to_string(st.st_size) +
                            " bytes, the catalog says " + std::to_string(a.size));
      }
      if (progress) progress("import: copying and hashing " + e.name + "/" + a.file);
      auto d = CopyAndHash(from, stage + "/" + a.file);
      if (!d.ok()) {
        cleanup();
        return d.error();
      }
      if (d->size != a.size || d->sha256 != a.sha256) {
        cleanup();
        return Rejected(Rejection::kArtifactMismatch, e.name + ": " + a.file + " has SHA-256 " +
                                                          d->sha256 + ", the catalog says " +
                                                          a.sha256);
      }
    }
  }
  for (const auto& [stage, name] : staged) {
    Status s = SwapDirInto(stage, ImageDir(name));
    if (!s.ok()) {
      cleanup();
      return s.error();
    }
  }
  // Every artifact was hashed while it was copied in; later creates need only stat them.
  for (const auto& e : c.images) RETURN_IF_ERROR(RecordVerified(e));
  std::string sig_text = *sig;
  RETURN_IF_ERROR(AdoptVerified(c, *text, sig_text));
  return c;
}

Status CatalogStore::Remove(const std::string& name) {
  ASSIGN_OR_RETURN(auto lock, FlockGuard::Acquire(root_ + "/" + names::kCatalogsDir + "/" + names::kLockFile));
  ASSIGN_OR_RETURN(auto channels, Channels());
  for (const auto& ch : channels) {
    ASSIGN_OR_RETURN(auto c, LoadAdopted(ch));
    if (!c || !c->Find(name)) continue;
    if (ch == kLocalChannel) {
      Catalog next = *c;
      next.sequence = c->sequence + 1;
      next.signed_at = static_cast<int64_t>(std::time(nullptr));
      next.images.erase(std::remove_if(next.images.begin(), next.images.end(),
                                       [&](const ImageEntry& e) { return e.name == name; }),
                        next.images.end());
      std::string text = SerializeCatalog(next);
      ASSIGN_OR_RETURN(std::string sig, SignLocal(next));
      ASSIGN_OR_RETURN(Catalog verified, VerifyDocument(text, sig, kLocalChannel));
      RETURN_IF_ERROR(AdoptVerified(verified, text, sig));
    }
    std::string trash = root_ + "/" + names::kImagesDir + "/" + names::kRemovePrefix + name;
    RemoveAll(trash);
    if (rename(ImageDir(name).c_str(), trash.c_str()) == 0) RemoveAll(trash);
    return OkStatus();
  }
  return Error(ErrorCode::kNotFound, "image \"" + name + "\" is not in any catalog",
               "see `cloister image ls`");
}

}  // namespace cloister::catalog
