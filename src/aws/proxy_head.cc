#include "aws/proxy_head.h"

namespace cloister::aws {
namespace {

class ChunkTransform : public proxy::BodyTransform {
 public:
  explicit ChunkTransform(std::unique_ptr<ChunkResigner> c) : c_(std::move(c)) {}
  Result<std::string> Data(std::string_view in) override { return c_->Data(in); }
  Result<std::string> End() override {
    RETURN_IF_ERROR(c_->End());
    return std::string();
  }

 private:
  std::unique_ptr<ChunkResigner> c_;
};

}  // namespace

std::unique_ptr<proxy::BodyTransform> ChunkBodyTransform(std::unique_ptr<ChunkResigner> chunks) {
  return std::make_unique<ChunkTransform>(std::move(chunks));
}

RequestHead ToAws(const proxy::RequestHead& h) {
  RequestHead out;
  out.method = h.method;
  out.target = h.target;
  for (const auto& [name, value] : h.headers) out.headers.push_back({name, value});
  return out;
}

void FromAws(const RequestHead& a, proxy::RequestHead& h) {
  h.target = a.target;
  h.headers.clear();
  for (const Header& x : a.headers) h.headers.emplace_back(x.name, x.value);
}

}  // namespace cloister::aws
