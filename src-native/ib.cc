// InfiniBand / RoCE for the RDS IB transport: rdma_cm connection management and one RC queue pair
// per connection, with send and receive rings in one registered buffer that JavaScript reads and
// writes directly. libibverbs and librdmacm are loaded with dlopen on first use, so the package
// loads (and TCP works) on hosts without rdma-core. All protocol logic lives in TypeScript; this
// file only moves work requests, completions and connection events across the boundary.
//
// Threading: everything runs on the Node main thread. The rdma_cm event channel and each
// connection's completion channel are non-blocking fds watched with uv_poll.
#include <napi.h>
#include <uv.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <cerrno>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

namespace rds_native {
namespace {

// ---- the libraries, resolved by name (never linked) ----
struct Api {
  rdma_event_channel* (*create_event_channel)();
  void (*destroy_event_channel)(rdma_event_channel*);
  int (*create_id)(rdma_event_channel*, rdma_cm_id**, void*, rdma_port_space);
  int (*destroy_id)(rdma_cm_id*);
  int (*bind_addr)(rdma_cm_id*, sockaddr*);
  int (*resolve_addr)(rdma_cm_id*, sockaddr*, sockaddr*, int);
  int (*resolve_route)(rdma_cm_id*, int);
  int (*create_qp)(rdma_cm_id*, ibv_pd*, ibv_qp_init_attr*);
  void (*destroy_qp)(rdma_cm_id*);
  int (*connect)(rdma_cm_id*, rdma_conn_param*);
  int (*listen)(rdma_cm_id*, int);
  int (*accept)(rdma_cm_id*, rdma_conn_param*);
  int (*reject)(rdma_cm_id*, const void*, uint8_t);
  int (*disconnect)(rdma_cm_id*);
  int (*get_cm_event)(rdma_event_channel*, rdma_cm_event**);
  int (*ack_cm_event)(rdma_cm_event*);
  const char* (*event_str)(rdma_cm_event_type);
  ibv_pd* (*alloc_pd)(ibv_context*);
  int (*dealloc_pd)(ibv_pd*);
  ibv_mr* (*reg_mr)(ibv_pd*, void*, size_t, int);
  int (*dereg_mr)(ibv_mr*);
  ibv_comp_channel* (*create_comp_channel)(ibv_context*);
  int (*destroy_comp_channel)(ibv_comp_channel*);
  ibv_cq* (*create_cq)(ibv_context*, int, void*, ibv_comp_channel*, int);
  int (*destroy_cq)(ibv_cq*);
  int (*get_cq_event)(ibv_comp_channel*, ibv_cq**, void**);
  void (*ack_cq_events)(ibv_cq*, unsigned int);
  const char* (*get_device_name)(ibv_device*);
  int (*query_device)(ibv_context*, ibv_device_attr*);
  // rdma-core 25+ (libibverbs 1.8): registration at a chosen I/O virtual address. Optional: without
  // it the transport still moves messages, only RDMA memory registration is refused.
  ibv_mr* (*reg_mr_iova)(ibv_pd*, void*, size_t, uint64_t, int);
};

Api api;
bool apiLoaded = false;
std::string apiError;

template <typename T>
bool Sym(void* lib, const char* name, T& out) {
  out = reinterpret_cast<T>(dlsym(lib, name));
  if (out == nullptr) apiError = std::string("missing symbol ") + name;
  return out != nullptr;
}

bool LoadApi() {
  if (apiLoaded) return true;
  if (!apiError.empty()) return false;
  void* verbs = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (verbs == nullptr) {
    apiError = dlerror();
    return false;
  }
  void* cm = dlopen("librdmacm.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (cm == nullptr) {
    apiError = dlerror();
    return false;
  }
  bool ok =
      Sym(cm, "rdma_create_event_channel", api.create_event_channel) &&
      Sym(cm, "rdma_destroy_event_channel", api.destroy_event_channel) && Sym(cm, "rdma_create_id", api.create_id) &&
      Sym(cm, "rdma_destroy_id", api.destroy_id) && Sym(cm, "rdma_bind_addr", api.bind_addr) &&
      Sym(cm, "rdma_resolve_addr", api.resolve_addr) && Sym(cm, "rdma_resolve_route", api.resolve_route) &&
      Sym(cm, "rdma_create_qp", api.create_qp) && Sym(cm, "rdma_destroy_qp", api.destroy_qp) &&
      Sym(cm, "rdma_connect", api.connect) && Sym(cm, "rdma_listen", api.listen) &&
      Sym(cm, "rdma_accept", api.accept) && Sym(cm, "rdma_reject", api.reject) &&
      Sym(cm, "rdma_disconnect", api.disconnect) && Sym(cm, "rdma_get_cm_event", api.get_cm_event) &&
      Sym(cm, "rdma_ack_cm_event", api.ack_cm_event) && Sym(cm, "rdma_event_str", api.event_str) &&
      Sym(verbs, "ibv_alloc_pd", api.alloc_pd) && Sym(verbs, "ibv_dealloc_pd", api.dealloc_pd) &&
      Sym(verbs, "ibv_reg_mr", api.reg_mr) && Sym(verbs, "ibv_dereg_mr", api.dereg_mr) &&
      Sym(verbs, "ibv_create_comp_channel", api.create_comp_channel) &&
      Sym(verbs, "ibv_destroy_comp_channel", api.destroy_comp_channel) && Sym(verbs, "ibv_create_cq", api.create_cq) &&
      Sym(verbs, "ibv_destroy_cq", api.destroy_cq) && Sym(verbs, "ibv_get_cq_event", api.get_cq_event) &&
      Sym(verbs, "ibv_ack_cq_events", api.ack_cq_events) && Sym(verbs, "ibv_get_device_name", api.get_device_name);
  ok = ok && Sym(verbs, "ibv_query_device", api.query_device);
  api.reg_mr_iova = reinterpret_cast<decltype(api.reg_mr_iova)>(dlsym(verbs, "ibv_reg_mr_iova"));
  apiLoaded = ok;
  return ok;
}

bool SetNonBlocking(int fd) {
  int fl = fcntl(fd, F_GETFL);
  return fl >= 0 && fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0;
}

bool ParseIpv4(const std::string& s, uint16_t port, sockaddr_in* out) {
  std::memset(out, 0, sizeof(*out));
  out->sin_family = AF_INET;
  out->sin_port = htons(port);
  return inet_pton(AF_INET, s.c_str(), &out->sin_addr) == 1;
}

std::string AddrString(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = "";
  if (sa->sa_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof buf);
  if (sa->sa_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof buf);
  return buf;
}

void ThrowErrno(Napi::Env env, const char* what, int err) {
  Napi::Error e = Napi::Error::New(env, std::string(what) + ": " + std::strerror(err));
  e.Set("errno", Napi::Number::New(env, err));
  e.ThrowAsJavaScriptException();
}

class Endpoint;

// One protection domain per device (verbs context), shared by every connection and memory region
// on it: a region the application exposes must be usable by whichever queue pair the peer's RDMA
// op arrives on. `anchor` is an rdma_cm id bound to the device, held while the PD lives so the
// device context librdmacm opened stays open even when no connection uses it.
struct Pd {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  uint32_t refs = 0;
  rdma_cm_id* anchor = nullptr;
};

// An application memory region (RDS_GET_MR): the registration and the JS memory it pins.
struct Mr {
  ibv_mr* mr = nullptr;
  Pd* pd = nullptr;
  Napi::ObjectReference mem;
};

// One RDMA READ/WRITE posted on a connection: its work requests, and the local memory registered
// for as long as they run.
struct RdmaOp {
  uint32_t tag = 0;
  uint32_t remaining = 0;  // work requests not yet completed
  uint32_t bytes = 0;
  bool reported = false;
  std::vector<ibv_mr*> mrs;
  std::vector<Napi::ObjectReference> mem;
};

// An op's work requests carry its tag with this bit set (slots never have it).
constexpr uint64_t kOpWr = 1ull << 32;
// Send-queue entries kept beyond the rings for RDMA work requests.
constexpr uint32_t kRdmaWrs = 256;
// The most scatter/gather entries one RDMA work request takes (the kernel's RDS_IB_MAX_SGE).
constexpr uint32_t kMaxSge = 8;

// One rdma_cm id: a listener, or a connection with (after SetupQp) its QP, CQ and rings.
struct Conn {
  uint32_t id = 0;
  Endpoint* ep = nullptr;
  rdma_cm_id* cm = nullptr;
  bool listener = false;
  Pd* pd = nullptr;
  uint32_t maxSge = 1;
  bool atomics = false;  // the device does 64-bit FADD/CSWP (atomic_cap != IBV_ATOMIC_NONE)
  uint32_t rdmaWrs = 0;  // RDMA work requests outstanding (at most kRdmaWrs)
  std::unordered_map<uint32_t, RdmaOp*> ops;
  ibv_comp_channel* cc = nullptr;
  ibv_cq* cq = nullptr;
  ibv_mr* mr = nullptr;
  bool qp = false;
  uv_poll_t* poll = nullptr;
  uint32_t slots = 0;
  uint32_t slotSize = 0;
  Napi::Reference<Napi::Buffer<uint8_t>> ring;  // keeps the registered memory alive while in use
};

void FreeRing(Napi::Env, uint8_t* data) { std::free(data); }

class Endpoint : public Napi::ObjectWrap<Endpoint> {
 public:
  static Napi::Function Define(Napi::Env env) {
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

  // new IbEndpoint(onCmEvent(id, event, status, privateData?, info?), onCompletions(id, Int32Array))
  explicit Endpoint(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Endpoint>(info), env_(info.Env()) {
    Napi::Env env = info.Env();
    if (!LoadApi()) {
      Napi::Error::New(env, "cannot load rdma-core: " + apiError).ThrowAsJavaScriptException();
      return;
    }
    if (info.Length() < 2 || !info[0].IsFunction() || !info[1].IsFunction()) {
      Napi::TypeError::New(env, "IbEndpoint(onCmEvent, onCompletions)").ThrowAsJavaScriptException();
      return;
    }
    onCm_ = Napi::Persistent(info[0].As<Napi::Function>());
    onCq_ = Napi::Persistent(info[1].As<Napi::Function>());
    ch_ = api.create_event_channel();
    if (ch_ == nullptr || !SetNonBlocking(ch_->fd)) {
      ThrowErrno(env, "rdma_create_event_channel", errno);
      return;
    }
    napi_get_uv_event_loop(env, &loop_);
    chPoll_ = new uv_poll_t;
    uv_poll_init(loop_, chPoll_, ch_->fd);
    chPoll_->data = this;
    uv_poll_start(chPoll_, UV_READABLE, [](uv_poll_t* h, int, int) { static_cast<Endpoint*>(h->data)->DrainCm(); });
    napi_add_env_cleanup_hook(env, AtExit, this);
    cleanupHook_ = true;
  }

  ~Endpoint() override { Shutdown(); }

 private:
  Napi::Env env_;
  uv_loop_t* loop_ = nullptr;
  rdma_event_channel* ch_ = nullptr;
  uv_poll_t* chPoll_ = nullptr;
  bool cleanupHook_ = false;
  bool referenced_ = true;
  Napi::FunctionReference onCm_;
  Napi::FunctionReference onCq_;
  std::unordered_map<uint32_t, Conn*> conns_;
  uint32_t nextId_ = 1;
  std::unordered_map<ibv_context*, Pd*> pds_;
  std::unordered_map<uint32_t, Mr*> mrs_;
  uint32_t nextMr_ = 1;

  // The device's PD, allocated on first use; every user holds a reference.
  Pd* AcquirePd(ibv_context* ctx) {
    auto it = pds_.find(ctx);
    if (it != pds_.end()) {
      it->second->refs++;
      return it->second;
    }
    ibv_pd* pd = api.alloc_pd(ctx);
    if (pd == nullptr) return nullptr;
    Pd* p = new Pd;
    p->ctx = ctx;
    p->pd = pd;
    p->refs = 1;
    pds_[ctx] = p;
    return p;
  }

  void ReleasePd(Pd* p) {
    if (p == nullptr || --p->refs > 0) return;
    api.dealloc_pd(p->pd);
    if (p->anchor != nullptr) api.destroy_id(p->anchor);
    pds_.erase(p->ctx);
    delete p;
  }

  void FreeOp(RdmaOp* op) {
    for (ibv_mr* m : op->mrs) api.dereg_mr(m);
    for (auto& r : op->mem) r.Reset();
    delete op;
  }

  void FreeMr(Mr* m) {
    api.dereg_mr(m->mr);
    m->mem.Reset();
    ReleasePd(m->pd);
    delete m;
  }

  // Process exit: disconnect and destroy every QP and id (one function, so removal matches).
  static void AtExit(void* self) { static_cast<Endpoint*>(self)->Shutdown(); }

  static void ClosePoll(uv_poll_t* p) {
    uv_poll_stop(p);
    uv_close(reinterpret_cast<uv_handle_t*>(p), [](uv_handle_t* h) { delete reinterpret_cast<uv_poll_t*>(h); });
  }

  Conn* NewConn(rdma_cm_id* cm) {
    Conn* c = new Conn;
    c->id = nextId_++;
    c->ep = this;
    c->cm = cm;
    if (cm != nullptr) cm->context = c;
    conns_[c->id] = c;
    return c;
  }

  Conn* Find(const Napi::CallbackInfo& info) {
    if (info.Length() < 1 || !info[0].IsNumber()) return nullptr;
    auto it = conns_.find(info[0].As<Napi::Number>().Uint32Value());
    return it == conns_.end() ? nullptr : it->second;
  }

  Conn* FindOrThrow(const Napi::CallbackInfo& info) {
    Conn* c = Find(info);
    if (c == nullptr)
      Napi::Error::New(info.Env(), "unknown or destroyed IB connection id").ThrowAsJavaScriptException();
    return c;
  }

  // Frees everything a connection holds, QP first (rdma_destroy_id needs all its events acked,
  // which DrainCm always does at once).
  void Teardown(Conn* c) {
    if (c->poll != nullptr) {
      ClosePoll(c->poll);
      c->poll = nullptr;
    }
    if (c->qp) api.destroy_qp(c->cm);
    c->qp = false;
    if (c->cq != nullptr) api.destroy_cq(c->cq);
    c->cq = nullptr;
    if (c->cc != nullptr) api.destroy_comp_channel(c->cc);
    c->cc = nullptr;
    // The QP is gone: no op's work request can still touch its local memory.
    for (auto& kv : c->ops) FreeOp(kv.second);
    c->ops.clear();
    c->rdmaWrs = 0;
    if (c->mr != nullptr) api.dereg_mr(c->mr);
    c->mr = nullptr;
    ReleasePd(c->pd);
    c->pd = nullptr;
    if (c->cm != nullptr) api.destroy_id(c->cm);
    c->cm = nullptr;
    if (!c->ring.IsEmpty()) c->ring.Reset();
    conns_.erase(c->id);
    delete c;
  }

  void Shutdown() {
    if (cleanupHook_) {
      napi_remove_env_cleanup_hook(env_, AtExit, this);
      cleanupHook_ = false;
    }
    std::vector<Conn*> all;
    for (auto& kv : conns_) all.push_back(kv.second);
    for (Conn* c : all) {
      if (c->cm != nullptr && !c->listener && c->qp) api.disconnect(c->cm);
      Teardown(c);
    }
    for (auto& kv : mrs_) FreeMr(kv.second);
    mrs_.clear();
    if (chPoll_ != nullptr) {
      ClosePoll(chPoll_);
      chPoll_ = nullptr;
    }
    if (ch_ != nullptr) api.destroy_event_channel(ch_);
    ch_ = nullptr;
  }

  void DrainCm() {
    Napi::HandleScope scope(env_);
    rdma_cm_event* ev;
    while (ch_ != nullptr && api.get_cm_event(ch_, &ev) == 0) {
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
        // A new id for the incoming connection; its listener is ev->listen_id.
        Conn* l = static_cast<Conn*>(ev->listen_id->context);
        c = NewConn(ev->id);
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

  void DrainCq(Conn* c) {
    Napi::HandleScope scope(env_);
    ibv_cq* evCq;
    void* ctx;
    unsigned n = 0;
    while (c->cc != nullptr && api.get_cq_event(c->cc, &evCq, &ctx) == 0) n++;
    if (n > 0) api.ack_cq_events(c->cq, n);
    if (c->cq == nullptr) return;
    // Re-arm before polling dry, so a completion that lands in between raises the fd again.
    ibv_req_notify_cq(c->cq, 0);
    std::vector<int32_t> batch;
    ibv_wc wc[32];
    int got;
    while ((got = ibv_poll_cq(c->cq, 32, wc)) > 0) {
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
    uint32_t id = c->id;
    Napi::Int32Array arr = Napi::Int32Array::New(env_, batch.size());
    std::memcpy(arr.Data(), batch.data(), batch.size() * sizeof(int32_t));
    onCq_.MakeCallback(Value(), {Napi::Number::New(env_, id), arr});
  }

  // One work request of an RDMA op completed: the op is reported once, with the first error or,
  // when its last work request is done, success; its local memory is released then.
  void OpCompleted(Conn* c, const ibv_wc& wc, std::vector<int32_t>& batch) {
    uint32_t tag = static_cast<uint32_t>(wc.wr_id);
    auto it = c->ops.find(tag);
    if (it == c->ops.end()) return;
    RdmaOp* op = it->second;
    if (c->rdmaWrs > 0) c->rdmaWrs--;
    if (wc.status != IBV_WC_SUCCESS && !op->reported) {
      op->reported = true;
      batch.push_back(static_cast<int32_t>(tag));
      batch.push_back(static_cast<int32_t>(wc.status));
      batch.push_back(0);
    }
    if (--op->remaining > 0) return;
    if (!op->reported) {
      batch.push_back(static_cast<int32_t>(tag));
      batch.push_back(0);
      batch.push_back(static_cast<int32_t>(op->bytes));
    }
    c->ops.erase(it);
    FreeOp(op);
  }

  // The bytes of a Uint8Array (a Buffer or any view), and a reference that keeps them alive.
  static bool Bytes(Napi::Value v, uint8_t** data, size_t* len) {
    if (!v.IsTypedArray()) return false;
    auto ta = v.As<Napi::TypedArray>();
    if (ta.TypedArrayType() != napi_uint8_array) return false;
    auto u8 = v.As<Napi::Uint8Array>();
    *data = u8.Data();
    *len = u8.ByteLength();
    return true;
  }

  // regMr(localAddress, Uint8Array, readWrite) -> [handle, rkey, offset]. Registers the memory
  // zero-based as the kernel's RDS does: I/O virtual address 0 is the start of its first page, so
  // its first byte is at `offset` (its offset in that page; uverbs requires the I/O address and
  // the memory to agree modulo the page size). In the PD of the device owning the address: remote
  // read always, remote write with readWrite. The memory is referenced until deregMr (or close).
  Napi::Value RegMr(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    sockaddr_in sin;
    uint8_t* data;
    size_t len;
    if (info.Length() < 3 || !info[0].IsString() || !ParseIpv4(info[0].As<Napi::String>(), 0, &sin) ||
        !Bytes(info[1], &data, &len) || len == 0 || !info[2].IsBoolean()) {
      Napi::TypeError::New(env, "regMr(ipv4Address, nonEmptyUint8Array, readWrite)").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    if (api.reg_mr_iova == nullptr) {
      Napi::Error e = Napi::Error::New(env,
                                       "RDMA memory registration needs ibv_reg_mr_iova (libibverbs 1.8 / rdma-core 25 "
                                       "or newer); this libibverbs lacks it");
      e.Set("errno", Napi::Number::New(env, EOPNOTSUPP));
      e.ThrowAsJavaScriptException();
      return env.Undefined();
    }
    rdma_cm_id* cm;
    if (api.create_id(nullptr, &cm, nullptr, RDMA_PS_TCP) != 0) {
      ThrowErrno(env, "rdma_create_id", errno);
      return env.Undefined();
    }
    if (api.bind_addr(cm, reinterpret_cast<sockaddr*>(&sin)) != 0 || cm->verbs == nullptr) {
      int err = errno != 0 ? errno : EADDRNOTAVAIL;
      api.destroy_id(cm);
      ThrowErrno(env, "rdma_bind_addr (no RDMA device owns the address)", err);
      return env.Undefined();
    }
    Pd* pd = AcquirePd(cm->verbs);
    if (pd == nullptr) {
      int err = errno;
      api.destroy_id(cm);
      ThrowErrno(env, "ibv_alloc_pd", err);
      return env.Undefined();
    }
    if (pd->anchor == nullptr) pd->anchor = cm;
    else api.destroy_id(cm);
    int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
    if (info[2].As<Napi::Boolean>().Value()) access |= IBV_ACCESS_REMOTE_WRITE;
    // Atomics on the region follow remote write (an atomic writes), where the device has them.
    ibv_device_attr da;
    if ((access & IBV_ACCESS_REMOTE_WRITE) && api.query_device(pd->ctx, &da) == 0 && da.atomic_cap != IBV_ATOMIC_NONE)
      access |= IBV_ACCESS_REMOTE_ATOMIC;
    uint64_t offset = reinterpret_cast<uintptr_t>(data) & (static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) - 1);
    ibv_mr* mr = api.reg_mr_iova(pd->pd, data, len, offset, access);
    if (mr == nullptr) {
      int err = errno;
      ReleasePd(pd);
      ThrowErrno(env, "ibv_reg_mr_iova", err);
      return env.Undefined();
    }
    Mr* m = new Mr;
    m->mr = mr;
    m->pd = pd;
    m->mem = Napi::Persistent(info[1].As<Napi::Object>());
    uint32_t h = nextMr_++;
    mrs_[h] = m;
    Napi::Array out = Napi::Array::New(env, 3);
    out.Set(0u, Napi::Number::New(env, h));
    out.Set(1u, Napi::Number::New(env, mr->rkey));
    out.Set(2u, Napi::Number::New(env, static_cast<double>(offset)));
    return out;
  }

  // deregMr(handle) -> true if it was registered. The memory is no longer referenced.
  Napi::Value DeregMr(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (info.Length() < 1 || !info[0].IsNumber()) return Napi::Boolean::New(env, false);
    auto it = mrs_.find(info[0].As<Napi::Number>().Uint32Value());
    if (it == mrs_.end()) return Napi::Boolean::New(env, false);
    FreeMr(it->second);
    mrs_.erase(it);
    return Napi::Boolean::New(env, true);
  }

  // postRdma(id, tag, write, remoteAddr (bigint), rkey, [Uint8Array...]) -> 0 or an errno (EAGAIN:
  // no room in the send queue now, retry after a completion). Registers the local memory for the
  // op's duration and posts RDMA WRITE or READ work requests (at most maxSge entries each, at
  // consecutive remote addresses); the op's completion comes as [tag, status, bytes] in a batch.
  Napi::Value PostRdma(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Conn* c = FindOrThrow(info);
    if (c == nullptr) return env.Undefined();
    bool lossless = false;
    if (info.Length() < 6 || !info[1].IsNumber() || !(info[2].IsBoolean() || info[2].IsNumber()) ||
        !info[3].IsBigInt() || !info[4].IsNumber() || !info[5].IsArray()) {
      Napi::TypeError::New(env, "postRdma(id, tag, write | kind, remoteAddr, rkey, buffers, compareAdd?, swap?)")
          .ThrowAsJavaScriptException();
      return env.Undefined();
    }
    if (!c->qp || c->pd == nullptr) return Napi::Number::New(env, ENOTCONN);
    uint32_t tag = info[1].As<Napi::Number>().Uint32Value();
    // kind: 0 RDMA WRITE, 1 RDMA READ, 2 atomic fetch-and-add, 3 atomic compare-and-swap.
    uint32_t kind =
        info[2].IsBoolean() ? (info[2].As<Napi::Boolean>().Value() ? 0 : 1) : info[2].As<Napi::Number>().Uint32Value();
    bool write = kind == 0;
    bool atomic = kind == 2 || kind == 3;
    uint64_t compareAdd = 0, swap = 0;
    if (atomic) {
      bool l1 = true, l2 = true;
      if (info.Length() > 6 && info[6].IsBigInt()) compareAdd = info[6].As<Napi::BigInt>().Uint64Value(&l1);
      if (info.Length() > 7 && info[7].IsBigInt()) swap = info[7].As<Napi::BigInt>().Uint64Value(&l2);
      if (!c->atomics) return Napi::Number::New(env, EOPNOTSUPP);
      if (!l1 || !l2) return Napi::Number::New(env, EINVAL);
    }
    if (kind > 3) return Napi::Number::New(env, EINVAL);
    uint64_t raddr = info[3].As<Napi::BigInt>().Uint64Value(&lossless);
    uint32_t rkey = info[4].As<Napi::Number>().Uint32Value();
    Napi::Array bufs = info[5].As<Napi::Array>();
    uint32_t n = bufs.Length();
    if (tag == 0 || !lossless || n == 0 || c->ops.count(tag) != 0) return Napi::Number::New(env, EINVAL);
    uint32_t nwr = (n + c->maxSge - 1) / c->maxSge;
    if (c->rdmaWrs + nwr > kRdmaWrs) return Napi::Number::New(env, nwr > kRdmaWrs ? EMSGSIZE : EAGAIN);
    RdmaOp* op = new RdmaOp;
    op->tag = tag;
    std::vector<ibv_sge> sges;
    sges.reserve(n);
    for (uint32_t i = 0; i < n; i++) {
      uint8_t* data;
      size_t len;
      Napi::Value v = bufs.Get(i);
      if (!Bytes(v, &data, &len)) {
        FreeOp(op);
        return Napi::Number::New(env, EINVAL);
      }
      if (len == 0) continue;
      ibv_mr* m = api.reg_mr(c->pd->pd, data, len, IBV_ACCESS_LOCAL_WRITE);
      if (m == nullptr) {
        int err = errno;
        FreeOp(op);
        return Napi::Number::New(env, err != 0 ? err : ENOMEM);
      }
      op->mrs.push_back(m);
      op->mem.push_back(Napi::Persistent(v.As<Napi::Object>()));
      ibv_sge sge;
      sge.addr = reinterpret_cast<uintptr_t>(data);
      sge.length = static_cast<uint32_t>(len);
      sge.lkey = m->lkey;
      sges.push_back(sge);
      op->bytes += static_cast<uint32_t>(len);
    }
    if (sges.empty() || (atomic && (sges.size() != 1 || sges[0].length != 8 || (raddr & 7) != 0))) {
      FreeOp(op);
      return Napi::Number::New(env, EINVAL);
    }
    nwr = (static_cast<uint32_t>(sges.size()) + c->maxSge - 1) / c->maxSge;
    std::vector<ibv_send_wr> wrs(nwr);
    uint64_t at = raddr;
    for (uint32_t w = 0; w < nwr; w++) {
      ibv_send_wr& wr = wrs[w];
      std::memset(&wr, 0, sizeof wr);
      uint32_t first = w * c->maxSge;
      uint32_t count = std::min<uint32_t>(c->maxSge, static_cast<uint32_t>(sges.size()) - first);
      wr.wr_id = kOpWr | tag;
      wr.sg_list = &sges[first];
      wr.num_sge = static_cast<int>(count);
      wr.send_flags = IBV_SEND_SIGNALED;
      if (atomic) {
        wr.opcode = kind == 2 ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_ATOMIC_CMP_AND_SWP;
        wr.wr.atomic.remote_addr = at;
        wr.wr.atomic.compare_add = compareAdd;
        wr.wr.atomic.swap = swap;
        wr.wr.atomic.rkey = rkey;
      } else {
        wr.opcode = write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
        wr.wr.rdma.remote_addr = at;
        wr.wr.rdma.rkey = rkey;
      }
      for (uint32_t k = 0; k < count; k++) at += sges[first + k].length;
      wr.next = w + 1 < nwr ? &wrs[w + 1] : nullptr;
    }
    ibv_send_wr* bad = nullptr;
    int rc = ibv_post_send(c->cm->qp, wrs.data(), &bad);
    if (rc != 0) {
      // Work requests before `bad` were posted: their completions still name the op, so it stays
      // (a QP that refuses a post is broken; the connection is dropped and the op reported then).
      uint32_t posted = 0;
      for (ibv_send_wr* p = wrs.data(); p != bad && p != nullptr; p = p->next) posted++;
      if (posted == 0) {
        FreeOp(op);
        return Napi::Number::New(env, rc);
      }
      nwr = posted;
    }
    op->remaining = nwr;
    c->rdmaWrs += nwr;
    c->ops[tag] = op;
    return Napi::Number::New(env, rc);
  }

  // pollOps(id) -> Int32Array [tag, status, bytes]*: before a connection is destroyed, the RDMA
  // ops whose completions are already in its CQ (the kernel drains its rings at shutdown too), so
  // an op that finished, or failed on the peer's refusal, is not taken for one cut off. Other
  // completions are discarded: the connection is going away.
  Napi::Value PollOps(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Conn* c = Find(info);
    std::vector<int32_t> batch;
    if (c != nullptr && c->cq != nullptr) {
      ibv_wc wc[32];
      int got;
      while ((got = ibv_poll_cq(c->cq, 32, wc)) > 0) {
        for (int i = 0; i < got; i++)
          if (wc[i].wr_id & kOpWr) OpCompleted(c, wc[i], batch);
      }
    }
    Napi::Int32Array arr = Napi::Int32Array::New(env, batch.size());
    if (!batch.empty()) std::memcpy(arr.Data(), batch.data(), batch.size() * sizeof(int32_t));
    return arr;
  }

  // listen(address, port) -> id
  Napi::Value Listen(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    sockaddr_in sin;
    if (info.Length() < 2 || !info[0].IsString() || !info[1].IsNumber() ||
        !ParseIpv4(info[0].As<Napi::String>(), info[1].As<Napi::Number>().Uint32Value(), &sin)) {
      Napi::TypeError::New(env, "listen(ipv4Address, port)").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    rdma_cm_id* cm;
    if (api.create_id(ch_, &cm, nullptr, RDMA_PS_TCP) != 0) {
      ThrowErrno(env, "rdma_create_id", errno);
      return env.Undefined();
    }
    if (api.bind_addr(cm, reinterpret_cast<sockaddr*>(&sin)) != 0 || api.listen(cm, 128) != 0) {
      int err = errno;
      api.destroy_id(cm);
      ThrowErrno(env, "rdma_bind_addr/rdma_listen", err);
      return env.Undefined();
    }
    Conn* c = NewConn(cm);
    c->listener = true;
    return Napi::Number::New(env, c->id);
  }

  // connect(srcAddress, dstAddress, port, timeoutMs) -> id; events follow (ROUTE_RESOLVED or errors)
  Napi::Value Connect(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    sockaddr_in src, dst;
    if (info.Length() < 4 || !info[0].IsString() || !info[1].IsString() || !info[2].IsNumber() || !info[3].IsNumber() ||
        !ParseIpv4(info[0].As<Napi::String>(), 0, &src) ||
        !ParseIpv4(info[1].As<Napi::String>(), info[2].As<Napi::Number>().Uint32Value(), &dst)) {
      Napi::TypeError::New(env, "connect(srcIpv4, dstIpv4, port, timeoutMs)").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    rdma_cm_id* cm;
    if (api.create_id(ch_, &cm, nullptr, RDMA_PS_TCP) != 0) {
      ThrowErrno(env, "rdma_create_id", errno);
      return env.Undefined();
    }
    Conn* c = NewConn(cm);
    if (api.resolve_addr(cm, reinterpret_cast<sockaddr*>(&src), reinterpret_cast<sockaddr*>(&dst),
                         info[3].As<Napi::Number>().Int32Value()) != 0) {
      int err = errno;
      Teardown(c);
      ThrowErrno(env, "rdma_resolve_addr", err);
      return env.Undefined();
    }
    return Napi::Number::New(env, c->id);
  }

  // setupQp(id, slots, slotSize) -> Buffer of slots * slotSize registered bytes. Creates the PD,
  // completion channel, CQ and RC QP; the caller posts receives into its receive slots.
  Napi::Value SetupQp(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Conn* c = FindOrThrow(info);
    if (c == nullptr) return env.Undefined();
    if (info.Length() < 4 || !info[1].IsNumber() || !info[2].IsNumber() || !info[3].IsNumber()) {
      Napi::TypeError::New(env, "setupQp(id, sendSlots, recvSlots, slotSize)").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    if (c->qp || c->cm == nullptr || c->cm->verbs == nullptr) {
      Napi::Error::New(env, "setupQp: connection has no device yet or already has a QP").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    uint32_t sendSlots = info[1].As<Napi::Number>().Uint32Value();
    uint32_t recvSlots = info[2].As<Napi::Number>().Uint32Value();
    uint32_t slotSize = info[3].As<Napi::Number>().Uint32Value();
    size_t bytes = static_cast<size_t>(sendSlots + recvSlots) * slotSize;
    void* mem = nullptr;
    if (sendSlots == 0 || recvSlots == 0 || slotSize == 0 || posix_memalign(&mem, 4096, bytes) != 0) {
      Napi::Error::New(env, "setupQp: bad ring geometry or out of memory").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    std::memset(mem, 0, bytes);
    auto fail = [&](const char* what) {
      int err = errno;
      if (c->mr == nullptr) std::free(mem);
      Teardown(c);
      ThrowErrno(env, what, err);
      return env.Undefined();
    };
    c->slots = sendSlots + recvSlots;
    c->slotSize = slotSize;
    c->pd = AcquirePd(c->cm->verbs);
    if (c->pd == nullptr) return fail("ibv_alloc_pd");
    ibv_device_attr da;
    std::memset(&da, 0, sizeof da);
    c->maxSge = api.query_device(c->cm->verbs, &da) == 0 && da.max_sge > 0
                    ? std::min<uint32_t>(kMaxSge, static_cast<uint32_t>(da.max_sge))
                    : 1;
    c->atomics = da.atomic_cap != IBV_ATOMIC_NONE;
    c->cc = api.create_comp_channel(c->cm->verbs);
    if (c->cc == nullptr || !SetNonBlocking(c->cc->fd)) return fail("ibv_create_comp_channel");
    c->cq = api.create_cq(c->cm->verbs, static_cast<int>(sendSlots + kRdmaWrs + recvSlots), c, c->cc, 0);
    if (c->cq == nullptr) return fail("ibv_create_cq");
    ibv_qp_init_attr qa;
    std::memset(&qa, 0, sizeof qa);
    qa.send_cq = c->cq;
    qa.recv_cq = c->cq;
    qa.qp_type = IBV_QPT_RC;
    qa.sq_sig_all = 1;
    qa.cap.max_send_wr = sendSlots + kRdmaWrs;
    qa.cap.max_recv_wr = recvSlots;
    qa.cap.max_send_sge = c->maxSge;
    qa.cap.max_recv_sge = 1;
    if (api.create_qp(c->cm, c->pd->pd, &qa) != 0) return fail("rdma_create_qp");
    c->qp = true;
    c->mr = api.reg_mr(c->pd->pd, mem, bytes, IBV_ACCESS_LOCAL_WRITE);
    if (c->mr == nullptr) return fail("ibv_reg_mr");
    Napi::Buffer<uint8_t> buf = Napi::Buffer<uint8_t>::New(env, static_cast<uint8_t*>(mem), bytes, FreeRing);
    c->ring = Napi::Persistent(buf);
    ibv_req_notify_cq(c->cq, 0);
    c->poll = new uv_poll_t;
    uv_poll_init(loop_, c->poll, c->cc->fd);
    c->poll->data = c;
    uv_poll_start(c->poll, UV_READABLE, [](uv_poll_t* h, int, int) {
      Conn* cc = static_cast<Conn*>(h->data);
      cc->ep->DrainCq(cc);
    });
    if (!referenced_) uv_unref(reinterpret_cast<uv_handle_t*>(c->poll));
    return buf;
  }

  static bool ConnParam(const Napi::CallbackInfo& info, rdma_conn_param* p) {
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

  Napi::Value RdmaConnect(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Conn* c = FindOrThrow(info);
    rdma_conn_param p;
    if (c == nullptr) return env.Undefined();
    if (!ConnParam(info, &p)) {
      Napi::TypeError::New(env, "rdmaConnect(id, privateData <= 56 bytes)").ThrowAsJavaScriptException();
    } else if (api.connect(c->cm, &p) != 0) {
      ThrowErrno(env, "rdma_connect", errno);
    }
    return env.Undefined();
  }

  Napi::Value Accept(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Conn* c = FindOrThrow(info);
    rdma_conn_param p;
    if (c == nullptr) return env.Undefined();
    if (!ConnParam(info, &p)) {
      Napi::TypeError::New(env, "accept(id, privateData <= 56 bytes)").ThrowAsJavaScriptException();
    } else if (api.accept(c->cm, &p) != 0) {
      ThrowErrno(env, "rdma_accept", errno);
    }
    return env.Undefined();
  }

  // reject(id, privateData?) then destroys the id.
  Napi::Value Reject(const Napi::CallbackInfo& info) {
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
    api.reject(c->cm, data, len);
    Teardown(c);
    return env.Undefined();
  }

  // postSend(id, Int32Array [slot, length, flags]*) -> 0 or errno. flags: 1 = solicited, 2 = fence
  // (waits for the RDMA READs posted before it: RDS_RDMA_FENCE).
  Napi::Value PostSend(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Conn* c = FindOrThrow(info);
    if (c == nullptr) return env.Undefined();
    if (!c->qp || c->mr == nullptr || info.Length() < 2 || !info[1].IsTypedArray())
      return Napi::Number::New(env, ENOTCONN);
    auto a = info[1].As<Napi::Int32Array>();
    size_t n = a.ElementLength() / 3;
    ibv_send_wr wrs[64];
    ibv_sge sges[64];
    for (size_t base = 0; base < n; base += 64) {
      size_t m = n - base < 64 ? n - base : 64;
      for (size_t i = 0; i < m; i++) {
        uint32_t slot = static_cast<uint32_t>(a[(base + i) * 3]);
        uint32_t len = static_cast<uint32_t>(a[(base + i) * 3 + 1]);
        if (slot >= c->slots || len > c->slotSize) return Napi::Number::New(env, EINVAL);
        sges[i].addr =
            reinterpret_cast<uintptr_t>(static_cast<uint8_t*>(c->mr->addr) + static_cast<size_t>(slot) * c->slotSize);
        sges[i].length = len;
        sges[i].lkey = c->mr->lkey;
        std::memset(&wrs[i], 0, sizeof wrs[i]);
        wrs[i].wr_id = slot;
        wrs[i].sg_list = &sges[i];
        wrs[i].num_sge = 1;
        wrs[i].opcode = IBV_WR_SEND;
        int32_t f = a[(base + i) * 3 + 2];
        wrs[i].send_flags = IBV_SEND_SIGNALED | ((f & 1) ? IBV_SEND_SOLICITED : 0) | ((f & 2) ? IBV_SEND_FENCE : 0);
        wrs[i].next = i + 1 < m ? &wrs[i + 1] : nullptr;
      }
      ibv_send_wr* bad = nullptr;
      int rc = ibv_post_send(c->cm->qp, wrs, &bad);
      if (rc != 0) return Napi::Number::New(env, rc);
    }
    return Napi::Number::New(env, 0);
  }

  // postRecv(id, Int32Array [slot]*) -> 0 or errno
  Napi::Value PostRecv(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Conn* c = FindOrThrow(info);
    if (c == nullptr) return env.Undefined();
    if (!c->qp || c->mr == nullptr || info.Length() < 2 || !info[1].IsTypedArray())
      return Napi::Number::New(env, ENOTCONN);
    auto a = info[1].As<Napi::Int32Array>();
    size_t n = a.ElementLength();
    ibv_recv_wr wrs[64];
    ibv_sge sges[64];
    for (size_t base = 0; base < n; base += 64) {
      size_t m = n - base < 64 ? n - base : 64;
      for (size_t i = 0; i < m; i++) {
        uint32_t slot = static_cast<uint32_t>(a[base + i]);
        if (slot >= c->slots) return Napi::Number::New(env, EINVAL);
        sges[i].addr =
            reinterpret_cast<uintptr_t>(static_cast<uint8_t*>(c->mr->addr) + static_cast<size_t>(slot) * c->slotSize);
        sges[i].length = c->slotSize;
        sges[i].lkey = c->mr->lkey;
        std::memset(&wrs[i], 0, sizeof wrs[i]);
        wrs[i].wr_id = slot;
        wrs[i].sg_list = &sges[i];
        wrs[i].num_sge = 1;
        wrs[i].next = i + 1 < m ? &wrs[i + 1] : nullptr;
      }
      ibv_recv_wr* bad = nullptr;
      int rc = ibv_post_recv(c->cm->qp, wrs, &bad);
      if (rc != 0) return Napi::Number::New(env, rc);
    }
    return Napi::Number::New(env, 0);
  }

  Napi::Value Disconnect(const Napi::CallbackInfo& info) {
    Conn* c = Find(info);
    if (c != nullptr && c->cm != nullptr && !c->listener) api.disconnect(c->cm);
    return info.Env().Undefined();
  }

  // destroy(id): QP, CQ, memory registration and id are gone when this returns. Idempotent.
  Napi::Value Destroy(const Napi::CallbackInfo& info) {
    Conn* c = Find(info);
    if (c != nullptr) Teardown(c);
    return info.Env().Undefined();
  }

  Napi::Value Close(const Napi::CallbackInfo& info) {
    Shutdown();
    return info.Env().Undefined();
  }

  void SetRef(bool ref) {
    referenced_ = ref;
    auto apply = [ref](uv_poll_t* p) {
      if (p == nullptr) return;
      if (ref) uv_ref(reinterpret_cast<uv_handle_t*>(p));
      else uv_unref(reinterpret_cast<uv_handle_t*>(p));
    };
    apply(chPoll_);
    for (auto& kv : conns_) apply(kv.second->poll);
  }

  Napi::Value Ref(const Napi::CallbackInfo& info) {
    SetRef(true);
    return info.Env().Undefined();
  }

  Napi::Value Unref(const Napi::CallbackInfo& info) {
    SetRef(false);
    return info.Env().Undefined();
  }
};

// ibLoad() -> null, or the reason rdma-core cannot be used.
Napi::Value IbLoad(const Napi::CallbackInfo& info) {
  if (LoadApi()) return info.Env().Null();
  return Napi::String::New(info.Env(), apiError);
}

// ibDeviceFor(ipv4) -> name of the RDMA device that owns the address, or null (the kernel's
// rds_ib_laddr_check: bind an rdma_cm id to it and see whether a device came with it).
Napi::Value IbDeviceFor(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  sockaddr_in sin;
  if (!LoadApi() || info.Length() < 1 || !info[0].IsString() || !ParseIpv4(info[0].As<Napi::String>(), 0, &sin)) {
    return env.Null();
  }
  rdma_cm_id* cm;
  if (api.create_id(nullptr, &cm, nullptr, RDMA_PS_TCP) != 0) return env.Null();
  Napi::Value out = env.Null();
  if (api.bind_addr(cm, reinterpret_cast<sockaddr*>(&sin)) == 0 && cm->verbs != nullptr) {
    out = Napi::String::New(env, api.get_device_name(cm->verbs->device));
  }
  api.destroy_id(cm);
  return out;
}

// ibAtomics(ipv4) -> whether the RDMA device owning the address does 64-bit atomics (FADD, CSWP).
Napi::Value IbAtomics(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  sockaddr_in sin;
  if (!LoadApi() || info.Length() < 1 || !info[0].IsString() || !ParseIpv4(info[0].As<Napi::String>(), 0, &sin)) {
    return Napi::Boolean::New(env, false);
  }
  rdma_cm_id* cm;
  if (api.create_id(nullptr, &cm, nullptr, RDMA_PS_TCP) != 0) return Napi::Boolean::New(env, false);
  bool yes = false;
  ibv_device_attr da;
  if (api.bind_addr(cm, reinterpret_cast<sockaddr*>(&sin)) == 0 && cm->verbs != nullptr &&
      api.query_device(cm->verbs, &da) == 0)
    yes = da.atomic_cap != IBV_ATOMIC_NONE;
  api.destroy_id(cm);
  return Napi::Boolean::New(env, yes);
}

}  // namespace

void InitIb(Napi::Env env, Napi::Object exports) {
  exports.Set("IbEndpoint", Endpoint::Define(env));
  exports.Set("ibLoad", Napi::Function::New(env, IbLoad, "ibLoad"));
  exports.Set("ibDeviceFor", Napi::Function::New(env, IbDeviceFor, "ibDeviceFor"));
  exports.Set("ibAtomics", Napi::Function::New(env, IbAtomics, "ibAtomics"));
}

}  // namespace rds_native
