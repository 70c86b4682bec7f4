// Does a value look like a real credential? For places where only placeholders belong: a
// workspace's environment from a devcontainer.json's containerEnv (devcontainer/env_check.h),
// which would otherwise put a key into the guest, where nothing worth stealing may live.
//
// Shapes, found anywhere in the value at a word boundary:
//   - the prefixes placeholders keep (KnownCredentialPrefixes: sk-ant-..., sk-proj-, sk-, ghp_,
//     gho_, ghu_, ghs_, ghr_, github_pat_, glpat-, gldt-) followed by 16 or more token characters
//     ([A-Za-z0-9_-]);
//   - an AWS access key id (AKIA or ASIA and 16 upper-case letters or digits);
//   - a JWT (eyJ... three base64url segments of 10 or more characters);
//   - a PEM private key ("-----BEGIN ... PRIVATE KEY-----");
//   - a Slack token (xoxa-, xoxb-, xoxp-, xoxr-, xoxs-, xoxe- and 10 or more characters);
// and, with the variable's name: a name that says it holds a secret (TOKEN, SECRET, PASSWORD,
// PASSWD, API_KEY, APIKEY, ACCESS_KEY, PRIVATE_KEY, CREDENTIAL) and a value of 20 or more
// characters without white space that mixes letters and digits. A short development password
// ("postgres") passes; a tool that needs a real one gets it through `cloister cred add`.
//
// SECURITY: the value may be a real secret: the answer names the shape (its prefix or its kind),
// never any part of the value after the prefix. Linear in the value's length.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace cloister::vault {

// "a GitHub token (ghp_...)", "an AWS access key id (AKIA...)", "a JWT", ... or nullopt.
std::optional<std::string> CredentialShape(std::string_view value);
// CredentialShape, and the name rule above ("a secret-looking value in a variable named *TOKEN*").
std::optional<std::string> CredentialShape(std::string_view name, std::string_view value);

}  // namespace cloister::vault
