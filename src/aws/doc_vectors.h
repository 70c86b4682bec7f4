// Test-only (never linked into the product): the AWS documentation's Signature V4 examples (S3 API reference, "Transferring
// Payload in Multiple Chunks"; the access key and secret the examples sign with), shared by the
// re-signer's and the proxy filter's tests so both check against signatures our signer did not
// make.
#pragma once

#include <string>

namespace cloister::aws::doc {

inline constexpr char kDocSecret[] = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
inline constexpr char kKeyId[] = "AKIAIOSFODNN7EXAMPLE";
inline constexpr char kOtherSecret[] = "Zm9vYmFyYmF6cXV4cXV1eHF1dXhxdXV4cXV1eHF1";

// 66560 bytes of 'a' in chunks of 65536, 1024 and 0, with the documented chunk signatures.
inline constexpr const char* kDocChunkSigs[] = {
    "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
    "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
    "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9"};

inline std::string DocChunkedBody() {
  return std::string("10000;chunk-signature=") + kDocChunkSigs[0] + "\r\n" +
         std::string(65536, 'a') + "\r\n400;chunk-signature=" + kDocChunkSigs[1] + "\r\n" +
         std::string(1024, 'a') + "\r\n0;chunk-signature=" + kDocChunkSigs[2] + "\r\n\r\n";
}

}  // namespace cloister::aws::doc
