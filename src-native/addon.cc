#include <napi.h>

namespace rds_native {
Napi::Value TcpOutq(const Napi::CallbackInfo& info);
Napi::Value TcpKeepalive(const Napi::CallbackInfo& info);
void InitIb(Napi::Env env, Napi::Object exports);
}

static Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("tcpOutq", Napi::Function::New(env, rds_native::TcpOutq, "tcpOutq"));
  exports.Set("tcpKeepalive", Napi::Function::New(env, rds_native::TcpKeepalive, "tcpKeepalive"));
  rds_native::InitIb(env, exports);
  return exports;
}

NODE_API_MODULE(rds_native, Init)
