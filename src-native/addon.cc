#include <napi.h>

namespace rds_native {
Napi::Value TcpOutq(const Napi::CallbackInfo& info);
}

static Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("tcpOutq", Napi::Function::New(env, rds_native::TcpOutq, "tcpOutq"));
  return exports;
}

NODE_API_MODULE(rds_native, Init)
