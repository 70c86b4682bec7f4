// The signed image catalog: the document, its canonical byte encoding, strict parsing, and the
// reasons a catalog is rejected.
//
// A catalog lists images (entry.h) for one channel, with a sequence number (rollback protection:
// a channel's sequence never goes down) and a signing time. It is stored as JSON (catalog.json)
// for people and tools, but the Ed25519 signature (catalog.json.sig, signing.h) covers
// CanonicalBytes(): a domain-separation tag, then every field in a fixed order, each
// length-prefixed, so free text (versions, post-install commands) can never smuggle fields or
// lines, and the channel is inside the signed bytes so one channel's catalog cannot be replayed
// on another.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "catalog/entry.h"

namespace cloister::catalog {

inline constexpr char kCatalogFormat[] = "cloister-catalog-v1";
// First bytes of the signed encoding (domain separation from anything else a key might sign).
inline constexpr char kCanonicalDomain[] = "cloister/catalog/v1/ed25519";
inline constexpr char kLocalChannel[] = "local";
// The image `create` uses when --image is omitted (the full image `cloister image build` makes).
inline constexpr char kDefaultImageName[] = "debian-12";
inline constexpr size_t kMaxCatalogBytes = 4 << 20;
inline constexpr size_t kMaxImages = 256;
inline constexpr size_t kMaxSteps = 128;
inline constexpr size_t kMaxCommandBytes = 64 << 10;
inline constexpr size_t kMaxProvenance = 64;

struct Catalog {
  std::string channel;       // [a-z0-9][a-z0-9._-]{0,63}
  uint64_t sequence = 0;     // >= 1; strictly increases per channel
  int64_t signed_at = 0;     // unix seconds
  std::vector<ImageEntry> images;

  const ImageEntry* Find(const std::string& name) const {
    for (const auto& i : images) {
      if (i.name == name) return &i;
    }
    return nullptr;
  }
  bool operator==(const Catalog&) const = default;
};

// Why a catalog or image was refused. Each has its own message token ("catalog rejected
// (bad-signature): ..."), so tests and callers can tell them apart; nothing is adopted on any.
enum class Rejection {
  kMissingSignature,  // no .sig file: as fatal as a bad one
  kBadSignature,      // signature does not verify, or the .sig file is malformed
  kUnknownKey,        // signed by a key not in the keyring
  kKeyNotForChannel,  // the key is trusted, but not for this channel
  kWrongChannel,      // the catalog names another channel than the one it is adopted into
  kRollback,          // sequence lower than the adopted one (or equal with other content)
  kArtifactMismatch,  // an artifact's size or SHA-256 differs from the signed catalog
  kMissingArtifact,   // an artifact file is absent
  kMalformed,         // not a well-formed, complete catalog document
};

const char* RejectionToken(Rejection r);
Error Rejected(Rejection r, const std::string& detail);
// The rejection an Error carries, if it came from Rejected().
std::optional<Rejection> RejectionOf(const Error& e);

// SECURITY: parses an untrusted document (imported from elsewhere). Bounded (kMax* above),
// strict (unknown or missing fields, wrong types, bad names/hashes are kMalformed), never throws.
Result<Catalog> ParseCatalog(std::string_view json);

// Pretty JSON with a trailing newline; ParseCatalog(SerializeCatalog(c)) == c.
std::string SerializeCatalog(const Catalog& c);

// The bytes the signature covers. Deterministic and injective: different catalogs never encode
// to the same bytes.
std::string CanonicalBytes(const Catalog& c);

// Field checks shared with the CLI (e.g. image names given by users).
bool IsValidName(std::string_view name);     // image and channel names
bool IsValidFileName(std::string_view name);  // artifact file names: no '/', not . or ..

}  // namespace cloister::catalog
