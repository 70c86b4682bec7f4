#include "proxy/extension_filter_adapter.h"

#include <algorithm>

#include "proxy/credential_use.h"
#include "vault/crypto.h"

namespace cloister::proxy {
namespace http = boost::beast::http;

RequestHead FilterHeadOf(const RequestHeader& req, const Authority& target) {
  RequestHead h;
  h.method = std::string(req.method_string());
  h.target = std::string(req.target());
  h.host = target.host;
  h.port = target.port;
  for (const auto& f : req) h.headers.push_back({std::string(f.name_string()), std::string(f.value())});
  return h;
}

namespace {

void ApplyHead(const RequestHead& h, RequestHeader& req) {
  std::vector<std::string> names;
  for (const auto& f : req) names.push_back(std::string(f.name_string()));
  for (const auto& n : names) req.erase(n);
  for (const auto& [name, value] : h.headers) req.insert(name, value);
  req.target(h.target);
}

ResponseHead ResponseFrom(const ResponseHeader& res) {
  ResponseHead h;
  h.status = static_cast<int>(res.result_int());
  for (const auto& f : res) h.headers.push_back({std::string(f.name_string()), std::string(f.value())});
  return h;
}

void ApplyResponse(const ResponseHead& h, ResponseHeader& res) {
  std::vector<std::string> names;
  for (const auto& f : res) names.push_back(std::string(f.name_string()));
  for (const auto& n : names) res.erase(n);
  for (const auto& [name, value] : h.headers) res.insert(name, value);
  if (h.status >= 100 && h.status <= 999) res.result(static_cast<unsigned>(h.status));
}

// SECURITY: every real value an extension filter put in is a use (consent), redacted from the
// response in every form the redactor knows, and named in the trace.
Status TakeSwapped(Exchange& ex, std::vector<SwappedValue>& swapped) {
  Status consented = OkStatus();
  for (SwappedValue& s : swapped) {
    if (consented.ok()) consented = CheckConsented(ex, s.credential);
    if (consented.ok()) {
      if (!s.real.empty()) ex.redactor.Add(s.real, s.placeholder);
      if (std::find(ex.rec.swaps.begin(), ex.rec.swaps.end(), s.credential) == ex.rec.swaps.end()) {
        ex.rec.swaps.push_back(s.credential);
      }
    }
    vault::SecureWipe(s.real);
  }
  swapped.clear();
  return consented;
}

}  // namespace

Status ExtensionFilterAdapter::OnRequestHead(Exchange& ex) {
  const auto& filters = ex.ctx.config->extension_filters;
  if (!ex.origin.tls || !ex.names_agree || filters.empty()) return OkStatus();
  ex.filter_head = FilterHeadOf(ex.req, ex.target);
  bool changed = false;
  for (const auto& f : filters) {
    auto v = f->OnRequestHead(ex.filter_head);
    if (!v.ok()) {
      if (v.error().code() == ErrorCode::kCompromised) {
        ex.block.push_back({"filter", "request", "-", "blocked"});
        ex.rec.error = v.error().message();
        return ex.Trip();
      }
      return ex.Refuse(403, v.error().message());
    }
    RETURN_IF_ERROR(TakeSwapped(ex, v->swapped));
    if (!v->handled) continue;
    changed = true;
    if (v->need_full_body) {
      ex.full_body.push_back(f.get());
      ex.hold_limit = std::max(ex.hold_limit, v->max_body);
    }
    if (v->body) ex.transforms.push_back(std::move(v->body));
    if (v->response) ex.response_transforms.push_back(std::move(v->response));
  }
  if (changed) ApplyHead(ex.filter_head, ex.req);
  return OkStatus();
}

Status ExtensionFilterAdapter::OnRequestBody(Exchange& ex, std::string& data, bool end) {
  if (!ex.full_body.empty()) {
    if (!ex.body_whole) return ex.Refuse(413, "request body too large for re-signing");
    for (ExtensionFilter* f : ex.full_body) {
      if (Status st = f->OnFullBody(ex.filter_head, data); !st.ok()) {
        return ex.Refuse(403, st.error().message());
      }
    }
    ApplyHead(ex.filter_head, ex.req);
    ex.full_body.clear();  // once: the whole body came in this call
  }
  for (auto& t : ex.transforms) {
    auto out = t->Data(data);
    if (!out.ok()) return ex.Refuse(403, "request body refused: " + out.error().message());
    data = std::move(out).value();
    if (end) {
      auto tail = t->End();
      if (!tail.ok()) return ex.Refuse(403, "request body refused: " + tail.error().message());
      data += *tail;
      std::vector<SwappedValue> swapped = t->TakeSwapped();
      if (Status st = TakeSwapped(ex, swapped); !st.ok()) {
        vault::SecureWipe(data);  // it is not sent
        return st;
      }
    }
  }
  return OkStatus();
}

Status ExtensionFilterAdapter::OnResponseHead(Exchange& ex, ResponseHeader& res) {
  for (auto& t : ex.response_transforms) {
    ResponseHead head = ResponseFrom(res);
    auto hold = t->OnHead(head);
    if (!hold.ok()) return ex.Refuse(502, hold.error().message());
    ApplyResponse(head, res);
    if (hold->hold) {
      // Several transforms that hold: the smallest limit applies to all.
      ex.response_hold_max =
          ex.hold_response ? std::min(ex.response_hold_max, hold->max_body) : hold->max_body;
      ex.hold_response = true;
    }
  }
  return OkStatus();
}

Status ExtensionFilterAdapter::OnResponseBody(Exchange& ex, ResponseHeader& res, std::string& data,
                                            bool) {
  if (!ex.hold_response || ex.response_transforms.empty()) return OkStatus();
  // The driver passes a held body whole, in one call.
  for (auto& t : ex.response_transforms) {
    ResponseHead head = ResponseFrom(res);
    auto body = t->OnBody(head, std::move(data));
    if (!body.ok()) return ex.Refuse(502, body.error().message());
    data = std::move(body).value();
    ApplyResponse(head, res);
  }
  return OkStatus();
}

}  // namespace cloister::proxy
