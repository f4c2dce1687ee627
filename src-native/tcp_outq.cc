// Bytes a TCP socket has queued that the peer has not acknowledged (sent-unacked + unsent):
// ioctl(SIOCOUTQ). RDS over TCP counts a message delivered once TCP's snd_una passes its last
// byte; Node does not expose snd_una, this is the smallest way to read it.
#include <napi.h>
#include <cerrno>
#include <cstring>
#include <sys/ioctl.h>
#include <linux/sockios.h>

namespace rds_native {

Napi::Value TcpOutq(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsNumber()) {
    Napi::TypeError::New(env, "tcpOutq(fd): fd must be a number").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  int fd = info[0].As<Napi::Number>().Int32Value();
  int pending = 0;
  if (ioctl(fd, SIOCOUTQ, &pending) < 0) {
    Napi::Error err = Napi::Error::New(env, std::string("ioctl(SIOCOUTQ): ") + std::strerror(errno));
    err.Set("errno", Napi::Number::New(env, errno));
    err.ThrowAsJavaScriptException();
    return env.Undefined();
  }
  return Napi::Number::New(env, pending);
}

}  // namespace rds_native
