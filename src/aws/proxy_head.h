// Conversions between the proxy's request head (proxy/extension_filter.h) and the signer's (aws/sigv4.h),
// shared by the AWS filters (proxy_filter.cc: re-signing; custody_filter.cc: credential custody).
#pragma once

#include <memory>

#include "aws/resigner.h"
#include "aws/sigv4.h"
#include "proxy/extension_filter.h"

namespace cloister::aws {

// The method, target and headers (wire order, names as received) of a proxied request.
RequestHead ToAws(const proxy::RequestHead& h);
// Writes a (re-signed) head back: target and headers; method, host and port are left as they were.
void FromAws(const RequestHead& a, proxy::RequestHead& h);

// The proxy's body transform over a chunked (aws-chunked) re-signer: each chunk re-signed as it
// streams; End() checks the final chunk.
std::unique_ptr<proxy::BodyTransform> ChunkBodyTransform(std::unique_ptr<ChunkResigner> chunks);

}  // namespace cloister::aws
