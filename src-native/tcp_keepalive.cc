// TCP keepalive as RDS/TCP sets it in the kernel (idle, interval, probes): Node's setKeepAlive
// only sets the idle time.
#include <napi.h>
#include <cerrno>
#include <cstring>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

namespace rds_native {

Napi::Value TcpKeepalive(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 4 || !info[0].IsNumber() || !info[1].IsNumber() || !info[2].IsNumber() || !info[3].IsNumber()) {
    Napi::TypeError::New(env, "tcpKeepalive(fd, idleSeconds, intervalSeconds, probes)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  int fd = info[0].As<Napi::Number>().Int32Value();
  int on = 1;
  int idle = info[1].As<Napi::Number>().Int32Value();
  int intvl = info[2].As<Napi::Number>().Int32Value();
  int cnt = info[3].As<Napi::Number>().Int32Value();
  if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on) < 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle) < 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl) < 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt) < 0) {
    Napi::Error::New(env, std::string("setsockopt(keepalive): ") + std::strerror(errno)).ThrowAsJavaScriptException();
    return env.Undefined();
  }
  return env.Undefined();
}

}  // namespace rds_native
