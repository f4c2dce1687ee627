// IbEndpoint: construction, shutdown, the rdma_cm event and completion drains, and connection
// management (listen, connect, accept, reject, disconnect, destroy). See ib_endpoint.h.
#include "ib_endpoint.h"
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include "ib_util.h"

namespace rds_native {

Napi::Function Endpoint::Define(Napi::Env env) {
  return DefineClass(env, "IbEndpoint",
                     {
                         InstanceMethod<&Endpoint::Listen>("listen"),
                         InstanceMethod<&Endpoint::Connect>("connect"),
                         InstanceMethod<&Endpoint::SetupQp>("setupQp"),
                         InstanceMethod<&Endpoint::RdmaConnect>("rdmaConnect"),
                         InstanceMethod<&Endpoint::Accept>("accept"),
                         InstanceMethod<&Endpoint::Reject>("reject"),
                         InstanceMethod<&Endpoint::PostSend>("postSend"),
                         InstanceMethod<&Endpoint::PostRecv>("postRecv"),
                         InstanceMethod<&Endpoint::RegMr>("regMr"),
                         InstanceMethod<&Endpoint::DeregMr>("deregMr"),
                         InstanceMethod<&Endpoint::PostRdma>("postRdma"),
                         InstanceMethod<&Endpoint::PollOps>("pollOps"),
                         InstanceMethod<&Endpoint::Disconnect>("disconnect"),
                         InstanceMethod<&Endpoint::Destroy>("destroy"),
                         InstanceMethod<&Endpoint::Close>("close"),
                         InstanceMethod<&Endpoint::Ref>("ref"),
                         InstanceMethod<&Endpoint::Unref>("unref"),
                     });
}

Endpoint::Endpoint(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Endpoint>(info), env_(info.Env()) {
  Napi::Env env = info.Env();
  if (!LoadApi()) {
    Napi::Error::New(env, "cannot load rdma-core: " + IbApiError()).ThrowAsJavaScriptException();
    return;
  }
  if (info.Length() < 2 || !info[0].IsFunction() || !info[1].IsFunction()) {
    Napi::TypeError::New(env, "IbEndpoint(onCmEvent, onCompletions)").ThrowAsJavaScriptException();
    return;
  }
  onCm_ = Napi::Persistent(info[0].As<Napi::Function>());
  onCq_ = Napi::Persistent(info[1].As<Napi::Function>());
  res_.channel.reset(api.create_event_channel());
  if (!res_.channel || !SetNonBlocking(res_.channel->fd)) {
    ThrowErrno(env, "rdma_create_event_channel", errno);
    return;
  }
  napi_get_uv_event_loop(env, &loop_);
  res_.channelPoll = PollReadable(loop_, res_.channel->fd, this,
                                  [](uv_poll_t* h, int, int) { static_cast<Endpoint*>(h->data)->DrainCm(); });
  if (!res_.channelPoll) {
    Napi::Error::New(env, "uv_poll_init: cannot watch the rdma_cm event channel").ThrowAsJavaScriptException();
    return;
  }
  cleanup_.Add(env, AtExit, this);
}

void Endpoint::Shutdown() {
  cleanup_.Remove();
  for (auto& kv : res_.conns) {
    Conn& c = *kv.second;
    if (c.cm && !c.listener && c.HasQp()) api.disconnect(c.cm.get());
  }
  // Taken out first, so a table the destructors run over is never the one callers see.
  Resources gone = std::exchange(res_, Resources{});
}

Conn* Endpoint::NewConn(CmId cm) {
  uint32_t id = nextId_++;
  auto c = std::make_unique<Conn>(this, id, std::move(cm));
  Conn* raw = c.get();
  res_.conns[id] = std::move(c);
  return raw;
}

Conn* Endpoint::Find(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsNumber()) return nullptr;
  auto it = res_.conns.find(info[0].As<Napi::Number>().Uint32Value());
  return it == res_.conns.end() ? nullptr : it->second.get();
}

Conn* Endpoint::FindOrThrow(const Napi::CallbackInfo& info) {
  Conn* c = Find(info);
  if (c == nullptr) Napi::Error::New(info.Env(), "unknown or destroyed IB connection id").ThrowAsJavaScriptException();
  return c;
}

std::shared_ptr<Pd> Endpoint::AcquirePd(ibv_context* ctx) {
  auto it = pds_.find(ctx);
  if (it != pds_.end()) {
    if (auto live = it->second.lock()) return live;
  }
  ProtectionDomain pd(api.alloc_pd(ctx));
  if (!pd) return nullptr;
  auto p = std::make_shared<Pd>();
  p->ctx = ctx;
  p->pd = std::move(pd);
  pds_[ctx] = p;
  return p;
}

void Endpoint::DrainCm() {
  Napi::HandleScope scope(env_);
  rdma_cm_event* ev;
  while (res_.channel && api.get_cm_event(res_.channel.get(), &ev) == 0) {
    rdma_cm_event_type type = ev->event;
    int status = ev->status;
    Conn* c = ev->id != nullptr ? static_cast<Conn*>(ev->id->context) : nullptr;
    Napi::Value pdata = env_.Undefined();
    Napi::Object extra = Napi::Object::New(env_);
    if (ev->param.conn.private_data != nullptr && ev->param.conn.private_data_len > 0) {
      pdata = Napi::Buffer<uint8_t>::Copy(env_, static_cast<const uint8_t*>(ev->param.conn.private_data),
                                          ev->param.conn.private_data_len);
    }
    if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
      // A new id for the incoming connection, owned from here on; its listener is ev->listen_id.
      Conn* l = static_cast<Conn*>(ev->listen_id->context);
      c = NewConn(CmId(ev->id));
      extra.Set("listener", Napi::Number::New(env_, l != nullptr ? l->id : 0));
      extra.Set("localAddress", AddrString(&ev->id->route.addr.src_addr));
      extra.Set("peerAddress", AddrString(&ev->id->route.addr.dst_addr));
      extra.Set("device", ev->id->verbs != nullptr ? api.get_device_name(ev->id->verbs->device) : "");
    } else if (type == RDMA_CM_EVENT_ADDR_RESOLVED && c != nullptr) {
      // Straight on to the route; JavaScript hears about ROUTE_RESOLVED (or the error).
      if (api.resolve_route(ev->id, 5000) != 0) {
        type = RDMA_CM_EVENT_ROUTE_ERROR;
        status = -errno;
      } else {
        api.ack_cm_event(ev);
        continue;
      }
    }
    api.ack_cm_event(ev);
    if (c == nullptr) continue;
    onCm_.MakeCallback(Value(), {Napi::Number::New(env_, c->id), Napi::String::New(env_, api.event_str(type)),
                                 Napi::Number::New(env_, status), pdata, extra});
  }
}

void Endpoint::DrainCq(Conn* c) {
  Napi::HandleScope scope(env_);
  ibv_cq* evCq;
  void* ctx;
  unsigned n = 0;
  while (c->cc && api.get_cq_event(c->cc.get(), &evCq, &ctx) == 0) n++;
  if (!c->cq) return;
  if (n > 0) api.ack_cq_events(c->cq.get(), n);
  // Re-arm before polling dry, so a completion that lands in between raises the fd again.
  ibv_req_notify_cq(c->cq.get(), 0);
  std::vector<int32_t> batch;
  ibv_wc wc[32];
  int got;
  while ((got = ibv_poll_cq(c->cq.get(), 32, wc)) > 0) {
    for (int i = 0; i < got; i++) {
      if (wc[i].wr_id & kOpWr) {
        OpCompleted(c, wc[i], batch);
        continue;
      }
      batch.push_back(static_cast<int32_t>(wc[i].wr_id));
      batch.push_back(static_cast<int32_t>(wc[i].status));
      batch.push_back(static_cast<int32_t>(wc[i].byte_len));
    }
  }
  if (batch.empty()) return;
  // The callback may destroy the connection: nothing of `c` is used after it.
  uint32_t id = c->id;
  Napi::Int32Array arr = Napi::Int32Array::New(env_, batch.size());
  std::memcpy(arr.Data(), batch.data(), batch.size() * sizeof(int32_t));
  onCq_.MakeCallback(Value(), {Napi::Number::New(env_, id), arr});
}

// listen(address, port) -> id
Napi::Value Endpoint::Listen(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  sockaddr_in sin;
  if (info.Length() < 2 || !info[0].IsString() || !info[1].IsNumber() ||
      !ParseIpv4(info[0].As<Napi::String>(), info[1].As<Napi::Number>().Uint32Value(), &sin)) {
    Napi::TypeError::New(env, "listen(ipv4Address, port)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  rdma_cm_id* raw;
  if (api.create_id(res_.channel.get(), &raw, nullptr, RDMA_PS_TCP) != 0) {
    ThrowErrno(env, "rdma_create_id", errno);
    return env.Undefined();
  }
  CmId cm(raw);
  if (api.bind_addr(raw, reinterpret_cast<sockaddr*>(&sin)) != 0 || api.listen(raw, 128) != 0) {
    ThrowErrno(env, "rdma_bind_addr/rdma_listen", errno);
    return env.Undefined();
  }
  Conn* c = NewConn(std::move(cm));
  c->listener = true;
  return Napi::Number::New(env, c->id);
}

// connect(srcAddress, dstAddress, port, timeoutMs[, tos]) -> id; events follow (ROUTE_RESOLVED or
// errors). With tos the id's type of service is set first, so route resolution uses it (the
// kernel's rds_rdma sets rdma_set_service_type(cm_id, c_tos) before resolving the route).
Napi::Value Endpoint::Connect(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  sockaddr_in src, dst;
  bool hasTos = info.Length() >= 5 && !info[4].IsUndefined();
  if (info.Length() < 4 || !info[0].IsString() || !info[1].IsString() || !info[2].IsNumber() || !info[3].IsNumber() ||
      (hasTos && !info[4].IsNumber()) || !ParseIpv4(info[0].As<Napi::String>(), 0, &src) ||
      !ParseIpv4(info[1].As<Napi::String>(), info[2].As<Napi::Number>().Uint32Value(), &dst)) {
    Napi::TypeError::New(env, "connect(srcIpv4, dstIpv4, port, timeoutMs[, tos])").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  uint8_t tos = hasTos ? static_cast<uint8_t>(info[4].As<Napi::Number>().Uint32Value()) : 0;
  if (tos != 0 && api.set_option == nullptr) {
    ThrowErrno(env, "rdma_set_option (this librdmacm has none, so no TOS can be set)", EOPNOTSUPP);
    return env.Undefined();
  }
  rdma_cm_id* raw;
  if (api.create_id(res_.channel.get(), &raw, nullptr, RDMA_PS_TCP) != 0) {
    ThrowErrno(env, "rdma_create_id", errno);
    return env.Undefined();
  }
  Conn* c = NewConn(CmId(raw));
  if (hasTos && api.set_option != nullptr &&
      api.set_option(raw, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof tos) != 0) {
    int err = errno;
    Drop(c);
    ThrowErrno(env, "rdma_set_option(RDMA_OPTION_ID_TOS)", err);
    return env.Undefined();
  }
  if (api.resolve_addr(raw, reinterpret_cast<sockaddr*>(&src), reinterpret_cast<sockaddr*>(&dst),
                       info[3].As<Napi::Number>().Int32Value()) != 0) {
    int err = errno;
    Drop(c);
    ThrowErrno(env, "rdma_resolve_addr", err);
    return env.Undefined();
  }
  return Napi::Number::New(env, c->id);
}

namespace {

bool ConnParam(const Napi::CallbackInfo& info, rdma_conn_param* p) {
  std::memset(p, 0, sizeof *p);
  if (info.Length() < 2 || !info[1].IsBuffer()) return false;
  auto pd = info[1].As<Napi::Buffer<uint8_t>>();
  if (pd.Length() > 56) return false;
  p->private_data = pd.Data();
  p->private_data_len = static_cast<uint8_t>(pd.Length());
  p->responder_resources = 1;
  p->initiator_depth = 1;
  p->retry_count = 7;
  p->rnr_retry_count = 7;  // infinite: a peer without flow control relies on RNR retries
  return true;
}

}  // namespace

Napi::Value Endpoint::RdmaConnect(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Conn* c = FindOrThrow(info);
  rdma_conn_param p;
  if (c == nullptr) return env.Undefined();
  if (!ConnParam(info, &p)) {
    Napi::TypeError::New(env, "rdmaConnect(id, privateData <= 56 bytes)").ThrowAsJavaScriptException();
  } else if (api.connect(c->cm.get(), &p) != 0) {
    ThrowErrno(env, "rdma_connect", errno);
  }
  return env.Undefined();
}

Napi::Value Endpoint::Accept(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Conn* c = FindOrThrow(info);
  rdma_conn_param p;
  if (c == nullptr) return env.Undefined();
  if (!ConnParam(info, &p)) {
    Napi::TypeError::New(env, "accept(id, privateData <= 56 bytes)").ThrowAsJavaScriptException();
  } else if (api.accept(c->cm.get(), &p) != 0) {
    ThrowErrno(env, "rdma_accept", errno);
  }
  return env.Undefined();
}

// reject(id, privateData?) then destroys the id.
Napi::Value Endpoint::Reject(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Conn* c = FindOrThrow(info);
  if (c == nullptr) return env.Undefined();
  const void* data = nullptr;
  uint8_t len = 0;
  if (info.Length() > 1 && info[1].IsBuffer()) {
    auto b = info[1].As<Napi::Buffer<uint8_t>>();
    data = b.Data();
    len = static_cast<uint8_t>(b.Length() > 148 ? 148 : b.Length());
  }
  api.reject(c->cm.get(), data, len);
  Drop(c);
  return env.Undefined();
}

Napi::Value Endpoint::Disconnect(const Napi::CallbackInfo& info) {
  Conn* c = Find(info);
  if (c != nullptr && c->cm && !c->listener) api.disconnect(c->cm.get());
  return info.Env().Undefined();
}

// destroy(id): QP, CQ, memory registration and id are gone when this returns. Idempotent.
Napi::Value Endpoint::Destroy(const Napi::CallbackInfo& info) {
  Conn* c = Find(info);
  if (c != nullptr) Drop(c);
  return info.Env().Undefined();
}

Napi::Value Endpoint::Close(const Napi::CallbackInfo& info) {
  Shutdown();
  return info.Env().Undefined();
}

Napi::Value Endpoint::Ref(const Napi::CallbackInfo& info) {
  referenced_ = true;
  SetHandleRef(res_.channelPoll.get(), true);
  for (auto& kv : res_.conns) SetHandleRef(kv.second->poll.get(), true);
  return info.Env().Undefined();
}

Napi::Value Endpoint::Unref(const Napi::CallbackInfo& info) {
  referenced_ = false;
  SetHandleRef(res_.channelPoll.get(), false);
  for (auto& kv : res_.conns) SetHandleRef(kv.second->poll.get(), false);
  return info.Env().Undefined();
}

}  // namespace rds_native
