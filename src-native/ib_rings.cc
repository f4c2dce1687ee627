// IbEndpoint: a connection's queue pair and its send and receive rings (one registered buffer of
// fixed-size slots that JavaScript reads and writes), and posting sends and receives on them.
#include "ib_endpoint.h"
#include <cerrno>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include "ib_util.h"

namespace rds_native {

namespace {

void FreeRing(Napi::Env, uint8_t* data) { std::free(data); }

}  // namespace

// setupQp(id, sendSlots, recvSlots, slotSize) -> Buffer of slots * slotSize registered bytes.
// Creates the PD, completion channel, CQ and RC QP; the caller posts receives into its receive
// slots. On failure the connection is destroyed (its owners release what was made).
Napi::Value Endpoint::SetupQp(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Conn* c = FindOrThrow(info);
  if (c == nullptr) return env.Undefined();
  if (info.Length() < 4 || !info[1].IsNumber() || !info[2].IsNumber() || !info[3].IsNumber()) {
    Napi::TypeError::New(env, "setupQp(id, sendSlots, recvSlots, slotSize)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  if (c->HasQp() || !c->cm || c->cm->verbs == nullptr) {
    Napi::Error::New(env, "setupQp: connection has no device yet or already has a QP").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  uint32_t sendSlots = info[1].As<Napi::Number>().Uint32Value();
  uint32_t recvSlots = info[2].As<Napi::Number>().Uint32Value();
  uint32_t slotSize = info[3].As<Napi::Number>().Uint32Value();
  size_t bytes = static_cast<size_t>(sendSlots + recvSlots) * slotSize;
  void* raw = nullptr;
  if (sendSlots == 0 || recvSlots == 0 || slotSize == 0 || posix_memalign(&raw, 4096, bytes) != 0) {
    Napi::Error::New(env, "setupQp: bad ring geometry or out of memory").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  AlignedMem mem(static_cast<uint8_t*>(raw));
  std::memset(mem.get(), 0, bytes);
  auto fail = [&](const char* what) {
    int err = errno;
    Drop(c);
    ThrowErrno(env, what, err);
    return env.Undefined();
  };
  ibv_context* verbs = c->cm->verbs;
  c->slots = sendSlots + recvSlots;
  c->slotSize = slotSize;
  c->pd = AcquirePd(verbs);
  if (!c->pd) return fail("ibv_alloc_pd");
  ibv_device_attr da;
  std::memset(&da, 0, sizeof da);
  c->maxSge = api.query_device(verbs, &da) == 0 && da.max_sge > 0
                  ? std::min<uint32_t>(kMaxSge, static_cast<uint32_t>(da.max_sge))
                  : 1;
  c->atomics = da.atomic_cap != IBV_ATOMIC_NONE;
  c->cc.reset(api.create_comp_channel(verbs));
  if (!c->cc || !SetNonBlocking(c->cc->fd)) return fail("ibv_create_comp_channel");
  c->cq.reset(api.create_cq(verbs, static_cast<int>(sendSlots + kRdmaWrs + recvSlots), c, c->cc.get(), 0));
  if (!c->cq) return fail("ibv_create_cq");
  ibv_qp_init_attr qa;
  std::memset(&qa, 0, sizeof qa);
  qa.send_cq = c->cq.get();
  qa.recv_cq = c->cq.get();
  qa.qp_type = IBV_QPT_RC;
  qa.sq_sig_all = 1;
  qa.cap.max_send_wr = sendSlots + kRdmaWrs;
  qa.cap.max_recv_wr = recvSlots;
  qa.cap.max_send_sge = c->maxSge;
  qa.cap.max_recv_sge = 1;
  if (api.create_qp(c->cm.get(), c->pd->pd.get(), &qa) != 0) return fail("rdma_create_qp");
  c->qp.reset(c->cm.get());
  c->ringMr.reset(api.reg_mr(c->pd->pd.get(), mem.get(), bytes, IBV_ACCESS_LOCAL_WRITE));
  if (!c->ringMr) return fail("ibv_reg_mr");
  // From here the Buffer owns the memory (FreeRing when it is collected); the connection keeps
  // the Buffer referenced for as long as the registration lives.
  Napi::Buffer<uint8_t> buf = Napi::Buffer<uint8_t>::New(env, mem.release(), bytes, FreeRing);
  c->ring = Napi::Persistent(buf);
  ibv_req_notify_cq(c->cq.get(), 0);
  c->poll = PollReadable(loop_, c->cc->fd, c, [](uv_poll_t* h, int, int) {
    Conn* conn = static_cast<Conn*>(h->data);
    conn->ep->DrainCq(conn);
  });
  if (!c->poll) {
    errno = EBADF;
    return fail("uv_poll_init (completion channel)");
  }
  if (!referenced_) SetHandleRef(c->poll.get(), false);
  return buf;
}

// postSend(id, Int32Array [slot, length, flags]*) -> 0 or errno. flags: 1 = solicited, 2 = fence
// (waits for the RDMA READs posted before it: RDS_RDMA_FENCE).
Napi::Value Endpoint::PostSend(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Conn* c = FindOrThrow(info);
  if (c == nullptr) return env.Undefined();
  if (!c->HasQp() || !c->ringMr || info.Length() < 2 || !info[1].IsTypedArray())
    return Napi::Number::New(env, ENOTCONN);
  auto a = info[1].As<Napi::Int32Array>();
  size_t n = a.ElementLength() / 3;
  uint8_t* base0 = static_cast<uint8_t*>(c->ringMr->addr);
  ibv_send_wr wrs[64];
  ibv_sge sges[64];
  for (size_t base = 0; base < n; base += 64) {
    size_t m = n - base < 64 ? n - base : 64;
    for (size_t i = 0; i < m; i++) {
      uint32_t slot = static_cast<uint32_t>(a[(base + i) * 3]);
      uint32_t len = static_cast<uint32_t>(a[(base + i) * 3 + 1]);
      if (slot >= c->slots || len > c->slotSize) return Napi::Number::New(env, EINVAL);
      sges[i].addr = reinterpret_cast<uintptr_t>(base0 + static_cast<size_t>(slot) * c->slotSize);
      sges[i].length = len;
      sges[i].lkey = c->ringMr->lkey;
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
Napi::Value Endpoint::PostRecv(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Conn* c = FindOrThrow(info);
  if (c == nullptr) return env.Undefined();
  if (!c->HasQp() || !c->ringMr || info.Length() < 2 || !info[1].IsTypedArray())
    return Napi::Number::New(env, ENOTCONN);
  auto a = info[1].As<Napi::Int32Array>();
  size_t n = a.ElementLength();
  uint8_t* base0 = static_cast<uint8_t*>(c->ringMr->addr);
  ibv_recv_wr wrs[64];
  ibv_sge sges[64];
  for (size_t base = 0; base < n; base += 64) {
    size_t m = n - base < 64 ? n - base : 64;
    for (size_t i = 0; i < m; i++) {
      uint32_t slot = static_cast<uint32_t>(a[base + i]);
      if (slot >= c->slots) return Napi::Number::New(env, EINVAL);
      sges[i].addr = reinterpret_cast<uintptr_t>(base0 + static_cast<size_t>(slot) * c->slotSize);
      sges[i].length = c->slotSize;
      sges[i].lkey = c->ringMr->lkey;
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

}  // namespace rds_native
