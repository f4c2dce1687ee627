#include <napi.h>

namespace rds_native {
Napi::Value TcpOutq(const Napi::CallbackInfo& info);
Napi::Value TcpKeepalive(const Napi::CallbackInfo& info);
Napi::Value PeerCred(const Napi::CallbackInfo& info);
Napi::Value SetSendBuffer(const Napi::CallbackInfo& info);
void InitIb(Napi::Env env, Napi::Object exports);
}

static Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("tcpOutq", Napi::Function::New(env, rds_native::TcpOutq, "tcpOutq"));
  exports.Set("tcpKeepalive", Napi::Function::New(env, rds_native::TcpKeepalive, "tcpKeepalive"));
  exports.Set("peerCred", Napi::Function::New(env, rds_native::PeerCred, "peerCred"));
  exports.Set("setSendBuffer", Napi::Function::New(env, rds_native::SetSendBuffer, "setSendBuffer"));
  rds_native::InitIb(env, exports);
  return exports;
}

NODE_API_MODULE(rds_native, Init)
