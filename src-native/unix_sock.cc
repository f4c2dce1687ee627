// Unix-socket helpers for the host node (lib/host): who is at the other end of an attached
// client's control socket, as the kernel recorded it at connect() (SO_PEERCRED), so the node
// shows the real pid/uid/gid rather than what the client claims; and the socket's send buffer,
// which for a Unix stream socket bounds what the writer may queue before it must wait for the
// reader (the default, about 200 KiB, makes a busy writer wake once per few messages).
#include <napi.h>
#include <cerrno>
#include <cstring>
#include <sys/socket.h>

namespace rds_native {

static bool FdArg(const Napi::CallbackInfo& info, const char* usage, int* fd) {
  if (info.Length() < 1 || !info[0].IsNumber()) {
    Napi::TypeError::New(info.Env(), usage).ThrowAsJavaScriptException();
    return false;
  }
  *fd = info[0].As<Napi::Number>().Int32Value();
  return true;
}

static void ThrowErrno(Napi::Env env, const char* what) {
  Napi::Error err = Napi::Error::New(env, std::string(what) + ": " + std::strerror(errno));
  err.Set("errno", Napi::Number::New(env, errno));
  err.ThrowAsJavaScriptException();
}

Napi::Value PeerCred(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd;
  if (!FdArg(info, "peerCred(fd): fd must be a number", &fd)) return env.Undefined();
  struct ucred cred;
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
    ThrowErrno(env, "getsockopt(SO_PEERCRED)");
    return env.Undefined();
  }
  Napi::Object out = Napi::Object::New(env);
  out.Set("pid", Napi::Number::New(env, cred.pid));
  out.Set("uid", Napi::Number::New(env, cred.uid));
  out.Set("gid", Napi::Number::New(env, cred.gid));
  return out;
}

Napi::Value SetSendBuffer(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd;
  if (!FdArg(info, "setSendBuffer(fd, bytes)", &fd)) return env.Undefined();
  if (info.Length() < 2 || !info[1].IsNumber()) {
    Napi::TypeError::New(env, "setSendBuffer(fd, bytes): bytes must be a number").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  int bytes = info[1].As<Napi::Number>().Int32Value();
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes) < 0) {
    ThrowErrno(env, "setsockopt(SO_SNDBUF)");
    return env.Undefined();
  }
  int now = 0;
  socklen_t len = sizeof now;
  if (getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &now, &len) < 0) {
    ThrowErrno(env, "getsockopt(SO_SNDBUF)");
    return env.Undefined();
  }
  return Napi::Number::New(env, now);
}

}  // namespace rds_native
