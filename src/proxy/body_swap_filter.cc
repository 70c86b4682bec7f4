#include "proxy/body_swap_filter.h"

#include <openssl/crypto.h>

#include <algorithm>

#include "proxy/credential_use.h"
#include "vault/crypto.h"

namespace cloister::proxy {

Status BodySwapFilter::OnRequestHead(Exchange& ex) {
  if (!ex.origin.tls || !ex.names_agree) return OkStatus();
  for (size_t i : ex.in_scope) {
    const auto& b = ex.ctx.config->credentials[i];
    if (!WouldSwapInBody(ex, i)) continue;  // credential_use.h: what consent asked about
    RETURN_IF_ERROR(CheckConsented(ex, i));
    ex.body_subst.push_back(i);
    ex.redactor.Add(b.credential.value, b.placeholder);
  }
  return OkStatus();
}

Status BodySwapFilter::OnRequestBody(Exchange& ex, std::string& data, bool end) {
  if (ex.body_subst.empty()) return OkStatus();
  const auto& creds = ex.ctx.config->credentials;
  if (!ex.body_whole && !ex.swap_streaming) {
    // Streaming: equal-length swaps only, so the declared length stays right.
    ex.swap_streaming = true;
    std::erase_if(ex.body_subst, [&](size_t i) {
      return creds[i].placeholder.size() != creds[i].credential.value.size();
    });
    if (ex.body_subst.empty()) return OkStatus();
  }
  std::string buf = std::move(ex.swap_carry);
  ex.swap_carry.clear();
  buf.append(data);
  vault::SecureWipe(data);
  size_t longest = 0;
  for (size_t i : ex.body_subst) {
    const std::string& ph = creds[i].placeholder;
    const std::string& real = creds[i].credential.value;
    longest = std::max(longest, ph.size());
    bool any = false;
    for (size_t pos = buf.find(ph); pos != std::string::npos; pos = buf.find(ph, pos + real.size())) {
      buf.replace(pos, ph.size(), real);
      any = true;
    }
    if (any && std::find(ex.rec.swaps.begin(), ex.rec.swaps.end(), creds[i].credential.id) ==
                   ex.rec.swaps.end()) {
      ex.rec.swaps.push_back(creds[i].credential.id);
    }
  }
  if (!end && !ex.body_whole && longest > 1) {
    // A placeholder may start in this piece and end in the next: keep its possible start.
    size_t keep = std::min(buf.size(), longest - 1);
    ex.swap_carry = buf.substr(buf.size() - keep);
    OPENSSL_cleanse(buf.data() + buf.size() - keep, keep);
    buf.resize(buf.size() - keep);
  }
  data = std::move(buf);
  return OkStatus();
}

}  // namespace cloister::proxy
